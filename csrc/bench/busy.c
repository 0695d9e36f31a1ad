/* Pinning, and busy processes for a benchmark's loaded state (see busy.h). */
#include "bench/busy.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

void dsm_bench_pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        perror("sched_setaffinity");   /* fewer cores than asked: measure unpinned */
}

void dsm_bench_busy_start(pid_t *pids, int n)
{
    fflush(stdout);   /* or a child's copy of the buffer is printed again */
    for (int i = 0; i < n && i < DSM_BENCH_BUSY_MAX; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            dsm_bench_pin(i);
            for (volatile unsigned long x = 0;; x++)
                ;
        }
    }
}

void dsm_bench_busy_stop(pid_t *pids, int n)
{
    for (int i = 0; i < n && i < DSM_BENCH_BUSY_MAX; i++) {
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
        }
        pids[i] = 0;
    }
}
