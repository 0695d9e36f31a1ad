/* The chaos spec's parser and printer (chaos_spec.h). */
#include "fabric/chaos_spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DEFAULT_DELAY_PCT = 30, DEFAULT_MAX_US = 500, DEFAULT_LATE_PCT = 30, DEFAULT_SPLIT_PCT = 50,
       DEFAULT_DEFER_PCT = 30 };
enum { MAX_DELAY_US = 1000000, MAX_CUT_MS = 600000 };

static int parse_u64(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    if (n == 0 || n > 20)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

static dsm_status_t refuse(char *err, size_t err_len, const char *what, const char *item, size_t n)
{
    if (err && err_len)
        snprintf(err, err_len, "DSM_CHAOS: %s in '%.*s'", what, (int)(n > 64 ? 64 : n), item);
    return DSM_ERR_INVALID;
}

/* cut=R@S+MS */
static int parse_cut(const char *v, size_t n, dsm_chaos_spec_t *out)
{
    const char *at = memchr(v, '@', n);
    const char *plus = at ? memchr(at, '+', n - (size_t)(at - v)) : NULL;
    uint64_t rank, step, ms;
    if (!at || !plus || parse_u64(v, (size_t)(at - v), UINT32_MAX - 1, &rank) != 0 ||
        parse_u64(at + 1, (size_t)(plus - at - 1), UINT64_MAX, &step) != 0 ||
        parse_u64(plus + 1, n - (size_t)(plus + 1 - v), MAX_CUT_MS, &ms) != 0 || step == 0)
        return -1;
    out->cut_rank = (uint32_t)rank;
    out->cut_step = step;
    out->cut_ms = (uint32_t)ms;
    return 0;
}

static dsm_status_t parse_item(const char *item, size_t n, dsm_chaos_spec_t *out, char *err, size_t err_len)
{
    if (n == 3 && memcmp(item, "all", 3) == 0) {
        out->delay_pct = DEFAULT_DELAY_PCT;
        out->late_pct = DEFAULT_LATE_PCT;
        out->split_pct = DEFAULT_SPLIT_PCT;
        out->defer_pct = DEFAULT_DEFER_PCT;
        return DSM_OK;
    }
    if (n == 3 && memcmp(item, "off", 3) == 0) {
        out->delay_pct = out->late_pct = out->split_pct = out->defer_pct = 0;
        return DSM_OK;
    }
    const char *eq = memchr(item, '=', n);
    if (eq == NULL)
        return refuse(err, err_len, "expected all, off or key=value", item, n);
    size_t kn = (size_t)(eq - item), vn = n - kn - 1;
    const char *v = eq + 1;
    uint64_t x;
    struct { const char *key; uint32_t *field; uint64_t max; } pcts[] = {
        {"delay", &out->delay_pct, 100}, {"late", &out->late_pct, 100}, {"split", &out->split_pct, 100},
        {"defer", &out->defer_pct, 100}, {"max_us", &out->max_delay_us, MAX_DELAY_US},
    };
    for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++) {
        if (strlen(pcts[i].key) != kn || memcmp(item, pcts[i].key, kn) != 0)
            continue;
        if (parse_u64(v, vn, pcts[i].max, &x) != 0)
            return refuse(err, err_len, i < 4 ? "a percentage is 0..100" : "max_us is 0..1000000", item, n);
        *pcts[i].field = (uint32_t)x;
        return DSM_OK;
    }
    if (kn == 4 && memcmp(item, "kill", 4) == 0) {
        if (parse_u64(v, vn, UINT64_MAX, &x) != 0 || x == 0)
            return refuse(err, err_len, "kill takes a send step >= 1", item, n);
        out->kill_step = x;
        return DSM_OK;
    }
    if (kn == 3 && memcmp(item, "cut", 3) == 0) {
        if (parse_cut(v, vn, out) != 0)
            return refuse(err, err_len, "cut is RANK@STEP+MS (step >= 1, at most 600000 ms)", item, n);
        return DSM_OK;
    }
    return refuse(err, err_len, "unknown key (delay, max_us, late, split, defer, cut, kill)", item, n);
}

dsm_status_t dsm_chaos_spec_parse(const char *text, dsm_chaos_spec_t *out, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (text == NULL || out == NULL)
        return DSM_ERR_INVALID;
    dsm_chaos_spec_t s = {.max_delay_us = DEFAULT_MAX_US, .cut_rank = DSM_CHAOS_NO_RANK};
    size_t len = strnlen(text, 4096);
    if (len == 4096)
        return refuse(err, err_len, "too long", text, 16);
    const char *colon = memchr(text, ':', len);
    if (colon == NULL)
        return refuse(err, err_len, "expected SEED:SPEC", text, len);
    size_t sn = (size_t)(colon - text);
    if (sn == 6 && memcmp(text, "random", 6) == 0)
        s.random_seed = 1;
    else if (parse_u64(text, sn, UINT64_MAX, &s.seed) != 0)
        return refuse(err, err_len, "the seed is a number or 'random'", text, sn);
    const char *p = colon + 1, *end = text + len;
    if (p == end)
        return refuse(err, err_len, "no spec after the seed", text, len);
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t n = comma ? (size_t)(comma - p) : (size_t)(end - p);
        dsm_status_t st = parse_item(p, n, &s, err, err_len);
        if (st != DSM_OK)
            return st;
        p += n + (comma != NULL);
        if (comma && p == end)
            return refuse(err, err_len, "a trailing comma", text, len);
    }
    *out = s;
    return DSM_OK;
}

int dsm_chaos_spec_format(const dsm_chaos_spec_t *s, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%llu:delay=%u,max_us=%u,late=%u,split=%u,defer=%u",
                     (unsigned long long)s->seed, s->delay_pct, s->max_delay_us, s->late_pct, s->split_pct,
                     s->defer_pct);
    if (n >= 0 && (size_t)n < len && s->cut_rank != DSM_CHAOS_NO_RANK)
        n += snprintf(buf + n, len - (size_t)n, ",cut=%u@%llu+%u", s->cut_rank, (unsigned long long)s->cut_step,
                      s->cut_ms);
    if (n >= 0 && (size_t)n < len && s->kill_step)
        n += snprintf(buf + n, len - (size_t)n, ",kill=%llu", (unsigned long long)s->kill_step);
    return n;
}

int dsm_chaos_spec_equal(const dsm_chaos_spec_t *a, const dsm_chaos_spec_t *b)
{
    return a->seed == b->seed && a->random_seed == b->random_seed && a->delay_pct == b->delay_pct &&
           a->max_delay_us == b->max_delay_us && a->late_pct == b->late_pct && a->split_pct == b->split_pct &&
           a->defer_pct == b->defer_pct &&
           a->cut_rank == b->cut_rank && a->cut_step == b->cut_step && a->cut_ms == b->cut_ms &&
           a->kill_step == b->kill_step;
}

int dsm_chaos_spec_active(const dsm_chaos_spec_t *s)
{
    return s->delay_pct || s->late_pct || s->split_pct || s->defer_pct || s->cut_rank != DSM_CHAOS_NO_RANK || s->kill_step;
}
