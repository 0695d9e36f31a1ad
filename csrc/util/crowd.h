/* Whether the host is crowded: more runnable threads than the cores this
 * process can be given. Threads that spin while they wait for each other (a
 * progress thread's linger, a waiter's spin, a delegation thread's idle
 * polls) pay only while a core is free; on a crowded host each spin can cost
 * the thread it waits for a scheduler time slice. Sampled from
 * /proc/loadavg's running count by whichever thread asks first, at most
 * every DSM_CROWD_CHECK_MS.
 *
 * The cores are the online CPUs bounded by the process's cgroup (its cpuset
 * and its cpu quota, v1 or v2), not its affinity: a thread pinned to one
 * core leaves the other cores to the threads it waits for, so a pinned
 * process on an idle two-core host with one other thread running is not
 * crowded. */
#ifndef DSM_UTIL_CROWD_H
#define DSM_UTIL_CROWD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum { DSM_CROWD_CHECK_MS = 2, DSM_CROWD_RUN_CAP = 8 };

typedef struct dsm_crowd {
    int loadavg_fd;  /* -1: never crowded */
    unsigned cores;
    _Atomic uint64_t checked_ns;
    _Atomic unsigned run;  /* consecutive samples that found the host crowded (capped) */
} dsm_crowd_t;

void dsm_crowd_init(dsm_crowd_t *c);
void dsm_crowd_fini(dsm_crowd_t *c);
/* How many samples in a row (up to DSM_CROWD_RUN_CAP) found the host
 * crowded, as of now_ns (dsm_now_ns); 0 when it is not. One sample can
 * catch a thread that is only waking up: callers that act on a blip ask
 * for a run. */
unsigned dsm_crowd_run(dsm_crowd_t *c, uint64_t now_ns);

/* The pieces, with their inputs injected (tests):
 * the cores the process can be given, `online` bounded by the cgroup read
 * from the files under `root` ("" for the real /: proc/self/cgroup,
 * proc/self/mountinfo and the cgroup mounts it names); at least 1. */
unsigned dsm_crowd_cores_at(const char *root, unsigned online);
/* Whether /proc/loadavg's text shows more running threads (the caller
 * among them) than `cores`; false if it cannot be read. */
bool dsm_crowd_loadavg_crowded(const char *loadavg, unsigned cores);
/* CPUs in a cpuset list ("0-3,6"); 0 if it is not one. */
unsigned dsm_crowd_cpulist_count(const char *list);

#endif
