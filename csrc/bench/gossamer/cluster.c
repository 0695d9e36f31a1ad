/* dsm-bench-gossamer: the in-process clusters (see gossamer.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/gossamer/gossamer.h"
#include "deleg/internal.h"

#define SECRET "gossamer-bench-secret"

dsm_progress_mode_t gossamer_node_progress = DSM_PROGRESS_BLOCKING;

void gossamer_die(const char *what, dsm_status_t st)
{
    fprintf(stderr, "dsm-bench-gossamer: %s: %s\n", what, dsm_strerror(st));
    exit(1);
}

void gossamer_emit(dsm_report_t *rep, const char *name, const double *ours, const double *anchor, int n,
                   const char *unit, const char *label, int higher)
{
    (void)dsm_report_add_runs(rep, name, ours, anchor, (size_t)n, unit, label, higher);
}

const char *gossamer_label(char *buf, size_t cap, const char *anchor, dsm_transport_t tr)
{
    snprintf(buf, cap, "%s%s", anchor,
             tr == DSM_TRANSPORT_TCP ? " [tcp: Gossamer's slot write is an AM its target applies, not RDMA]" : "");
    return buf;
}

/* Before node i joins: its delegation runtime, with `deleg`. */
static dsm_status_t attach_deleg(void *ctx, int i, dsm_node_t *node)
{
    gossamer_cluster_t *c = ctx;
    if (!c->deleg)
        return DSM_OK;
    /* One runtime thread per node, node i's on CPU i: unpinned, both
       spinning threads sometimes shared a core for a whole run (echo at
       ~5 Mops/s instead of 12-18). */
    dsm_deleg_config_t dc = {.threads = 1, .pin = 1, .pin_first = (unsigned)i};
    dsm_status_t st = dsm_deleg_rt_create(&dc, &c->rt[i]);
    return st != DSM_OK ? st : dsm_deleg_attach(node, c->rt[i]);
}

void gossamer_cluster_start(gossamer_cluster_t *c, dsm_transport_t tr, unsigned n, unsigned busy_mask, int deleg)
{
    memset(c, 0, sizeof *c);
    c->tr = tr;
    c->deleg = deleg;
    dsm_harness_bench_init(&c->k, tr, SECRET, 0, busy_mask);
    if (deleg && gossamer_node_progress != DSM_PROGRESS_BLOCKING) {
        c->k.blocking_mask = 0;
        c->k.progress_set = true;
        c->k.progress = gossamer_node_progress;
    }
    c->k.attach = attach_deleg;
    c->k.ctx = c;
    dsm_status_t st = dsm_harness_start(&c->k, (int)n);
    if (st != DSM_OK)
        gossamer_die("cluster", st);
}

void gossamer_cluster_stop(gossamer_cluster_t *c)
{
    for (int i = 0; i < c->k.n; i++)
        if (c->rt[i]) dsm_deleg_rt_destroy(c->rt[i]);
    dsm_harness_stop(&c->k);
    memset(c, 0, sizeof *c);
}
