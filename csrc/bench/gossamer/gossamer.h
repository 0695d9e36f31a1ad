/* dsm-bench-gossamer's shared parts: the in-process clusters its
 * measurements run on (cluster.c) and the SSSP figures (sssp.c). */
#ifndef DSM_BENCH_GOSSAMER_H
#define DSM_BENCH_GOSSAMER_H

#include "harness/cluster.h"
#include "bench/report.h"
#include "dsm/coord.h"
#include "dsm/deleg.h"
#include "dsm/node.h"

enum { GOSSAMER_MAX_NODES = 3 };
_Static_assert((int)GOSSAMER_MAX_NODES <= (int)DSM_HARNESS_MAX_NODES, "a gossamer cluster is a harness cluster");

/* A coordinator and n nodes in this process; with `deleg`, each node has a
 * delegation runtime of one thread (2 cores: one thread per node) attached.
 * busy_mask: the nodes whose fabric progress thread polls (bit i: node i);
 * the others block on the worker's events. */
typedef struct gossamer_cluster {
    dsm_transport_t tr;
    int deleg;
    dsm_harness_t k;
    dsm_deleg_rt_t *rt[GOSSAMER_MAX_NODES];
} gossamer_cluster_t;

void gossamer_cluster_start(gossamer_cluster_t *c, dsm_transport_t tr, unsigned n, unsigned busy_mask, int deleg);
/* The progress mode of the nodes of a `deleg` cluster outside busy_mask
 * (--node-progress; default blocking). */
extern dsm_progress_mode_t gossamer_node_progress;
/* Destroys the runtimes (trusts dropped by the caller), nodes, coordinator. */
void gossamer_cluster_stop(gossamer_cluster_t *c);

/* Prints what failed and exits 1. */
void gossamer_die(const char *what, dsm_status_t st) __attribute__((noreturn));
/* A figure of medians over n repetitions, each recorded beside it (the
 * JSON's reps and anchor_reps), printed with its spread. */
void gossamer_emit(dsm_report_t *rep, const char *name, const double *ours, const double *anchor, int n,
                   const char *unit, const char *label, int higher);
/* The anchor label `anchor`, into buf; over tcp it adds that Gossamer's
 * slot write there is an active message applied by the target's handler
 * (an emulated put), not RDMA. Returns buf. */
const char *gossamer_label(char *buf, size_t cap, const char *anchor, dsm_transport_t tr);

/* The SSSP figures on transport tr: sssp_vs_naive_rpc/<tr> and
 * sssp_vs_single/<tr>, medians of reps interleaved runs on a Kronecker
 * graph of 2^scale vertices, edge factor 16. */
void gossamer_sssp(dsm_report_t *rep, dsm_transport_t tr, unsigned scale, int reps);

/* The Open MPI echo (mpi_anchor.c): n requests of size bytes, window
 * outstanding, between two MPI ranks over tcp loopback; -1 if dsm-mpi-echo
 * or mpirun is missing or failed. */
int gossamer_mpi_echo(size_t n, size_t window, size_t size, double *mops, double *p999_us);

#endif
