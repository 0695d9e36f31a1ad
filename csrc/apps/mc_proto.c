/* The memcached text-protocol parser. It follows memcached 1.6's observable
 * behaviour for the classic commands: lines end at '\n' (an optional '\r'
 * before it is dropped), are cut at the first NUL, split on spaces into at
 * most 24 tokens, and answered with exactly memcached's ERROR and
 * CLIENT_ERROR strings. Numbers are parsed with memcached's rules (strtoul
 * and friends, trailing blank allowed, minus signs refused on unsigned
 * overflow). A bad storage command line does not swallow its data block —
 * memcached does not either — while a too-large value is swallowed. */
#include "apps/mc_proto.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 24

typedef struct tok {
    char *v;
    size_t n;
} tok_t;

/* Split on ' ' in place; the last token is a terminator whose v is NULL when
 * the whole string was consumed, else the unprocessed rest. */
static size_t tokenize(char *s, tok_t *t, size_t max)
{
    size_t nt = 0, len = strlen(s);
    char *start = s, *e = s;
    for (size_t i = 0; i < len; i++, e++) {
        if (*e != ' ') continue;
        if (start != e) {
            t[nt].v = start;
            t[nt].n = (size_t)(e - start);
            nt++;
            *e = 0;
            if (nt == max - 1) {
                e++;
                start = e;
                break;
            }
        }
        start = e + 1;
    }
    if (start != e) {
        t[nt].v = start;
        t[nt].n = (size_t)(e - start);
        nt++;
    }
    t[nt].v = *e == 0 ? NULL : e;
    t[nt].n = 0;
    return nt + 1;
}

static int end_ok(const char *str, const char *end)
{
    return isspace((unsigned char)*end) || (*end == 0 && end != str);
}

static int to_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long l = strtoul(s, &end, 10);
    if (errno == ERANGE || end == s || !end_ok(s, end)) return 0;
    if ((long)l < 0 && strchr(s, '-')) return 0;
    *out = (uint32_t)l; /* memcached keeps the low 32 bits */
    return 1;
}

/* memcached's safe_strtol into an int32_t: any long is accepted and its low
 * 32 bits kept, so an exptime of 2^32 is 0 and a length of 2^31 is
 * negative (refused by the caller), as stock memcached does on 64-bit. */
static int to_i32(const char *s, int32_t *out)
{
    char *end;
    errno = 0;
    long long l = strtoll(s, &end, 10);
    if (errno == ERANGE || end == s || !end_ok(s, end)) return 0;
    *out = (int32_t)(uint32_t)(unsigned long long)l;
    return 1;
}

static int to_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long l = strtoull(s, &end, 10);
    if (errno == ERANGE || end == s || !end_ok(s, end)) return 0;
    if ((long long)l < 0 && strchr(s, '-')) return 0;
    *out = l;
    return 1;
}

#define R_ERROR "ERROR\r\n"
#define R_FORMAT "CLIENT_ERROR bad command line format\r\n"

static void reply(mc_cmd_t *c, const char *r)
{
    c->kind = MC_REPLY;
    c->reply = c->noreply ? NULL : r;
}

static void set_noreply(mc_cmd_t *c, tok_t *t, size_t nt)
{
    tok_t *x = &t[nt - 2];
    if (x->v && strcmp(x->v, "noreply") == 0) c->noreply = 1;
}

static void parse_update(mc_cmd_t *c, tok_t *t, size_t nt, int kind, size_t item_max)
{
    set_noreply(c, t, nt);
    if (t[1].n > MC_KEY_MAX) return reply(c, R_FORMAT);
    uint32_t flags;
    int32_t exptime, vlen;
    if (!(to_u32(t[2].v, &flags) && to_i32(t[3].v, &exptime) && to_i32(t[4].v, &vlen)))
        return reply(c, R_FORMAT);
    uint64_t cas = 0;
    if (kind == MC_CAS && !to_u64(t[5].v, &cas)) return reply(c, R_FORMAT);
    if (vlen < 0) return reply(c, R_FORMAT);
    /* memcached sizes an item as header + key + value; ~56 bytes of header */
    if ((size_t)vlen + 2 + t[1].n + 56 > item_max) {
        reply(c, "SERVER_ERROR object too large for cache\r\n");
        c->swallow = (uint64_t)vlen + 2;
        c->key = t[1].v;
        c->klen = t[1].n;
        c->delete_key = kind == MC_SET;
        return;
    }
    c->kind = kind;
    c->key = t[1].v;
    c->klen = t[1].n;
    c->flags = flags;
    c->exptime = exptime;
    c->vlen = (uint32_t)vlen;
    c->num = cas;
}

