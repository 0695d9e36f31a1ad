/* dsm-bench-kv5's delegation design: each node entrusts its keys (id % 3)
 * to its runtime's thread 0, a table of 32-byte values; a GET or SET is a
 * delegated request to the key's trustee (across nodes, Gossamer's remote
 * trusts), which reads the value or adds the SET's delta there, so the
 * final table is the model's in every order. The nodes' runtimes are
 * attached before the join (kv5_deleg_attach, the harness hook), the
 * trusts exchanged through the runtimes' boards once per cluster. */
#include "bench/kv5/kv5.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/deleg.h"
#include "dsm/module.h"
#include "dsm/compact.h"

enum { BOARD_BYTES = KV5_NODES * DSM_DELEG_TRUST_WIRE };

static struct {
    dsm_harness_t *c;
    dsm_deleg_rt_t *rt[KV5_NODES];
    uint32_t keys;
    uint64_t *table[KV5_NODES];           /* node n's keys: id n + 3 j at words 4 j .. 4 j + 3 */
    dsm_deleg_trust_t trust[KV5_NODES][KV5_NODES];   /* [from node][to the trustee of node] */
    int ready;
} dg;

dsm_status_t kv5_deleg_attach(void *ctx, int i, dsm_node_t *node)
{
    (void)ctx;
    dsm_deleg_config_t cfg = {.threads = 1, .idle_sleep = 1};
    dsm_status_t st = dsm_deleg_rt_create(&cfg, &dg.rt[i]);
    if (st != DSM_OK) return st;
    dsm_compact_config_t compact;
    dsm_compact_config_init(&compact);
    /* every module, as dsm_start attaches them, and deleg with this runtime */
    for (size_t m = 0; m < dsm_module_count && st == DSM_OK; m++) {
        void *arg = !strcmp(dsm_module_table[m]->name, "compact") ? (void *)&compact
                    : !strcmp(dsm_module_table[m]->name, "deleg") ? (void *)dg.rt[i]
                                                                  : NULL;
        st = dsm_module_table[m]->attach(node, arg);
    }
    return st;
}

typedef struct op_env {
    uint32_t slot;
    uint32_t get;
    uint64_t delta;
} op_env_t;

static void kv_closure(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)args;
    (void)args_len;
    const op_env_t *e = env;
    uint64_t *v = (uint64_t *)prop + (size_t)e->slot * KV5_VALUE_WORDS;
    if (!e->get)
        for (int k = 0; k < KV5_VALUE_WORDS; k++) v[k] += e->delta;
    dsm_deleg_return(ret, v, KV5_VALUE_WORDS * sizeof *v);
}

typedef struct deleg_job {
    const kv5_streams_t *s;
    int phase;   /* 0 trusts, 1 run, 2 drop */
    int node;
    int bad;
    dsm_status_t st;
} deleg_job_t;

static void job_main(void *arg, unsigned worker)
{
    deleg_job_t *j = arg;
    if (worker != 0) return;
    int i = j->node;
    if (j->phase == 2) {
        for (int n = 0; n < KV5_NODES; n++)
            if (dg.trust[i][n].weight) (void)dsm_deleg_trust_drop(&dg.trust[i][n]);
        return;
    }
    const kv5_op_t *ops = j->s->ops[i];
    for (uint64_t n = 0; n < j->s->cell.nops; n++) {
        uint32_t id = ops[n].id;
        op_env_t e = {.slot = id / KV5_NODES, .get = ops[n].get, .delta = ops[n].delta};
        uint64_t v[KV5_VALUE_WORDS];
        size_t len = 0;
        dsm_status_t st = dsm_deleg_apply(&dg.trust[i][id % KV5_NODES], kv_closure, &e, sizeof e, v, sizeof v, &len);
        if (st != DSM_OK) {
            j->st = st;
            return;
        }
        for (int k = 1; k < KV5_VALUE_WORDS; k++)
            if (len != sizeof v || v[k] != v[0]) j->bad = 1;
    }
}

/* Node i's part of a run of every node's runtime. */
static int run_phase(void *ctx, int i)
{
    deleg_job_t *jobs = ctx;
    dsm_status_t st = dsm_deleg_rt_start(dg.rt[i], job_main, &jobs[i]);
    if (st == DSM_OK) st = dsm_deleg_rt_join(dg.rt[i]);
    if (st == DSM_OK) st = jobs[i].st;
    if (st != DSM_OK || jobs[i].bad) {
        fprintf(stderr, "dsm-bench-kv5: deleg node %d: %s\n", i, jobs[i].bad ? "a torn value" : dsm_strerror(st));
        return -1;
    }
    return 0;
}

/* Entrust node i's table, export a share to each other node on the board,
 * then import the others' shares. */
