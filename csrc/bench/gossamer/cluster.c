/* dsm-bench-gossamer: the in-process clusters (see gossamer.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/gossamer/gossamer.h"

#define SECRET "gossamer-bench-secret"

void gossamer_die(const char *what, dsm_status_t st)
{
    fprintf(stderr, "dsm-bench-gossamer: %s: %s\n", what, dsm_strerror(st));
    exit(1);
}

void gossamer_emit(dsm_report_t *rep, const char *name, double v, const char *unit, const char *anchor, double a,
                   int higher)
{
    const dsm_figure_t *f = dsm_report_add(rep, name, v, unit, anchor, a, higher);
    if (f) dsm_report_print_figure(stdout, f);
    fflush(stdout);
}

void gossamer_cluster_start(gossamer_cluster_t *c, dsm_transport_t tr, unsigned n, unsigned busy_mask, int deleg)
{
    memset(c, 0, sizeof *c);
    c->tr = tr;
    dsm_coord_config_t cc = {.bind = "127.0.0.1:0", .secret = SECRET, .peer_timeout_ms = 5000, .transport = tr};
    dsm_status_t st = dsm_coord_start(&cc, &c->coord);
    if (st != DSM_OK) gossamer_die("coordinator", st);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", dsm_coord_port(c->coord));
    for (unsigned i = 0; i < n; i++) {
        dsm_node_config_t cfg;
        dsm_node_config_init(&cfg);
        cfg.coordinator = addr;
        cfg.secret = SECRET;
        cfg.rank = (int)i;
        cfg.transport = tr;
        cfg.net_device = tr == DSM_TRANSPORT_TCP ? "lo" : NULL;
        cfg.op_timeout_ms = 20000;
        cfg.peer_timeout_ms = 5000;
        cfg.progress = (busy_mask >> i) & 1 ? DSM_PROGRESS_BUSY : DSM_PROGRESS_BLOCKING;
        if ((st = dsm_node_create(&cfg, &c->node[i])) != DSM_OK) gossamer_die("node", st);
        c->n = i + 1;
        if (deleg) {
            dsm_deleg_config_t dc = {.threads = 1};
            if ((st = dsm_deleg_rt_create(&dc, &c->rt[i])) != DSM_OK) gossamer_die("runtime", st);
            if ((st = dsm_deleg_attach(c->node[i], c->rt[i])) != DSM_OK) gossamer_die("attach", st);
        }
        if ((st = dsm_node_join(c->node[i])) != DSM_OK) gossamer_die("join", st);
    }
    for (unsigned i = 0; i < n; i++)
        if ((st = dsm_node_wait_daemons(c->node[i], n, 10000)) != DSM_OK) gossamer_die("wait", st);
}

void gossamer_cluster_stop(gossamer_cluster_t *c)
{
    for (unsigned i = 0; i < c->n; i++)
        if (c->rt[i]) dsm_deleg_rt_destroy(c->rt[i]);
    /* the last rank first: rank 0 then sees no peer fail */
    for (unsigned i = c->n; i-- > 0;) dsm_node_destroy(c->node[i]);
    dsm_coord_stop(c->coord);
    memset(c, 0, sizeof *c);
}