static void parse_get(mc_cmd_t *c, tok_t *t, size_t first, int kind, char *line_end)
{
    /* Every key must be <= 250 bytes; then the keys are re-split by the
     * server (splitting on spaces is all memcached's tokenizer does). */
    char *p = t[first].v ? t[first].v : line_end;
    const char *q = p;
    const char *key;
    size_t klen;
    /* undo the tokenizer's NULs so the key list is one string */
    for (char *x = p; x < line_end; x++)
        if (*x == 0) *x = ' ';
    while (mc_next_key(&q, line_end, &key, &klen))
        if (klen > MC_KEY_MAX) return reply(c, R_FORMAT);
    c->kind = kind;
    c->keys = p;
    c->keys_len = (size_t)(line_end - p);
}

int mc_next_key(const char **p, const char *end, const char **key, size_t *klen)
{
    const char *s = *p;
    while (s < end && *s == ' ') s++;
    if (s >= end) {
        *p = s;
        return 0;
    }
    const char *e = s;
    while (e < end && *e != ' ') e++;
    *key = s;
    *klen = (size_t)(e - s);
    *p = e;
    return 1;
}

static void parse_arith(mc_cmd_t *c, tok_t *t, size_t nt, int kind)
{
    set_noreply(c, t, nt);
    if (t[1].n > MC_KEY_MAX) return reply(c, R_FORMAT);
    uint64_t delta;
    if (!to_u64(t[2].v, &delta)) return reply(c, "CLIENT_ERROR invalid numeric delta argument\r\n");
    c->kind = kind;
    c->key = t[1].v;
    c->klen = t[1].n;
    c->num = delta;
}

static void parse_delete(mc_cmd_t *c, tok_t *t, size_t nt)
{
    if (nt > 3) {
        int hold_zero = strcmp(t[2].v, "0") == 0;
        set_noreply(c, t, nt);
        int ok = (nt == 4 && (hold_zero || c->noreply)) || (nt == 5 && hold_zero && c->noreply);
        if (!ok) return reply(c, "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n");
    }
    if (t[1].n > MC_KEY_MAX) return reply(c, R_FORMAT);
    c->kind = MC_DELETE;
    c->key = t[1].v;
    c->klen = t[1].n;
}

static void parse_touch(mc_cmd_t *c, tok_t *t, size_t nt)
{
    set_noreply(c, t, nt);
    if (t[1].n > MC_KEY_MAX) return reply(c, R_FORMAT);
    int32_t exptime;
    if (!to_i32(t[2].v, &exptime)) return reply(c, "CLIENT_ERROR invalid exptime argument\r\n");
    c->kind = MC_TOUCH;
    c->key = t[1].v;
    c->klen = t[1].n;
    c->exptime = exptime;
}

static void parse_flush(mc_cmd_t *c, tok_t *t, size_t nt)
{
    set_noreply(c, t, nt);
    int32_t exptime = 0;
    if (nt != (size_t)(c->noreply ? 3 : 2) && !to_i32(t[1].v, &exptime))
        return reply(c, "CLIENT_ERROR invalid exptime argument\r\n");
    c->kind = MC_FLUSH;
    c->exptime = exptime;
}

/* The flags of a meta command (tokens t[first..nt-2]). Returns the error
 * line, or NULL if they are good. */
