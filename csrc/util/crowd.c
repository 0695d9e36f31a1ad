/* The crowded-host sample (see crowd.h). */
#include "util/crowd.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

void dsm_crowd_init(dsm_crowd_t *c)
{
    cpu_set_t cpus;
    c->cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? (unsigned)CPU_COUNT(&cpus) : 1;
    c->loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    atomic_init(&c->checked_ns, 0);
    atomic_init(&c->run, 0);
}

void dsm_crowd_fini(dsm_crowd_t *c)
{
    if (c->loadavg_fd >= 0) close(c->loadavg_fd);
    c->loadavg_fd = -1;
}

/* The running count of /proc/loadavg includes the caller. */
static int oversubscribed(const dsm_crowd_t *c)
{
    char buf[128];
    ssize_t n = c->loadavg_fd >= 0 ? pread(c->loadavg_fd, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0) return 0;
    buf[n] = 0;
    unsigned running = 0;
    if (sscanf(buf, "%*s %*s %*s %u/", &running) != 1) return 0;
    return running > c->cores;
}

unsigned dsm_crowd_run(dsm_crowd_t *c, uint64_t now_ns)
{
    uint64_t checked = atomic_load_explicit(&c->checked_ns, memory_order_relaxed);
    if (now_ns - checked >= (uint64_t)DSM_CROWD_CHECK_MS * 1000000u &&
        atomic_compare_exchange_strong_explicit(&c->checked_ns, &checked, now_ns, memory_order_relaxed,
                                                memory_order_relaxed)) {
        /* only the thread that won the sample writes the run */
        unsigned run = atomic_load_explicit(&c->run, memory_order_relaxed);
        run = !oversubscribed(c) ? 0 : run < DSM_CROWD_RUN_CAP ? run + 1 : DSM_CROWD_RUN_CAP;
        atomic_store_explicit(&c->run, run, memory_order_relaxed);
    }
    return atomic_load_explicit(&c->run, memory_order_relaxed);
}
