/* The library's own threads: how they start and how they are named.
 *
 * They start with the asynchronous signals blocked. A process's SIGINT or
 * SIGTERM is delivered to any thread that does not block it; taken by a
 * progress or control thread, it runs the application's handler there, and
 * an interpreter whose main thread sleeps (Python's KeyboardInterrupt) never
 * sees it. Faults stay deliverable: they belong to the thread that caused
 * them. A node runs several threads (progress, control, a module's server),
 * and under a profiler unnamed they are all the program's name.
 *
 * Part of the SDK, but not in dsm/sdk.h: header-only, it needs GNU
 * extensions (pthread_setname_np), so a plugin defines _GNU_SOURCE before
 * its first #include and includes dsm/thread.h. libdsm's own files include
 * it as util/thread.h. */
#ifndef DSM_THREAD_H
#define DSM_THREAD_H

#include <pthread.h>
#include <signal.h>
#include <stdio.h>

#ifndef _GNU_SOURCE
#error "dsm/thread.h needs GNU extensions: define _GNU_SOURCE before any #include"
#endif

/* Blocks every asynchronous signal in the calling thread; *old gets the
 * mask to give back with dsm_signals_restore. Threads a callee starts
 * (UCX's) inherit it. */
static inline void dsm_signals_block_async(sigset_t *old)
{
    sigset_t set;
    sigfillset(&set);
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT, SIGPROF};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
        sigdelset(&set, faults[i]);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

static inline void dsm_signals_restore(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

/* pthread_create for the library's threads: the thread starts with the
 * asynchronous signals blocked; the caller's mask is unchanged. */
static inline int dsm_thread_start(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    sigset_t old;
    dsm_signals_block_async(&old);
    int rc = pthread_create(thread, attr, fn, arg);
    dsm_signals_restore(&old);
    return rc;
}

/* `name` and `index`: "dsm-trust" and 3 name it "dsm-trust-3"; a negative
 * index, just the name. Linux keeps 15 characters. */
static inline void dsm_thread_name(const char *name, int index)
{
    char buf[32];
    if (index < 0)
        snprintf(buf, sizeof buf, "%.15s", name);
    else
        snprintf(buf, sizeof buf, "%.15s-%d", name, index);
    buf[15] = '\0';
    (void)pthread_setname_np(pthread_self(), buf);
}

#endif
