/*
 * rdmaprov CPU allreduce probe: the all_reduce gate where nodes have no GPU (the SoftRoCE lab,
 * CPU clusters). Same size sweep as nccl-tests (-b/-e/-f 2), float sum, warmup then timed
 * iterations, every element checked. Prints one JSON object per size on rank 0; rdmaprov turns
 * the times into algbw/busbw with the same formula it uses for nccl-tests.
 *
 * usage: allreduce_probe MIN_BYTES MAX_BYTES [ITERS] [WARMUP]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: %s MIN_BYTES MAX_BYTES [ITERS] [WARMUP]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    long long min_bytes = atoll(argv[1]), max_bytes = atoll(argv[2]);
    int iters = argc > 3 ? atoi(argv[3]) : 5, warmup = argc > 4 ? atoi(argv[4]) : 1;
    if (min_bytes < (long long)sizeof(float)) min_bytes = sizeof(float);
    size_t max_count = (size_t)(max_bytes / sizeof(float));
    float *send = malloc(max_count * sizeof(float)), *recv = malloc(max_count * sizeof(float));
    if (!send || !recv) {
        fprintf(stderr, "rank %d: cannot allocate %lld bytes\n", rank, max_bytes);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    /* Each rank contributes rank+1 (small integers: the float sum is exact). */
    const float expected = (float)ranks * (ranks + 1) / 2.0f;
    for (long long bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
        size_t count = (size_t)(bytes / sizeof(float));
        for (size_t i = 0; i < count; i++) send[i] = (float)(rank + 1);
        for (int i = 0; i < warmup; i++) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (int i = 0; i < iters; i++) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double elapsed = (MPI_Wtime() - start) / iters, slowest;
        MPI_Reduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        long long wrong = 0, total;
        for (size_t i = 0; i < count; i++) wrong += recv[i] != expected;
        MPI_Reduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("{\"probe\": \"allreduce\", \"size\": %lld, \"count\": %zu, \"type\": \"float\", \"redop\": \"sum\", "
                   "\"ranks\": %d, \"time_us\": %.3f, \"wrong\": %lld}\n", (long long)(count * sizeof(float)), count, ranks, slowest * 1e6, total);
            fflush(stdout);
        }
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
