/* What a block remap costs the other threads of the process that remaps.
 * mmap(MAP_FIXED) over a page that was mapped and touched unmaps it, and
 * the kernel then flushes the TLB of every other CPU the process runs on,
 * by an interrupt to each (on a virtual machine, one the hypervisor
 * delivers). CoRM's compaction merges blocks by such remaps, so every
 * thread of the server's process pays for them; over tcp that includes the
 * progress thread that serves each read, which an RDMA read would not
 * need. A sibling thread's time per pass over its buffer with the remaps
 * in its own process is set against the same remaps from a process of
 * their own: the same work on the same two cores, no address space shared.
 * And the flushes of dropping a batch's pages before its remaps, as one
 * span against a list of pages, counted from the host's interrupts. */
#include "bench/corm/shootdown.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
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

/* A measurement's CPUs (the sibling's, and the thread's that remaps or
 * drops pages) and runs. */
typedef struct shootdown_arg {
    int cpu_sibling, cpu_remapper, reps;
    double window_s;
} shootdown_arg_t;

/* The measuring process: `reps` pairs of windows, in turn own-process
 * first and other-process first. */
static int measure_here(const void *arg, void *result)
{
    const shootdown_arg_t *a = arg;
    dsm_shootdown_t *out = result;
    int cpu_sibling = a->cpu_sibling, cpu_remapper = a->cpu_remapper, reps = a->reps;
    double window_s = a->window_s;
    dsm_bench_pin(cpu_sibling);
    /* shared with a remapper forked from here */
    window_t *w = mmap(NULL, sizeof *w, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    volatile uint8_t *buf = calloc(1, SIBLING_BUF);
    if (w == MAP_FAILED || buf == NULL) {
        if (w != MAP_FAILED)
            munmap(w, sizeof *w);
        free((void *)buf);
        return -1;
    }
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
    munmap(w, sizeof *w);
    out->reps = rc == 0 ? reps : 0;
    return rc;
}

/* Two CPUs of this host, and a number of runs a result holds. */
static int args_ok(const shootdown_arg_t *a)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return a->cpu_sibling != a->cpu_remapper && a->cpu_sibling < cpus && a->cpu_remapper < cpus && a->reps >= 1 &&
           a->reps <= DSM_SHOOTDOWN_MAX_REPS;
}

/* fn(arg, a result of `size` bytes) in a child process, away from the
 * caller's threads; the result is copied to out. fn's return, or -1. */
static int run_in_child(int (*fn)(const void *arg, void *result), const void *arg, void *out, size_t size)
{
    enum { HEAD = 64 };   /* the child's return code, then the result */
    uint8_t *sh = mmap(NULL, HEAD + size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return -1;
    atomic_int *child_rc = (atomic_int *)(void *)sh;
    atomic_store(child_rc, -1);
    pid_t child = fork();
    if (child == 0) {
        atomic_store(child_rc, fn(arg, sh + HEAD));
        _exit(0);
    }
    int status = 0;
    int rc = child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) ? atomic_load(child_rc) : -1;
    if (rc == 0)
        memcpy(out, sh + HEAD, size);
    munmap(sh, HEAD + size);
    return rc;
}

int dsm_shootdown_measure(int cpu_sibling, int cpu_remapper, int reps, double window_s, dsm_shootdown_t *out)
{
    memset(out, 0, sizeof *out);
    shootdown_arg_t a = {cpu_sibling, cpu_remapper, reps, window_s};
    return args_ok(&a) ? run_in_child(measure_here, &a, out, sizeof *out) : -1;
}

void dsm_host_interrupts(uint64_t *tlb, uint64_t *resched, uint64_t *call)
{
    static const char *const rows[3] = {"TLB:", "RES:", "CAL:"};
    uint64_t *out[3] = {tlb, resched, call};
    for (int r = 0; r < 3; r++)
        *out[r] = 0;
    FILE *f = fopen("/proc/interrupts", "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ')
            p++;
        int r = 0;
        while (r < 3 && strncmp(p, rows[r], 4) != 0)
            r++;
        if (r == 3)
            continue;
        for (p += 4;;) {
            char *end;
            unsigned long long v = strtoull(p, &end, 10);
            if (end == p)
                break;
            *out[r] += v;
            p = end;
        }
    }
    if (f)
        fclose(f);
}

/* ---- dropping a batch's pages ---------------------------------------------------- */

static uint64_t host_tlb_shootdowns(void)
{
    uint64_t tlb, resched, call;
    dsm_host_interrupts(&tlb, &resched, &call);
    return tlb;
}

static void *spin_until(void *p)
{
    const atomic_int *stop = p;
    while (!atomic_load_explicit(stop, memory_order_relaxed))
        ;
    return NULL;
}

/* The dropping process: reps pairs of calls, list and span in turn first. */
static int drop_here(const void *arg, void *result)
{
    const shootdown_arg_t *a = arg;
    dsm_drop_flushes_t *out = result;
    int cpu_sibling = a->cpu_sibling, cpu_dropper = a->cpu_remapper, reps = a->reps;
    enum { RUN = 2 * DSM_DROP_PAGES };
    int fd = memfd_create("dsm-drop", MFD_CLOEXEC);
    uint8_t *m = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)RUN * PAGE) == 0)
        m = mmap(NULL, (size_t)RUN * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    pthread_t sibling;
    atomic_int stop = 0;
    if (m == MAP_FAILED || pthread_create(&sibling, NULL, spin_until, &stop) != 0) {
        if (m != MAP_FAILED)
            munmap(m, (size_t)RUN * PAGE);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_sibling, &set);
    (void)pthread_setaffinity_np(sibling, sizeof set, &set);
    dsm_bench_pin(cpu_dropper);
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    struct iovec iov[DSM_DROP_PAGES];
    for (int i = 0; i < DSM_DROP_PAGES; i++)
        iov[i] = (struct iovec){.iov_base = m + (size_t)2 * i * PAGE, .iov_len = PAGE};
    int rc = 0;
    for (int k = 0; k < reps && rc == 0; k++)
        for (int j = 0; j < 2 && rc == 0; j++) {
            int span = (k & 1) ? !j : j;
            for (size_t i = 0; i < (size_t)RUN; i++)
                m[i * PAGE]++;   /* every page mapped and dirty, as a store's are */
            uint64_t t0 = host_tlb_shootdowns();
            if (span) {
                rc = madvise(m, (size_t)(RUN - 1) * PAGE, MADV_DONTNEED);
                out->span_per_call[k] = (double)(host_tlb_shootdowns() - t0);
            } else {
                int ok = pidfd >= 0 && syscall(SYS_process_madvise, pidfd, iov, DSM_DROP_PAGES, MADV_DONTNEED, 0) >= 0;
                out->list_per_call[k] = ok ? (double)(host_tlb_shootdowns() - t0) : -1;
            }
        }
    atomic_store(&stop, 1);
    pthread_join(sibling, NULL);
    if (pidfd >= 0)
        close(pidfd);
    munmap(m, (size_t)RUN * PAGE);
    close(fd);
    out->reps = rc == 0 ? reps : 0;
    return rc;
}

int dsm_drop_flushes_measure(int cpu_sibling, int cpu_dropper, int reps, dsm_drop_flushes_t *out)
{
    memset(out, 0, sizeof *out);
    shootdown_arg_t a = {cpu_sibling, cpu_dropper, reps, 0};
    return args_ok(&a) ? run_in_child(drop_here, &a, out, sizeof *out) : -1;
}