static const char *parse_meta_flags(mc_meta_t *m, tok_t *t, size_t first, size_t nt, char which)
{
    /* which flags each command takes, and which of them are return flags */
    const char *takes = which == 'g' ? "cfkOqstvT" : which == 's' ? "cCFIkOqTM" : which == 'd' ? "CIkOq"
                                                                                          : "CNJDTMOqtcvk";
    const char *returns = which == 'g' ? "sftckO" : which == 's' ? "ckO" : which == 'd' ? "kO" : "tckO";
    m->delta = 1;
    for (size_t i = first; i + 1 < nt; i++) {
        const char *v = t[i].v;
        char f = v[0];
        if (!strchr(takes, f)) return which == 'a' ? "CLIENT_ERROR invalid or duplicate flag\r\n"
                                                   : "CLIENT_ERROR invalid flag\r\n";
        const char *arg = v + 1;
        int ok = 1;
        switch (f) {
        case 'q': m->quiet = 1; break;
        case 'v': m->value = 1; break;
        case 'I': break; /* invalidate: accepted, nothing is stale here */
        case 'T': ok = to_i32(arg, &m->ttl); m->has_ttl = 1; break;
        case 'N': ok = to_i32(arg, &m->vivify_ttl); m->has_vivify = 1; break;
        case 'F': ok = to_u32(arg, &m->flags); m->has_flags = 1; break;
        case 'C': ok = to_u64(arg, &m->cas); m->has_cas = 1; break;
        case 'J': ok = to_u64(arg, &m->initial); break;
        case 'D': ok = to_u64(arg, &m->delta); break;
        case 'M': {
            char mode = (char)toupper((unsigned char)arg[0]);
            const char *modes = which == 's' ? "SEAPR" : "ID+-";
            ok = arg[0] && !arg[1] && strchr(modes, mode);
            m->mode = (uint8_t)(mode == '+' ? 'I' : mode == '-' ? 'D' : mode);
            break;
        }
        case 'O':
            if (t[i].n - 1 > MC_OPAQUE_MAX) return "CLIENT_ERROR opaque token too long\r\n";
            m->olen = (uint8_t)(t[i].n - 1);
            memcpy(m->opaque, arg, m->olen);
            break;
        default:
            break;
        }
        if (!ok) return which == 'a' ? "CLIENT_ERROR invalid or duplicate flag\r\n"
                                     : "CLIENT_ERROR bad token in command line format\r\n";
        if (strchr(returns, f) && m->norder < sizeof m->order) m->order[m->norder++] = f;
    }
    return NULL;
}

static void parse_meta(mc_cmd_t *c, tok_t *t, size_t nt, char which, size_t item_max)
{
    if (nt < 3) return reply(c, R_ERROR);
    if (t[1].n > MC_KEY_MAX) return reply(c, R_FORMAT);
    size_t first = 2;
    int32_t vlen = 0;
    if (which == 's') {
        if (nt < 4 || !to_i32(t[2].v, &vlen) || vlen < 0) return reply(c, R_FORMAT);
        first = 3;
    }
    const char *err = parse_meta_flags(&c->meta, t, first, nt, which);
    if (!err && which == 's' && (size_t)vlen + 2 + t[1].n + 56 > item_max)
        err = "SERVER_ERROR object too large for cache\r\n";
    if (err) {
        reply(c, err);
        if (which == 's') c->swallow = (uint64_t)vlen + 2; /* the data block is not run as commands */
        return;
    }
    c->kind = which == 'g' ? MC_MG : which == 's' ? MC_MS : which == 'd' ? MC_MD : MC_MA;
    c->key = t[1].v;
    c->klen = t[1].n;
    c->vlen = (uint32_t)vlen;
}

#define WANT_OR(a, b) \
    do { \
        if (nt != (a) && nt != (b)) return reply(c, R_ERROR), consumed; \
    } while (0)
#define WANT(lo, hi) \
    do { \
        if (nt < (lo) || nt > (hi)) return reply(c, R_ERROR), consumed; \
    } while (0)

