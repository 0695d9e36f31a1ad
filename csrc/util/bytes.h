/* Little-endian encoding for wire formats, and a bounds-checked reader that
 * every decoder uses so that no length from a peer is trusted unchecked. */
#ifndef DSM_UTIL_BYTES_H
#define DSM_UTIL_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* One unaligned load or store each (memcpy), swapped on a big-endian host:
 * written as byte loops, GCC at -O2 left them as loops of eight shifts in
 * the decoders on hot paths (own's owner records). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define DSM_LE16(v) __builtin_bswap16(v)
#define DSM_LE32(v) __builtin_bswap32(v)
#define DSM_LE64(v) __builtin_bswap64(v)
#else
#define DSM_LE16(v) (v)
#define DSM_LE32(v) (v)
#define DSM_LE64(v) (v)
#endif
static inline void dsm_put_u16(uint8_t *p, uint16_t v) { v = DSM_LE16(v); memcpy(p, &v, 2); }
static inline void dsm_put_u32(uint8_t *p, uint32_t v) { v = DSM_LE32(v); memcpy(p, &v, 4); }
static inline void dsm_put_u64(uint8_t *p, uint64_t v) { v = DSM_LE64(v); memcpy(p, &v, 8); }
static inline uint16_t dsm_get_u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return DSM_LE16(v); }
static inline uint32_t dsm_get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return DSM_LE32(v); }
static inline uint64_t dsm_get_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return DSM_LE64(v); }

/* A cursor over untrusted bytes: every take fails (ok = 0) instead of overrunning. */
typedef struct dsm_reader {
    const uint8_t *p;
    size_t left;
    int ok;
} dsm_reader_t;

static inline dsm_reader_t dsm_reader(const void *data, size_t len)
{
    dsm_reader_t r = {(const uint8_t *)data, len, 1};
    return r;
}
static inline const uint8_t *dsm_take(dsm_reader_t *r, size_t n)
{
    if (!r->ok || r->left < n) { r->ok = 0; return NULL; }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}
static inline uint16_t dsm_take_u16(dsm_reader_t *r) { const uint8_t *p = dsm_take(r, 2); return p ? dsm_get_u16(p) : 0; }
static inline uint32_t dsm_take_u32(dsm_reader_t *r) { const uint8_t *p = dsm_take(r, 4); return p ? dsm_get_u32(p) : 0; }
static inline uint64_t dsm_take_u64(dsm_reader_t *r) { const uint8_t *p = dsm_take(r, 8); return p ? dsm_get_u64(p) : 0; }
/* Message framing, the one helper every module's codec uses: a message is
 * the header {u32 magic, u16 version, u16 type, u32 body length} the
 * layers' formats share, then its body. Each format has its own magic and
 * version; the body length counts every byte after the header. */
enum { DSM_MSG_HEADER_LEN = 12 };

/* The header alone: 1 when it was there and magic and version are the
 * expected ones; type and body length are for the caller to judge. */
static inline int dsm_take_msg_header(dsm_reader_t *r, uint32_t magic, uint16_t version, uint16_t *type,
                                      uint32_t *body_len)
{
    uint32_t m = dsm_take_u32(r);
    uint16_t v = dsm_take_u16(r);
    *type = dsm_take_u16(r);
    *body_len = dsm_take_u32(r);
    return r->ok && m == magic && v == version;
}

/* A whole frame: data non-NULL, the header right, and exactly its body
 * length after it. On 1 *r is positioned at the body (r->left its length). */
static inline int dsm_take_msg_frame(dsm_reader_t *r, const void *data, size_t len, uint32_t magic,
                                     uint16_t version, uint16_t *type)
{
    uint32_t blen;
    if (data == NULL) return 0;
    *r = dsm_reader(data, len);
    return dsm_take_msg_header(r, magic, version, type, &blen) && blen == r->left;
}

/* A whole frame of a format whose body length is fixed by its type
 * (body_len(type), 0 for an unknown type). On 1 *r is at the body. */
static inline int dsm_take_msg(dsm_reader_t *r, const void *data, size_t len, uint32_t magic, uint16_t version,
                               uint32_t (*body_len)(uint16_t type), uint16_t *type)
{
    if (!dsm_take_msg_frame(r, data, len, magic, version, type)) return 0;
    uint32_t want = body_len(*type);
    return want != 0 && r->left == want;
}

/* Writes the header into p[0..DSM_MSG_HEADER_LEN) and returns where the body goes. */
static inline uint8_t *dsm_put_msg_header(uint8_t *p, uint32_t magic, uint16_t version, uint16_t type,
                                          uint32_t body_len)
{
    dsm_put_u32(p, magic);
    dsm_put_u16(p + 4, version);
    dsm_put_u16(p + 6, type);
    dsm_put_u32(p + 8, body_len);
    return p + DSM_MSG_HEADER_LEN;
}

/* A growable writer for encoders. */
typedef struct dsm_writer {
    uint8_t *buf;
    size_t len, cap;
    int ok;
} dsm_writer_t;

int dsm_writer_reserve(dsm_writer_t *w, size_t more);
void dsm_writer_free(dsm_writer_t *w);
static inline void dsm_write_bytes(dsm_writer_t *w, const void *src, size_t n)
{
    if (!dsm_writer_reserve(w, n)) return;
    if (n) memcpy(w->buf + w->len, src, n);
    w->len += n;
}
static inline void dsm_write_u16(dsm_writer_t *w, uint16_t v) { uint8_t b[2]; dsm_put_u16(b, v); dsm_write_bytes(w, b, 2); }
static inline void dsm_write_u32(dsm_writer_t *w, uint32_t v) { uint8_t b[4]; dsm_put_u32(b, v); dsm_write_bytes(w, b, 4); }
static inline void dsm_write_u64(dsm_writer_t *w, uint64_t v) { uint8_t b[8]; dsm_put_u64(b, v); dsm_write_bytes(w, b, 8); }
/* Framing into a writer, for bodies whose length is known once written:
 * begin writes the header with a zero length and returns where the frame
 * starts; end sets the length to what was written after it. */
static inline size_t dsm_write_msg_begin(dsm_writer_t *w, uint32_t magic, uint16_t version, uint16_t type)
{
    size_t start = w->len;
    uint8_t h[DSM_MSG_HEADER_LEN];
    dsm_put_msg_header(h, magic, version, type, 0);
    dsm_write_bytes(w, h, sizeof h);
    return start;
}
static inline void dsm_write_msg_end(dsm_writer_t *w, size_t start)
{
    if (w->ok && w->len >= start + DSM_MSG_HEADER_LEN)
        dsm_put_u32(w->buf + start + 8, (uint32_t)(w->len - start - DSM_MSG_HEADER_LEN));
}

#endif
