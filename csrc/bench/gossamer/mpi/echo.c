/* dsm-mpi-echo: the Open MPI anchor of dsm-bench-gossamer's echo (built only
 * when CMake finds MPI). Two ranks: rank 0 keeps `window` requests of `size`
 * bytes outstanding against rank 1, which sends each one back; the same
 * batching as Gossamer's echo client (a new request as soon as a reply
 * arrives, the window's slot reused). Prints one line on rank 0:
 *   mops=<Mops/s> p999_us=<us>
 * Usage: mpirun -np 2 dsm-mpi-echo REQUESTS WINDOW SIZE */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size_ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size_ranks);
    long n = argc > 1 ? atol(argv[1]) : 0, w = argc > 2 ? atol(argv[2]) : 0, size = argc > 3 ? atol(argv[3]) : -1;
    if (argc != 4 || size_ranks != 2 || n < 1 || w < 1 || w > 4096 || w > n || size < 0 || size > (1 << 20)) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 %s REQUESTS WINDOW(1..4096) SIZE(0..1MiB)\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    char *buf = calloc((size_t)w, (size_t)size + 1);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        for (long i = 0; i < n; i++) {
            MPI_Status st;
            MPI_Recv(buf, (int)size, MPI_BYTE, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            MPI_Send(buf, (int)size, MPI_BYTE, 0, st.MPI_TAG, MPI_COMM_WORLD);
        }
    } else {
        MPI_Request *rq = malloc((size_t)w * sizeof *rq);
        double *t_issue = malloc((size_t)w * sizeof *t_issue), *lat = malloc((size_t)n * sizeof *lat);
        char *out = calloc(1, (size_t)size + 1);
        if (!rq || !t_issue || !lat || !out) MPI_Abort(MPI_COMM_WORLD, 1);
        memset(out, 0x5a, (size_t)size);
        double t0 = MPI_Wtime();
        long issued = 0, done = 0;
        for (; issued < w; issued++) {
            MPI_Irecv(buf + issued * (size + 1), (int)size, MPI_BYTE, 1, (int)issued, MPI_COMM_WORLD, &rq[issued]);
            t_issue[issued] = MPI_Wtime();
            MPI_Send(out, (int)size, MPI_BYTE, 1, (int)issued, MPI_COMM_WORLD);
        }
        while (done < n) {
            int k;
            MPI_Waitany((int)w, rq, &k, MPI_STATUS_IGNORE);
            lat[done++] = (MPI_Wtime() - t_issue[k]) * 1e6;
            if (issued < n) {
                MPI_Irecv(buf + k * (size + 1), (int)size, MPI_BYTE, 1, k, MPI_COMM_WORLD, &rq[k]);
                t_issue[k] = MPI_Wtime();
                MPI_Send(out, (int)size, MPI_BYTE, 1, k, MPI_COMM_WORLD);
                issued++;
            }
        }
        double secs = MPI_Wtime() - t0;
        qsort(lat, (size_t)n, sizeof *lat, cmp_double);
        long i = (long)((double)n * 0.999);
        printf("mops=%g p999_us=%g\n", (double)n / secs / 1e6, lat[i < n ? i : n - 1]);
        fflush(stdout);
        free(rq);
        free(t_issue);
        free(lat);
        free(out);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
