/* What the fabric's chaos mode injects (DSM_CHAOS=SEED:SPEC): the spec's
 * parser and printer. No UCX here, so the parser is fuzzed on its own.
 *
 * SPEC is "all" (every fault at its default rate), "off", or a comma list:
 *   delay=P     P% of active messages and replies leave after a random delay
 *   max_us=N    delays are drawn from [0, N) microseconds (default 500)
 *   late=P      P% of one-sided writes complete before they are placed
 *   split=P     P% of multi-word writes land as 8-byte pieces in random order
 *   cut=R@S+MS  at this node's S-th send, nothing reaches rank R for MS ms
 *   kill=S      the process exits (status 137) at its S-th send
 *   defer=P     P% of the decisions on the deferred emulated requests
 *               (defer.c) go against them: a queue held open for up to
 *               max_us, so more requests join it; a queue sent at once
 *               when a request joins it; a queue's batch sent after a
 *               random delay (everything behind it to its rank waits)
 * SEED is a number, or "random" (drawn at start and printed). Everything
 * delayed to one rank keeps its order (as one RC connection does); only
 * traffic to different ranks is reordered. */
#ifndef DSM_FABRIC_CHAOS_SPEC_H
#define DSM_FABRIC_CHAOS_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

enum { DSM_CHAOS_NO_RANK = UINT32_MAX };

typedef struct dsm_chaos_spec {
    uint64_t seed;
    int random_seed;       /* the text said "random": the caller draws one */
    uint32_t delay_pct, max_delay_us, late_pct, split_pct, defer_pct;
    uint32_t cut_rank;     /* DSM_CHAOS_NO_RANK: no cut */
    uint64_t cut_step;
    uint32_t cut_ms;
    uint64_t kill_step;    /* 0: never */
} dsm_chaos_spec_t;

/* Parses text into *out. On failure returns DSM_ERR_INVALID and writes why
 * (naming the offending item) into err. An "off" spec gives every rate 0. */
dsm_status_t dsm_chaos_spec_parse(const char *text, dsm_chaos_spec_t *out, char *err, size_t err_len);

/* The spec as DSM_CHAOS text (with the seed drawn for "random"), for the
 * line a failing run prints so it can be repeated. */
int dsm_chaos_spec_format(const dsm_chaos_spec_t *spec, char *buf, size_t len);

/* Whether two specs say the same (field by field: no padding compared). */
int dsm_chaos_spec_equal(const dsm_chaos_spec_t *a, const dsm_chaos_spec_t *b);

/* Whether the spec injects anything at all. */
int dsm_chaos_spec_active(const dsm_chaos_spec_t *spec);

#endif
