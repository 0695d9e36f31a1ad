/* What a block remap costs the other threads of the process that remaps.
 * mmap(MAP_FIXED) over a page that was mapped and touched unmaps it, and
 * the kernel then flushes the TLB of every other CPU the process runs on,
 * by an interrupt to each (on a virtual machine, one the hypervisor
 * delivers). CoRM's compaction merges blocks by such remaps, so every
 * thread of the server's process pays for them; over tcp that includes the
 * progress thread that serves each read, which an RDMA read would not
 * need. A sibling thread's time per pass over its buffer with the remaps
 * in its own process is set against the same remaps from a process of
 * their own: the same work on the same two cores, no address space shared. */
#include "bench/corm/shootdown.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/busy.h"
#include "dsm/clock.h"

enum { PAGES = 64, PAGE = 4096, SIBLING_BUF = 256 << 10, START_TIMEOUT_MS = 5000 };

/* Between the measuring process and a remapper (a thread of it, or a
 * process it forks): MAP_SHARED anonymous memory. */
typedef struct window {
    atomic_int ready, go, stop, failed;
    atomic_uint_fast64_t remaps;
} window_t;

typedef struct remapper_arg {
    window_t *w;
    int cpu;
} remapper_arg_t;

int dsm_remapper_open(dsm_remapper_t *r)
{
    r->n = 0;
    r->base = MAP_FAILED;
    r->fd = memfd_create("dsm-shootdown", MFD_CLOEXEC);
    if (r->fd >= 0 && ftruncate(r->fd, (off_t)PAGES * PAGE) == 0)
        r->base = mmap(NULL, (size_t)PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (r->base == MAP_FAILED) {
        if (r->fd >= 0)
            close(r->fd);
        r->fd = -1;
        return -1;
    }
    for (int i = 0; i < PAGES; i++)
        r->base[(size_t)i * PAGE] = 1;
    return 0;
}

int dsm_remapper_step(dsm_remapper_t *r)
{
    size_t page = r->n % PAGES;
    off_t onto = (off_t)((page + r->n / PAGES + 1) % PAGES) * PAGE;
    if (mmap(r->base + page * PAGE, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, r->fd, onto) == MAP_FAILED)
        return -1;
    r->base[page * PAGE]++;
    r->n++;
    return 0;
}

void dsm_remapper_close(dsm_remapper_t *r)
{
    if (r->fd < 0)
        return;
    munmap(r->base, (size_t)PAGES * PAGE);
    close(r->fd);
    r->fd = -1;
}

/* Remaps round and round until told to stop. */
static void *remap_loop(void *p)
{
    const remapper_arg_t *a = p;
    window_t *w = a->w;
    dsm_remapper_t r;
    dsm_bench_pin(a->cpu);
    if (dsm_remapper_open(&r) != 0) {
        atomic_store(&w->failed, 1);
        return NULL;
    }
    atomic_store(&w->ready, 1);
    while (!atomic_load(&w->go))
        ;
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        if (dsm_remapper_step(&r) != 0) {
            atomic_store(&w->failed, 1);
            break;
        }
        atomic_store_explicit(&w->remaps, r.n, memory_order_relaxed);
    }
    dsm_remapper_close(&r);
    return NULL;
}

/* One window: the remapper started (a thread here, or a process of its
 * own), then the sibling's passes for window_s. 0, or -1. */
static int window_run(window_t *w, int other_process, int cpu_remapper, volatile uint8_t *buf, double window_s,
                      double *pass_us, double *remaps_per_s)
{
    atomic_store(&w->ready, 0);
    atomic_store(&w->go, 0);
    atomic_store(&w->stop, 0);
    atomic_store(&w->failed, 0);
    atomic_store(&w->remaps, 0);
    remapper_arg_t a = {w, cpu_remapper};
    pthread_t t;
    pid_t child = -1;
    if (other_process) {
        if ((child = fork()) < 0)
            return -1;
        if (child == 0) {
            remap_loop(&a);
            _exit(0);
        }
    } else if (pthread_create(&t, NULL, remap_loop, &a) != 0) {
        return -1;
    }
    uint64_t deadline = dsm_now_ns() + START_TIMEOUT_MS * 1000000ull;
    while (!atomic_load(&w->ready) && !atomic_load(&w->failed) && dsm_now_ns() < deadline)
        sched_yield();
    int ok = atomic_load(&w->ready) && !atomic_load(&w->failed);
    uint64_t passes = 0, t0 = dsm_now_ns(), t1 = t0, window_ns = (uint64_t)(window_s * 1e9);
    atomic_store(&w->go, 1);
    while (ok && t1 - t0 < window_ns) {
        for (size_t i = 0; i < SIBLING_BUF; i += 64)
            buf[i]++;
        passes++;
        t1 = dsm_now_ns();
    }
    uint64_t remaps = atomic_load(&w->remaps);
    atomic_store(&w->stop, 1);
    if (other_process)
        waitpid(child, NULL, 0);
    else
        pthread_join(t, NULL);
    if (!ok || atomic_load(&w->failed) || passes == 0 || remaps == 0)
        return -1;
    *pass_us = (double)(t1 - t0) / 1e3 / (double)passes;
    *remaps_per_s = (double)remaps / ((double)(t1 - t0) / 1e9);
    return 0;
}

/* The measuring process: `reps` pairs of windows, in turn own-process
 * first and other-process first. */
static int measure_here(window_t *w, int cpu_sibling, int cpu_remapper, int reps, double window_s,
                        dsm_shootdown_t *out)
{
    dsm_bench_pin(cpu_sibling);
    volatile uint8_t *buf = calloc(1, SIBLING_BUF);
    if (buf == NULL)
        return -1;
    int rc = 0;
    for (int k = 0; k < reps && rc == 0; k++) {
        for (int j = 0; j < 2 && rc == 0; j++) {
            int other = (k & 1) ? !j : j;
            rc = other ? window_run(w, 1, cpu_remapper, buf, window_s, &out->pass_us_other[k], &out->remaps_per_s_other[k])
                       : window_run(w, 0, cpu_remapper, buf, window_s, &out->pass_us_same[k], &out->remaps_per_s_same[k]);
        }
        /* The sibling's time in its own-process window beyond what the
           other-process rate would have taken, per remap: window x (1 -
           other/same) over the window's remaps. */
        double same = out->pass_us_same[k], other = out->pass_us_other[k];
        out->lost_us_per_remap[k] = rc == 0 ? 1e6 * (1.0 - other / same) / out->remaps_per_s_same[k] : 0;
    }
    free((void *)buf);
    out->reps = rc == 0 ? reps : 0;
    return rc;
}

int dsm_shootdown_measure(int cpu_sibling, int cpu_remapper, int reps, double window_s, dsm_shootdown_t *out)
{
    memset(out, 0, sizeof *out);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpu_sibling == cpu_remapper || cpus <= cpu_sibling || cpus <= cpu_remapper || reps < 1 ||
        reps > DSM_SHOOTDOWN_MAX_REPS)
        return -1;
    struct shared {
        window_t w;
        dsm_shootdown_t result;
        atomic_int rc;
    } *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return -1;
    atomic_store(&sh->rc, -1);
    pid_t child = fork();
    if (child == 0) {
        atomic_store(&sh->rc, measure_here(&sh->w, cpu_sibling, cpu_remapper, reps, window_s, &sh->result));
        _exit(0);
    }
    int status = 0;
    int rc = child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) ? atomic_load(&sh->rc) : -1;
    if (rc == 0)
        *out = sh->result;
    munmap(sh, sizeof *sh);
    return rc;
}
