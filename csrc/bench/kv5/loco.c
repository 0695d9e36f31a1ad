/* dsm-bench-kv5's LOCO design: chan's kvstore (dsm_chan_kv_*), one per
 * cluster, every node a participant; node id % 3 inserts key id (into its
 * own slots), and resets it before every run. A GET reads the slot
 * one-sidedly through the local index; a SET updates under the key's lock.
 * Its values are KV5_VALUE_WORDS words, as the other designs', every word
 * the put's value: a read whose words differ is torn. */
#include "bench/kv5/kv5.h"

#include <stdio.h>
#include <string.h>

#include "dsm/chan.h"

enum { LOCO_LOCKS = 16, LOCO_TIMEOUT_MS = 60000 };

static struct {
    dsm_harness_t *c;
    dsm_chan_kv_t *kv[KV5_NODES];
} loco;

typedef struct loco_job {
    const kv5_streams_t *s;
    int phase;   /* 0 create, 1 reset, 2 run, 3 destroy */
} loco_job_t;

static void fill(uint64_t v[KV5_VALUE_WORDS], uint64_t x)
{
    for (int k = 0; k < KV5_VALUE_WORDS; k++) v[k] = x;
}

static int whole(const uint64_t v[KV5_VALUE_WORDS])
{
    int ok = 1;
    for (int k = 1; k < KV5_VALUE_WORDS; k++) ok &= v[k] == v[0];
    return ok;
}

static int fail(const char *what, int i, dsm_status_t st)
{
    fprintf(stderr, "dsm-bench-kv5: loco %s, node %d: %s\n", what, i, dsm_strerror(st));
    return -1;
}

static int loco_node(void *ctx, int i)
{
    loco_job_t *j = ctx;
    dsm_status_t st;
    if (j->phase == 0) {
        st = dsm_chan_kv_create(loco.c->nodes[i], "kv5/kv", j->s->cell.keys, LOCO_LOCKS, KV5_VALUE_WORDS * 8,
                                LOCO_TIMEOUT_MS, &loco.kv[i]);
        return st == DSM_OK ? 0 : fail("create", i, st);
    }
    if (j->phase == 3) {
        dsm_chan_kv_destroy(loco.kv[i]);
        loco.kv[i] = NULL;
        return 0;
    }
    dsm_chan_kv_t *kv = loco.kv[i];
    uint64_t v[KV5_VALUE_WORDS];
    if (j->phase == 1) {
        for (uint32_t id = (uint32_t)i; id < j->s->cell.keys; id += KV5_NODES) {
            fill(v, kv5_put_value(id, -1, (uint64_t)-1));
            if ((st = dsm_chan_kv_put(kv, kv5_key(id), v)) != DSM_OK)
                return fail("load", i, st);
        }
        return 0;
    }
    const kv5_op_t *ops = j->s->ops[i];
    for (uint64_t n = 0; n < j->s->cell.nops; n++) {
        uint32_t id = ops[n].id;
        if (ops[n].get) {
            int found = 0;
            if ((st = dsm_chan_kv_get(kv, kv5_key(id), v, &found)) != DSM_OK) return fail("get", i, st);
            if (!found || !kv5_put_names(v[0], id) || !whole(v)) {
                fprintf(stderr, "dsm-bench-kv5: loco: key %u read %s %016llx\n", id, found ? "a wrong or torn" : "no",
                        (unsigned long long)v[0]);
                return -1;
            }
        } else {
            fill(v, kv5_put_value(id, i, n));
            if ((st = dsm_chan_kv_put(kv, kv5_key(id), v)) != DSM_OK) return fail("put", i, st);
        }
    }
    return 0;
}

int kv5_run_loco(dsm_harness_t *c, const kv5_streams_t *s, kv5_result_t *out)
{
    kv5_result_t setup;
    loco_job_t j = {.s = s, .phase = 0};
    if (loco.c != c) {
        kv5_loco_close();
        loco.c = c;
        if (kv5_run_nodes(c, loco_node, &j, &setup) != 0) return -1;
    }
    j.phase = 1;
    if (kv5_run_nodes(c, loco_node, &j, &setup) != 0) return -1;
    j.phase = 2;
    if (kv5_run_nodes(c, loco_node, &j, out) != 0) return -1;
    for (uint32_t id = 0; id < s->cell.keys; id++) {
        uint64_t v[KV5_VALUE_WORDS] = {0};
        int found = 0;
        dsm_status_t st = dsm_chan_kv_get(loco.kv[0], kv5_key(id), v, &found);
        if (st != DSM_OK || !found || !whole(v) || !kv5_final_ok(s, id, v[0])) {
            fprintf(stderr, "dsm-bench-kv5: loco: key %u's final value %016llx is no sequential order's (%s)\n", id,
                    (unsigned long long)v[0], dsm_strerror(st));
            return -1;
        }
    }
    out->ops = (double)KV5_NODES * (double)s->cell.nops;
    return 0;
}

void kv5_loco_close(void)
{
    if (loco.c && loco.kv[0]) {
        loco_job_t j = {.phase = 3};
        kv5_result_t r;
        (void)kv5_run_nodes(loco.c, loco_node, &j, &r);
    }
    memset(&loco, 0, sizeof loco);
}
