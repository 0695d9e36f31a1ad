/* Private: the memcached text-protocol parser (command lines only; the server
 * reads data blocks itself). Pure and allocation-free, so it is fuzzed on
 * its own (csrc/fuzz/fuzz_memcached.c). */
#ifndef DSM_APPS_MC_PROTO_H
#define DSM_APPS_MC_PROTO_H

#include <stddef.h>
#include <stdint.h>

enum mc_kind {
    MC_REPLY,   /* nothing to execute: send `reply` (unless NULL) */
    MC_CLOSE,   /* close the connection (garbage, or "quit") */
    MC_GET, MC_GETS, MC_GAT, MC_GATS,
    MC_SET, MC_ADD, MC_REPLACE, MC_APPEND, MC_PREPEND, MC_CAS,
    MC_DELETE, MC_INCR, MC_DECR, MC_TOUCH, MC_FLUSH, MC_STATS, MC_VERSION, MC_VERBOSITY,
    MC_MG, MC_MS, MC_MD, MC_MA,   /* meta commands (mn is answered by the parser) */
};

/* A meta command's flags, checked and decoded. Return flags are kept in the
 * order they were asked for, as memcached answers them. */
#define MC_OPAQUE_MAX 32
typedef struct mc_meta {
    char order[16];        /* return flags asked for: s f t c k O */
    uint8_t norder;
    uint8_t quiet;         /* q */
    uint8_t value;         /* v */
    uint8_t mode;          /* M: ms S E A P R, ma I D (as given, upper-cased); 0 = default */
    uint8_t has_ttl, has_flags, has_cas, has_vivify;
    int32_t ttl;           /* T */
    uint32_t flags;        /* F */
    uint64_t cas;          /* C */
    int32_t vivify_ttl;    /* N */
    uint64_t initial;      /* J (ma), default 0 */
    uint64_t delta;        /* D (ma), default 1 */
    uint8_t olen;
    char opaque[MC_OPAQUE_MAX]; /* O */
} mc_meta_t;

typedef struct mc_cmd {
    int kind;
    int noreply;
    const char *reply;     /* for MC_REPLY: full line with \r\n, or NULL (suppressed) */
    const char *key;       /* single-key commands; MC_STATS: the group, or NULL */
    size_t klen;
    const char *keys;      /* MC_GET/GETS/GAT/GATS: space-separated keys (all <= 250 bytes) */
    size_t keys_len;
    uint32_t flags;
    int32_t exptime;       /* also MC_GAT/GATS */
    uint32_t vlen;         /* storage: value bytes to read after the line (+2 for \r\n) */
    uint64_t num;          /* cas unique, or incr/decr delta */
    uint64_t swallow;      /* MC_REPLY after a too-large storage command: bytes to skip */
    int delete_key;        /* with swallow: a "set" also deletes the key, as memcached does */
    mc_meta_t meta;        /* MC_MG/MS/MD/MA */
} mc_cmd_t;

#define MC_KEY_MAX 250
/* Lines without '\n' longer than this close the connection unless they are
 * a get/gets/gat/gats (memcached's rule); multigets are allowed up to
 * MC_LINE_MAX (memcached has no bound; this one keeps a connection's buffer
 * bounded). */
#define MC_LINE_SOFT 2048
#define MC_LINE_MAX (16u << 20)

/* Parse the command line at the start of buf[0..len). Returns 0 when more
 * bytes are needed, otherwise the bytes consumed (the line and its '\n').
 * Modifies buf in place (tokens are NUL-terminated). item_max bounds a value. */
size_t mc_parse(char *buf, size_t len, size_t item_max, mc_cmd_t *cmd);

/* Iterate the keys of a get: returns 0 at the end. */
int mc_next_key(const char **p, const char *end, const char **key, size_t *klen);

#endif
