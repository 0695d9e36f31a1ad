/* dsm-bench-kv5's own and dir designs: kvc's table of bucket objects under
 * own (DRust) or dir (the GAM-style directory), one lock per bucket, the
 * buckets homed round-robin on the nodes; each node runs its stream with
 * dsm_kvc_run, and the final table's checksum must equal the model's. */
#include "bench/kv5/kv5.h"

#include <stdio.h>
#include <stdlib.h>

#include "apps/kvc.h"

typedef struct kvc_job {
    dsm_kvc_t *t;
    dsm_harness_t *c;
    const kv5_streams_t *s;
    dsm_kvc_result_t res[KV5_NODES];
    dsm_status_t st[KV5_NODES];
} kvc_job_t;

static int kvc_node(void *ctx, int i)
{
    kvc_job_t *j = ctx;
    j->st[i] = dsm_kvc_run(j->t, j->c->nodes[i], (uint32_t)i, j->s->cell.nops, &j->res[i]);
    if (j->st[i] != DSM_OK) {
        fprintf(stderr, "dsm-bench-kv5: kvc node %d: %s\n", i, dsm_strerror(j->st[i]));
        return -1;
    }
    return 0;
}

int kv5_run_kvc(dsm_harness_t *c, const kv5_streams_t *s, const char *protocol, kv5_result_t *out)
{
    dsm_kvc_config_t cfg;
    dsm_kvc_config_default(&cfg);
    cfg.buckets = KV5_BUCKETS;
    cfg.keys = s->cell.keys;
    cfg.slots = s->cell.keys / KV5_BUCKETS;
    cfg.value_words = KV5_VALUE_WORDS;
    cfg.get_pct = s->cell.get_pct;
    cfg.theta = s->cell.theta;
    cfg.seed = s->cell.seed;
    /* kv's default lock (lock=auto): CAS over shm, delegated over tcp */
    const dsm_coh_lock_ops_t *locks = dsm_coh_locks(c->transport == DSM_TRANSPORT_SHM ? "cas" : "deleg");
    kvc_job_t j = {.c = c, .s = s};
    dsm_status_t st = dsm_kvc_create(dsm_coh_ops(protocol), locks, &cfg, c->nodes, KV5_NODES, &j.t);
    if (st != DSM_OK) {
        fprintf(stderr, "dsm-bench-kv5: %s table: %s\n", protocol, dsm_strerror(st));
        return -1;
    }
    int rc = kv5_run_nodes(c, kvc_node, &j, out);
    uint64_t sum = 0, *final = malloc(s->cell.keys * sizeof *final);
    if (rc == 0 && final && (st = dsm_kvc_checksum(j.t, c->nodes[0], &sum)) != DSM_OK) {
        fprintf(stderr, "dsm-bench-kv5: %s checksum: %s\n", protocol, dsm_strerror(st));
        rc = -1;
    }
    if (rc == 0 && final) {
        kv5_model_adds(s, final);
        uint64_t want = kv5_model_kvc_checksum(s, final);
        out->ops = 0;
        for (int i = 0; i < KV5_NODES; i++) {
            out->ops += (double)(j.res[i].gets + j.res[i].sets);
            if (j.res[i].torn || j.res[i].not_found) {
                fprintf(stderr, "dsm-bench-kv5: %s node %d: %llu torn, %llu not found\n", protocol, i,
                        (unsigned long long)j.res[i].torn, (unsigned long long)j.res[i].not_found);
                rc = -1;
            }
        }
        if (sum != want) {
            fprintf(stderr, "dsm-bench-kv5: %s: final table's checksum %016llx, the model's %016llx\n", protocol,
                    (unsigned long long)sum, (unsigned long long)want);
            rc = -1;
        }
    }
    if (final == NULL) rc = -1;
    free(final);
    dsm_kvc_destroy(j.t);
    return rc;
}