size_t mc_parse(char *buf, size_t len, size_t item_max, mc_cmd_t *c)
{
    memset(c, 0, sizeof *c);
    char *el = memchr(buf, '\n', len);
    if (!el) {
        if (len <= MC_LINE_SOFT) return 0;
        /* Only a (multi)get may have a line this long. */
        char *p = buf;
        while (p < buf + len && *p == ' ') p++;
        size_t rest = (size_t)(buf + len - p);
        int is_get = (rest >= 4 && (memcmp(p, "get ", 4) == 0 || memcmp(p, "gat ", 4) == 0)) ||
                     (rest >= 5 && (memcmp(p, "gets ", 5) == 0 || memcmp(p, "gats ", 5) == 0));
        if (p - buf > 100 || !is_get || len > MC_LINE_MAX) {
            c->kind = MC_CLOSE;
            return len;
        }
        return 0;
    }
    size_t consumed = (size_t)(el - buf) + 1;
    if (el - buf > 1 && el[-1] == '\r') el--;
    *el = 0;
    char *line_end = buf + strlen(buf); /* memcached stops at a NUL */
    tok_t t[MAX_TOKENS];
    size_t nt = tokenize(buf, t, MAX_TOKENS);
    if (nt < 2 || t[0].n < 2) return reply(c, R_ERROR), consumed;
    const char *cmd = t[0].v;
    char first = cmd[0];
    if (first == 'm' && t[0].n == 2) {
        char which = cmd[1];
        if (which == 'n') return reply(c, "MN\r\n"), consumed;
        if (!strchr("gsda", which)) return reply(c, R_ERROR), consumed;
        parse_meta(c, t, nt, which, item_max);
    } else if (first == 'g') {
        if (nt < 3) return reply(c, R_ERROR), consumed;
        if (strcmp(cmd, "get") == 0) parse_get(c, t, 1, MC_GET, line_end);
        else if (strcmp(cmd, "gets") == 0) parse_get(c, t, 1, MC_GETS, line_end);
        else if (strcmp(cmd, "gat") == 0 || strcmp(cmd, "gats") == 0) {
            /* gat <exptime> <key>*: get and touch */
            int32_t exptime;
            if (!to_i32(t[1].v, &exptime)) return reply(c, "CLIENT_ERROR invalid exptime argument\r\n"), consumed;
            parse_get(c, t, 2, cmd[3] == 's' ? MC_GATS : MC_GAT, line_end);
            c->exptime = exptime;
        } else reply(c, R_ERROR);
    } else if (first == 's') {
        if (strcmp(cmd, "set") == 0) {
            WANT_OR(6, 7);
            parse_update(c, t, nt, MC_SET, item_max);
        } else if (strcmp(cmd, "stats") == 0) {
            /* `stats` and `stats <group>`; the server knows the groups */
            c->kind = nt <= 3 ? MC_STATS : MC_REPLY;
            if (nt > 3) c->reply = R_ERROR;
            if (nt == 3) {
                c->key = t[1].v;
                c->klen = t[1].n;
            }
        } else {
            reply(c, R_ERROR);
        }
    } else if (first == 'a') {
        if (strcmp(cmd, "add") == 0) {
            WANT_OR(6, 7);
            parse_update(c, t, nt, MC_ADD, item_max);
        } else if (strcmp(cmd, "append") == 0) {
            WANT_OR(6, 7);
            parse_update(c, t, nt, MC_APPEND, item_max);
        } else {
            reply(c, R_ERROR);
        }
    } else if (first == 'c') {
        if (strcmp(cmd, "cas") == 0) {
            WANT_OR(7, 8);
            parse_update(c, t, nt, MC_CAS, item_max);
        } else {
            reply(c, R_ERROR);
        }
    } else if (first == 'i') {
        if (strcmp(cmd, "incr") == 0) {
            WANT_OR(4, 5);
            parse_arith(c, t, nt, MC_INCR);
        } else {
            reply(c, R_ERROR);
        }
    } else if (first == 'd') {
        if (strcmp(cmd, "delete") == 0) {
            WANT(3, 5);
            parse_delete(c, t, nt);
        } else if (strcmp(cmd, "decr") == 0) {
            WANT_OR(4, 5);
            parse_arith(c, t, nt, MC_DECR);
        } else {
            reply(c, R_ERROR);
        }
    } else if (first == 't') {
        if (strcmp(cmd, "touch") == 0) {
            WANT_OR(4, 5);
            parse_touch(c, t, nt);
        } else {
            reply(c, R_ERROR);
        }
    } else if (strcmp(cmd, "prepend") == 0) {
        WANT_OR(6, 7);
        parse_update(c, t, nt, MC_PREPEND, item_max);
    } else if (strcmp(cmd, "replace") == 0) {
        WANT_OR(6, 7);
        parse_update(c, t, nt, MC_REPLACE, item_max);
    } else if (strcmp(cmd, "flush_all") == 0) {
        WANT(2, 4);
        parse_flush(c, t, nt);
    } else if (strcmp(cmd, "version") == 0) {
        c->kind = MC_VERSION;
    } else if (strcmp(cmd, "quit") == 0) {
        c->kind = MC_CLOSE;
    } else if (strcmp(cmd, "verbosity") == 0) {
        WANT_OR(3, 4);
        set_noreply(c, t, nt);
        uint32_t level;
        reply(c, to_u32(t[1].v, &level) ? "OK\r\n" : R_FORMAT);
    } else if (t[nt - 2].v && strncmp(t[nt - 2].v, "HTTP/", 5) == 0) {
        c->kind = MC_CLOSE;
    } else {
        reply(c, R_ERROR);
    }
    return consumed;
}
