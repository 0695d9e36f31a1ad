/* dsm-bench-gossamer: the Open MPI anchor, run as a separate program
 * (dsm-mpi-echo, beside this one) under mpirun over tcp loopback. mpirun
 * refuses root unless told: --allow-run-as-root is passed (the benchmark
 * machines run as root in containers). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/driver.h"
#include "bench/gossamer/gossamer.h"

int gossamer_mpi_echo(size_t n, size_t window, size_t size, double *mops, double *p999_us)
{
    char prog[PATH_MAX];
    if (!dsm_bench_sibling("dsm-mpi-echo", prog, sizeof prog) || access(prog, X_OK) != 0) return -1;
    char cmd[PATH_MAX + 512];
    snprintf(cmd, sizeof cmd,
             "mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml ob1 --mca btl tcp,self "
             "--mca btl_tcp_if_include lo --mca mpi_yield_when_idle 1 '%s' %zu %zu %zu 2>/dev/null",
             prog, n, window, size);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[256];
    int got = 0;
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "mops=%lf p999_us=%lf", mops, p999_us) == 2) got = 1;
    int rc = pclose(p);
    return got && rc == 0 ? 0 : -1;
}
