/* Names the calling thread as top -H, perf and gdb show it: a node runs
 * several threads of its own (progress, control, a module's server), and
 * under a profiler unnamed they are all the program's name. */
#ifndef DSM_UTIL_THREAD_NAME_H
#define DSM_UTIL_THREAD_NAME_H

#include <pthread.h>
#include <stdio.h>

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
