/* dsm-bench-loco: the Open MPI anchors, run as a separate program
 * (dsm-mpi-loco, beside this one) under mpirun with as many ranks as the
 * cluster has nodes, over shared memory: btl vader, and one-sided windows
 * by osc sm (loads and stores on the mapped window; Open MPI's default
 * pick, osc rdma over vader, was 4x slower on the lock and the
 * transfers). mpirun refuses root unless told: --allow-run-as-root (the
 * benchmark machines run as root in containers). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/driver.h"
#include "bench/loco/loco.h"

int loco_mpi(int nodes, const char *mode, long ops, long accounts, double *us_per_op, double *mops, char *why,
             size_t cap)
{
    char prog[PATH_MAX];
    if (!dsm_bench_sibling("dsm-mpi-loco", prog, sizeof prog)) {
        snprintf(why, cap, "cannot read /proc/self/exe");
        return -1;
    }
    if (access(prog, X_OK) != 0) {
        snprintf(why, cap, "%s missing (built when CMake finds MPI: libopenmpi-dev)", prog);
        return -1;
    }
    char cmd[PATH_MAX + 512], extra[32] = "";
    if (accounts > 0)
        snprintf(extra, sizeof extra, " %ld", accounts);
    snprintf(cmd, sizeof cmd,
             "mpirun --allow-run-as-root --oversubscribe -np %d --mca btl self,vader --mca osc sm --mca mpi_yield_when_idle 1 "
             "'%s' %s %ld%s 2>&1",
             nodes, prog, mode, ops, extra);
    FILE *p = popen(cmd, "r");
    if (!p) {
        snprintf(why, cap, "popen mpirun failed");
        return -1;
    }
    char line[512], last[512] = "";
    int got = 0;
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "us_per_op=%lf mops=%lf", us_per_op, mops) == 2)
            got = 1;
        else if (line[0] != '\n')
            snprintf(last, sizeof last, "%s", line);
    }
    int rc = pclose(p);
    if (!got || rc != 0) {
        last[strcspn(last, "\n")] = 0;
        snprintf(why, cap, "mpirun %s exited %d: %s", mode, rc, last);
        return -1;
    }
    return 0;
}
