/* Whether the host is crowded: more runnable threads than this process has
 * cores. Threads that spin while they wait for each other (a progress
 * thread's linger, a waiter's spin, a delegation thread's idle polls) pay
 * only while a core is free; on a crowded host each spin can cost the thread
 * it waits for a scheduler time slice. Sampled from /proc/loadavg's running
 * count by whichever thread asks first, at most every DSM_CROWD_CHECK_MS. */
#ifndef DSM_UTIL_CROWD_H
#define DSM_UTIL_CROWD_H

#include <stdatomic.h>
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

#endif
