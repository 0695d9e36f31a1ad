/* The memcached text-protocol server on the sharded key-value store (apps
 * layer, internal to it): start/stop for tests and benchmarks, and the
 * serve-until-signalled loop behind the dsm-memcached program. */
#ifndef DSM_APPS_MC_SERVER_H
#define DSM_APPS_MC_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"
#include "dsm/transport.h"

typedef struct dsm_mc_config {
    const char *host;       /* default 127.0.0.1 */
    uint16_t port;          /* 0: pick a free port (see dsm_mc_port) */
    unsigned workers;       /* socket worker threads (each is also a shared trustee) */
    unsigned trustees;      /* extra dedicated trustee threads (0 = shared mode) */
    unsigned shards;        /* hash table shards (default 64) */
    size_t item_max;        /* largest item, default 1 MiB like memcached (-I) */
    size_t memory;          /* item bytes kept before LRU eviction, default 64 MiB (-m) */
    unsigned max_conns;     /* open connections, default 1024 (-c) */
    int pin;
    /* how an idle worker waits for its next request (dsm_deleg_config_t's
     * idle_progress): 0, blocking, sleeps in epoll at once */
    dsm_progress_mode_t progress;
} dsm_mc_config_t;

typedef struct dsm_mc_server dsm_mc_server_t;

dsm_status_t dsm_mc_start(const dsm_mc_config_t *cfg, dsm_mc_server_t **out);
uint16_t dsm_mc_port(const dsm_mc_server_t *srv);
/* Stop accepting, close every connection, join the threads, free. */
void dsm_mc_stop(dsm_mc_server_t *srv);
/* Serve until SIGINT or SIGTERM (blocks them in the calling thread). Prints
 * "listening on HOST:PORT" to stdout once ready. */
dsm_status_t dsm_mc_serve(const dsm_mc_config_t *cfg);

#endif
