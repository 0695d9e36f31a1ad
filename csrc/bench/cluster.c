/* The benchmarks' in-process cluster (see cluster.h). */
#include "bench/cluster.h"
#include "dsm/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what, dsm_status_t st)
{
    fprintf(stderr, "benchmark cluster: %s: %s\n", what, dsm_strerror(st));
    exit(1);
}

void dsm_bench_cluster_start(dsm_bench_cluster_t *c, int n, dsm_transport_t tr, const char *secret,
                             uint64_t partition_size, unsigned busy_mask, dsm_bench_attach_t attach, void *ctx)
{
    memset(c, 0, sizeof *c);
    if (n < 1 || n > DSM_BENCH_MAX_NODES)
        fail("node count", DSM_ERR_INVALID);
    c->n = n;
    dsm_coord_config_t cc = {.bind = "127.0.0.1:0", .secret = secret, .peer_timeout_ms = 10000, .transport = tr};
    dsm_status_t st = dsm_coord_start(&cc, &c->coord);
    if (st != DSM_OK)
        fail("coordinator", st);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", dsm_coord_port(c->coord));
    for (int i = 0; i < n; i++) {
        dsm_node_config_t cfg;
        dsm_node_config_init(&cfg);
        cfg.coordinator = addr;
        cfg.secret = secret;
        cfg.rank = (uint32_t)i;
        cfg.transport = tr;
        cfg.net_device = tr == DSM_TRANSPORT_TCP ? "lo" : NULL;
        cfg.partition_size = partition_size;
        cfg.op_timeout_ms = 20000;
        cfg.peer_timeout_ms = 10000;
        cfg.progress = (busy_mask >> i) & 1 ? DSM_PROGRESS_BUSY : DSM_PROGRESS_BLOCKING;
        if ((st = dsm_node_create(&cfg, &c->node[i])) != DSM_OK)
            fail("node", st);
        if (attach && (st = attach(ctx, i, c->node[i])) != DSM_OK)
            fail("attach", st);
        if ((st = dsm_node_join(c->node[i])) != DSM_OK)
            fail("join", st);
    }
    for (int i = 0; i < n; i++)
        if ((st = dsm_node_wait_daemons(c->node[i], (uint32_t)n, 20000)) != DSM_OK)
            fail("wait for the nodes", st);
}

void dsm_bench_cluster_stop(dsm_bench_cluster_t *c)
{
    for (int i = c->n; i-- > 0;)
        dsm_node_destroy(c->node[i]);
    dsm_coord_stop(c->coord);
}
