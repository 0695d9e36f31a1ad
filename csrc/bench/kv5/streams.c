/* dsm-bench-kv5's operation streams and the sequential model the designs'
 * results are checked against (see kv5.h). The streams are kvc's (apps/kvc.c),
 * so own's and dir's kv, which draw their own, run the same operations as
 * the designs that are handed them. */
#include "bench/kv5/kv5.h"

#include <stdlib.h>
#include <string.h>

#include "dsm/mix.h"
#include "dsm/zipf.h"

uint64_t kv5_key(uint32_t id) { return dsm_hash64(id) | 1; }
uint64_t kv5_initial(const kv5_cell_t *cell, uint32_t id) { return dsm_hash64(id ^ cell->seed); }

static uint32_t zipf_id(const kv5_streams_t *s, uint64_t r) { return dsm_zipf_pick(s->cdf, s->cell.keys, r); }

int kv5_streams_make(kv5_streams_t *s, const kv5_cell_t *cell)
{
    memset(s, 0, sizeof *s);
    s->cell = *cell;
    s->cdf = calloc(cell->keys, sizeof *s->cdf);
    if (s->cdf == NULL)
        return -1;
    dsm_zipf_cdf(s->cdf, cell->keys, cell->theta);
    for (int n = 0; n < KV5_NODES; n++) {
        s->ops[n] = calloc(cell->nops, sizeof *s->ops[n]);
        if (s->ops[n] == NULL) {
            kv5_streams_free(s);
            return -1;
        }
        uint64_t state = dsm_hash64(cell->seed ^ dsm_hash64((uint64_t)n + 1));
        for (uint64_t i = 0; i < cell->nops; i++) {
            uint64_t r1 = dsm_splitmix64(&state), r2 = dsm_splitmix64(&state);
            s->ops[n][i] = (kv5_op_t){.id = zipf_id(s, r1), .get = (r2 % 100) < cell->get_pct,
                                      .delta = (r2 >> 8) & 0xffff};
        }
    }
    return 0;
}

void kv5_streams_free(kv5_streams_t *s)
{
    for (int n = 0; n < KV5_NODES; n++)
        free(s->ops[n]);
    free(s->cdf);
    memset(s, 0, sizeof *s);
}

void kv5_model_adds(const kv5_streams_t *s, uint64_t *final)
{
    for (uint32_t id = 0; id < s->cell.keys; id++)
        final[id] = kv5_initial(&s->cell, id);
    for (int n = 0; n < KV5_NODES; n++)
        for (uint64_t i = 0; i < s->cell.nops; i++)
            if (!s->ops[n][i].get)
                final[s->ops[n][i].id] += s->ops[n][i].delta;
}

/* kvc's layout: bucket b's slot j holds key b + j * buckets; its
 * checksum sums over every slot, the empty ones too. */
uint64_t kv5_model_kvc_checksum(const kv5_streams_t *s, const uint64_t *final)
{
    uint32_t slots = s->cell.keys / KV5_BUCKETS;
    uint64_t sum = 0;
    for (uint32_t b = 0; b < KV5_BUCKETS; b++)
        for (uint32_t j = 0; j < slots; j++) {
            uint32_t id = b + j * KV5_BUCKETS;
            uint64_t key = kv5_key(id), v = final[id];
            for (uint64_t k = 1; k <= KV5_VALUE_WORDS; k++)
                sum += dsm_hash64(key ^ dsm_hash64(v + k));
        }
    return sum;
}

uint64_t kv5_put_value(uint32_t id, int node, uint64_t i)
{
    return ((uint64_t)id << 36) | ((uint64_t)(node + 1) << 32) | (uint32_t)(i + 1);
}

int kv5_put_names(uint64_t v, uint32_t id) { return (v >> 36) == id; }

int kv5_final_ok(const kv5_streams_t *s, uint32_t id, uint64_t v)
{
    int written = 0;
    for (int n = 0; n < KV5_NODES; n++)
        for (uint64_t i = s->cell.nops; i-- > 0;)
            if (s->ops[n][i].id == id && !s->ops[n][i].get) {
                written = 1;
                if (v == kv5_put_value(id, n, i))
                    return 1;
                break;   /* only a node's last write can be final */
            }
    return !written && v == kv5_put_value(id, -1, (uint64_t)-1);
}