static int exchange(void *ctx, int i)
{
    (void)ctx;
    dsm_deleg_rt_t *rt = dg.rt[i];
    uint8_t board[BOARD_BYTES];
    uint32_t self = dsm_node_rank(dg.c->nodes[i]);
    dsm_status_t st = dsm_deleg_register("kv5.op", kv_closure);
    if (st == DSM_ERR_EXISTS) st = DSM_OK;
    if (st == DSM_OK) st = dsm_deleg_entrust(rt, 0, dg.table[i], NULL, 0, &dg.trust[i][i]);
    for (int n = 0; n < KV5_NODES && st == DSM_OK; n++)
        if (n != i)
            st = dsm_deleg_trust_export(&dg.trust[i][i], board + (size_t)n * DSM_DELEG_TRUST_WIRE,
                                        DSM_DELEG_TRUST_WIRE);
    if (st == DSM_OK) st = dsm_deleg_board_set(rt, board, sizeof board);
    for (int n = 0; n < KV5_NODES && st == DSM_OK; n++) {
        if (n == i) continue;
        uint8_t theirs[BOARD_BYTES];
        size_t len = 0;
        st = dsm_deleg_board_get(rt, dsm_node_rank(dg.c->nodes[n]), theirs, sizeof theirs, &len, 20000);
        if (st == DSM_OK)
            st = dsm_deleg_trust_import(rt, theirs + (size_t)i * DSM_DELEG_TRUST_WIRE, DSM_DELEG_TRUST_WIRE,
                                        &dg.trust[i][n]);
    }
    (void)self;
    if (st != DSM_OK) fprintf(stderr, "dsm-bench-kv5: deleg trusts, node %d: %s\n", i, dsm_strerror(st));
    return st == DSM_OK ? 0 : -1;
}

int kv5_run_deleg(dsm_harness_t *c, const kv5_streams_t *s, kv5_result_t *out)
{
    for (int i = 0; i < KV5_NODES; i++)
        if (dg.rt[i] == NULL) {
            fprintf(stderr, "dsm-bench-kv5: deleg: node %d has no delegation runtime\n", i);
            return -1;
        }
    kv5_result_t setup;
    if (!dg.ready) {
        dg.c = c;
        dg.keys = s->cell.keys;
        for (int i = 0; i < KV5_NODES; i++) {
            dg.table[i] = calloc((s->cell.keys + KV5_NODES - 1) / KV5_NODES * KV5_VALUE_WORDS, sizeof(uint64_t));
            if (dg.table[i] == NULL) return -1;
        }
        if (kv5_run_nodes(c, exchange, NULL, &setup) != 0) return -1;
        dg.ready = 1;
    }
    /* the initial values, while no runtime runs */
    for (uint32_t id = 0; id < s->cell.keys; id++)
        for (int k = 0; k < KV5_VALUE_WORDS; k++)
            dg.table[id % KV5_NODES][(size_t)(id / KV5_NODES) * KV5_VALUE_WORDS + k] = kv5_initial(&s->cell, id);
    deleg_job_t jobs[KV5_NODES];
    for (int i = 0; i < KV5_NODES; i++) jobs[i] = (deleg_job_t){.s = s, .phase = 1, .node = i};
    if (kv5_run_nodes(c, run_phase, jobs, out) != 0) return -1;
    uint64_t *final = malloc(s->cell.keys * sizeof *final);
    if (final == NULL) return -1;
    kv5_model_adds(s, final);
    int rc = 0;
    for (uint32_t id = 0; id < s->cell.keys && rc == 0; id++)
        for (int k = 0; k < KV5_VALUE_WORDS; k++)
            if (dg.table[id % KV5_NODES][(size_t)(id / KV5_NODES) * KV5_VALUE_WORDS + k] != final[id]) {
                fprintf(stderr, "dsm-bench-kv5: deleg: key %u's final value differs from the model's\n", id);
                rc = -1;
                break;
            }
    free(final);
    out->ops = (double)KV5_NODES * (double)s->cell.nops;
    return rc;
}

void kv5_deleg_close(void)
{
    if (dg.ready) {
        deleg_job_t jobs[KV5_NODES];
        for (int i = 0; i < KV5_NODES; i++) jobs[i] = (deleg_job_t){.phase = 2, .node = i};
        kv5_result_t r;
        (void)kv5_run_nodes(dg.c, run_phase, jobs, &r);
    }
    for (int i = 0; i < KV5_NODES; i++) {
        free(dg.table[i]);
        dg.table[i] = NULL;
    }
    memset(dg.trust, 0, sizeof dg.trust);
    dg.ready = 0;
    dg.c = NULL;
}

/* After the nodes are gone (dsm_start_deleg's order). */
void kv5_deleg_destroy(void)
{
    for (int i = 0; i < KV5_NODES; i++) {
        dsm_deleg_rt_destroy(dg.rt[i]);
        dg.rt[i] = NULL;
    }
}
