/* The memcached load generator of the trust benchmark: pipelined get/set
 * (zipf keys, 5% writes, 32 B values) over several connections, the same
 * for stock memcached and the delegation server. */
#ifndef DSM_BENCH_TRUST_LOADGEN_H
#define DSM_BENCH_TRUST_LOADGEN_H

#include <stdint.h>
#include <sys/types.h>

enum { LG_MAX_WORKERS = 16 };

/* What a run may also measure of the server: set server (its pid) for its
 * CPU, want_split for how many of the run's connections each of its
 * workers holds (the delegation server's `stats workers`). */
/* The delegation server's counters a probe reads (`stats workers`, summed
 * over the workers): commands, and per command over the timed part the
 * rest. */
enum { LG_COMMANDS, LG_HANDED_OFF, LG_WAKEUPS, LG_POLLS, LG_BLOCKING_POLLS, LG_COUNTERS };

typedef struct lg_probe {
    pid_t server;              /* 0: no CPU figure */
    int want_split;            /* also the counters: the delegation server's only */
    double cpu_us_per_req;     /* out: server CPU (user + system) per completed request, timed part */
    unsigned workers;          /* out: 0 when not asked or not answered */
    unsigned split[LG_MAX_WORKERS];
    /* out, with want_split: each counter's growth over the timed part per
     * command the server counted (LG_COMMANDS: the commands; all 0 when not
     * answered) */
    double per_command[LG_COUNTERS];
} lg_probe_t;

/* Prefill nkeys keys, then run `seconds` with `depth` requests in flight per
 * connection, all connections on one client thread's epoll set; returns
 * completed requests per second. probe may be NULL. */
double loadgen(uint16_t port, unsigned nconns, unsigned depth, uint32_t nkeys, double seconds, lg_probe_t *probe);
/* A TCP port on 127.0.0.1 that was free a moment ago. */
uint16_t free_port(void);

#endif
