/* dsm-mpi-loco: the Open MPI anchors of dsm-bench-loco (built only when
 * CMake finds MPI), each the MPI way of doing what a LOCO object does, on
 * every rank at once:
 *   barrier OPS          MPI_Barrier, OPS times;
 *   lock OPS             one word on rank 0 behind MPI_Win_lock(EXCLUSIVE):
 *                        lock, get, flush, put +1, unlock; the word must end
 *                        at OPS x ranks;
 *   txn OPS ACCOUNTS     ACCOUNTS accounts striped over the ranks' windows
 *                        (account a on rank a % P), a transfer locks the
 *                        ranks of two random accounts exclusively (in rank
 *                        order), gets both, puts both, unlocks; the total
 *                        must be conserved.
 * Prints one line on rank 0: us_per_op=<us> mops=<aggregate Mops/s>, or
 * "error: ..." and exits 1 when a check fails.
 * Usage: mpirun -np P dsm-mpi-loco MODE OPS [ACCOUNTS] */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { START_BALANCE = 1000 };

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int lock_run(long ops, int rank, int nranks, double *secs)
{
    int64_t *base;
    MPI_Win win;
    MPI_Win_allocate(rank == 0 ? 8 : 0, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    if (rank == 0) *base = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < ops; i++) {
        int64_t v;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Get(&v, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win);
        MPI_Win_flush(0, win);
        v++;
        MPI_Put(&v, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win);
        MPI_Win_unlock(0, win);
    }
    double t = MPI_Wtime() - t0, tmax;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    int ok = 1;
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        ok = *base == (int64_t)ops * nranks;
        if (!ok) printf("error: lock: the word is %lld, want %lld\n", (long long)*base, (long long)ops * nranks);
        MPI_Win_unlock(0, win);
        *secs = tmax;
    }
    MPI_Win_free(&win);
    return ok;
}

static int txn_run(long ops, long accounts, int rank, int nranks, double *secs)
{
    long mine = (accounts - rank + nranks - 1) / nranks;
    int64_t *base;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)(mine * 8), 8, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
    for (long i = 0; i < mine; i++) base[i] = START_BALANCE;
    MPI_Win_unlock(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
    double t0 = MPI_Wtime();
    for (long i = 0; i < ops; i++) {
        long a = (long)(next(&s) % (uint64_t)accounts), b = (long)(next(&s) % (uint64_t)(accounts - 1));
        if (b >= a) b++;
        int ra = (int)(a % nranks), rb = (int)(b % nranks);
        MPI_Aint da = a / nranks, db = b / nranks;
        int lo = ra < rb ? ra : rb, hi = ra < rb ? rb : ra;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, lo, 0, win);
        if (hi != lo) MPI_Win_lock(MPI_LOCK_EXCLUSIVE, hi, 0, win);
        int64_t va, vb;
        MPI_Get(&va, 1, MPI_INT64_T, ra, da, 1, MPI_INT64_T, win);
        MPI_Get(&vb, 1, MPI_INT64_T, rb, db, 1, MPI_INT64_T, win);
        MPI_Win_flush(ra, win);
        if (rb != ra) MPI_Win_flush(rb, win);
        int64_t x = (int64_t)(next(&s) % 10) + 1;
        va -= x;
        vb += x;
        MPI_Put(&va, 1, MPI_INT64_T, ra, da, 1, MPI_INT64_T, win);
        MPI_Put(&vb, 1, MPI_INT64_T, rb, db, 1, MPI_INT64_T, win);
        if (hi != lo) MPI_Win_unlock(hi, win);
        MPI_Win_unlock(lo, win);
    }
    double t = MPI_Wtime() - t0, tmax;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
    long long sum = 0, total = 0;
    for (long i = 0; i < mine; i++) sum += base[i];
    MPI_Win_unlock(rank, win);
    MPI_Reduce(&sum, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    int ok = 1;
    if (rank == 0) {
        ok = total == (long long)accounts * START_BALANCE;
        if (!ok) printf("error: txn: the total is %lld, want %lld\n", total, (long long)accounts * START_BALANCE);
        *secs = tmax;
    }
    MPI_Win_free(&win);
    return ok;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const char *mode = argc > 1 ? argv[1] : "";
    long ops = argc > 2 ? atol(argv[2]) : 0, accounts = argc > 3 ? atol(argv[3]) : 0;
    int txn = strcmp(mode, "txn") == 0;
    if (ops < 1 || (txn && (argc != 4 || accounts < 2 || accounts < nranks)) ||
        (!txn && (argc != 3 || (strcmp(mode, "barrier") != 0 && strcmp(mode, "lock") != 0)))) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -np P %s barrier|lock OPS | txn OPS ACCOUNTS\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    double secs = 0;
    int ok = 1;
    long total_ops = ops;
    if (strcmp(mode, "barrier") == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < ops; i++) MPI_Barrier(MPI_COMM_WORLD);
        secs = MPI_Wtime() - t0;
    } else {
        ok = txn ? txn_run(ops, accounts, rank, nranks, &secs) : lock_run(ops, rank, nranks, &secs);
        total_ops = ops * nranks;
    }
    if (rank == 0 && ok) printf("us_per_op=%g mops=%g\n", secs * 1e6 / (double)total_ops, (double)total_ops / secs / 1e6);
    fflush(stdout);
    MPI_Finalize();
    return ok ? 0 : 1;
}
