/* The tests' and benchmarks' in-process cluster (see cluster.h). */
#include "harness/cluster.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Said on stderr, not logged: a test may be reading the library's last
 * error (dsm_last_error) of the step that failed. */
static DSM_PRINTF(1, 2) void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("harness: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const char *secret(const dsm_harness_t *c)
{
    return c->secret ? c->secret : DSM_HARNESS_SECRET;
}

static uint32_t peer_timeout(const dsm_harness_t *c)
{
    return c->peer_timeout_ms ? c->peer_timeout_ms : 1500;
}

void dsm_harness_node_config(const dsm_harness_t *c, dsm_node_config_t *cfg, uint32_t rank)
{
    dsm_node_config_init(cfg);
    cfg->coordinator = c->coordinator;
    cfg->secret = secret(c);
    cfg->rank = rank;
    cfg->transport = c->transport;
    cfg->net_device = c->transport == DSM_TRANSPORT_TCP ? "lo" : NULL;
    cfg->partition_size = c->partition_size == DSM_HARNESS_NO_PARTITION ? 0
                          : c->partition_size ? c->partition_size : 16u << 20;
    if (rank < 32 && (c->no_partition_mask >> rank) & 1)
        cfg->partition_size = 0;
    cfg->heartbeat_ms = c->heartbeat_ms ? c->heartbeat_ms : 100;
    cfg->peer_timeout_ms = peer_timeout(c);
    cfg->op_timeout_ms = c->op_timeout_ms ? c->op_timeout_ms : 3000;
    cfg->chaos = c->chaos;
    if (rank < 32 && (c->busy_mask >> rank) & 1)
        cfg->progress = DSM_PROGRESS_BUSY;
    else if (rank < 32 && (c->blocking_mask >> rank) & 1)
        cfg->progress = DSM_PROGRESS_BLOCKING;
    else if (c->progress_set)
        cfg->progress = c->progress;
}

void dsm_harness_bench_init(dsm_harness_t *c, dsm_transport_t tr, const char *secret, uint64_t partition_size,
                            unsigned busy_mask)
{
    memset(c, 0, sizeof *c);
    c->transport = tr;
    c->secret = secret;
    c->partition_size = partition_size ? partition_size : DSM_HARNESS_NO_PARTITION;
    c->busy_mask = busy_mask;
    c->blocking_mask = ~0u;
    c->heartbeat_ms = 250;
    c->op_timeout_ms = 20000;
    c->peer_timeout_ms = 10000;
    c->wait_ms = 20000;
}

dsm_status_t dsm_harness_node_start(const dsm_harness_t *c, const dsm_node_config_t *cfg, int i,
                                    dsm_node_t **out)
{
    if (!c->attach)
        return dsm_start(cfg, out);
    dsm_status_t st = dsm_node_create(cfg, out);
    if (st == DSM_OK)
        st = c->attach(c->ctx, i, *out);
    if (st == DSM_OK)
        st = dsm_node_join(*out);
    if (st != DSM_OK && *out) {
        dsm_node_destroy(*out);
        *out = NULL;
    }
    return st;
}

dsm_status_t dsm_harness_start(dsm_harness_t *c, int n)
{
    c->n = 0;
    c->coord = NULL;
    if (n < 1 || n > DSM_HARNESS_MAX_NODES)
        return DSM_ERR_INVALID;
    dsm_coord_config_t cc = {.bind = "127.0.0.1:0", .secret = secret(c), .peer_timeout_ms = peer_timeout(c),
                             .transport = c->transport};
    dsm_status_t st = dsm_coord_start(&cc, &c->coord);
    if (st != DSM_OK) {
        fail("coordinator: %s", dsm_strerror(st));
        return st;
    }
    snprintf(c->coordinator, sizeof c->coordinator, "127.0.0.1:%u", dsm_coord_port(c->coord));
    for (int i = 0; i < n; i++) {
        dsm_node_config_t cfg;
        dsm_harness_node_config(c, &cfg, (uint32_t)i);
        if ((st = dsm_harness_node_start(c, &cfg, i, &c->nodes[i])) != DSM_OK) {
            fail("node %d of %d: %s", i, n, dsm_strerror(st));
            return st;
        }
        c->n = i + 1;
    }
    uint32_t wait = c->wait_ms ? c->wait_ms : 5000;
    for (int i = 0; i < n; i++)
        if ((st = dsm_node_wait_daemons(c->nodes[i], (uint32_t)n, wait)) != DSM_OK) {
            fail("node %d waiting for all %d nodes: %s", i, n, dsm_strerror(st));
            return st;
        }
    return DSM_OK;
}

void dsm_harness_stop(dsm_harness_t *c)
{
    if (c == NULL)
        return;   /* a setup that failed before it had a cluster */
    for (int i = c->n; i-- > 0;) {
        dsm_node_destroy(c->nodes[i]);
        c->nodes[i] = NULL;
    }
    if (c->coord)
        dsm_coord_stop(c->coord);
    c->n = 0;
    c->coord = NULL;
}
