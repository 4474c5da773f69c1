/* Open MPI all-reduce baseline for `hetring bench allreduce`.
 *
 * MPI_Allreduce in place (MPI_IN_PLACE), float32, MPI_SUM, measured the way the hetring bench
 * measures its ring: the buffer is filled with rank-dependent small integers ((i mod 251) +
 * rank), all-reduced once and checked for the exact sum (#wrong counts the elements that differ,
 * over all ranks); then --warmup untimed and --iters timed all-reduces (at least 200 below
 * 1 MiB, as hetring does) after a barrier (the buffer is zeroed every 16 iterations so that the
 * values stay finite, as hetring does). time is the slowest rank's mean per all-reduce
 * (MPI_Reduce with MPI_MAX of the per-rank means), algbw = bytes / time,
 * busbw = algbw * 2(N-1)/N, GB = 1e9 bytes. Rank 0 prints the nccl-tests table, one line per
 * size.
 *
 * Build: bench/mpi/build.sh (mpicc -std=c11 -O2 -Wall -Wextra).
 * Run, TCP over loopback only:
 *   mpirun --allow-run-as-root --oversubscribe -np 4 --bind-to none --mca pml ob1 \
 *          --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
 *          --mca mpi_yield_when_idle 1 bench/mpi/mpi_allreduce --bytes 64M
 * (mpi_yield_when_idle 1: idle ranks call sched_yield() while they poll. Open MPI turns it on
 * by itself only when it sees more ranks than cores; on a 2-core machine shared with other
 * work, 2 spinning ranks otherwise lose whole scheduler time slices, ~4 ms per wait.)
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out, "usage: mpirun ... mpi_allreduce [--bytes B] [--min-bytes A] [--max-bytes B]\n"
                 "                               [--iters K] [--warmup W] [--json FILE]\n"
                 "\n"
                 "In-place MPI_Allreduce (float32, sum) bandwidth in the nccl-tests table format.\n"
                 "\n"
                 "  --bytes B       one size: same as --min-bytes B --max-bytes B\n"
                 "  --min-bytes A   smallest size (default 64M)\n"
                 "  --max-bytes B   largest size (default 64M); sizes double; K, M, G suffixes\n"
                 "  --iters K       timed iterations per size (default 20; at least 200 below\n"
                 "                  1 MiB, as in hetring bench allreduce)\n"
                 "  --warmup W      untimed iterations per size (default 3)\n"
                 "  --json FILE     also write one JSON object per size ('-': stdout)\n"
                 "\n"
                 "time = slowest rank's mean per all-reduce; busbw = algbw * 2(N-1)/N.\n"
                 "Exit status 1 when any element is wrong, 2 on bad arguments.\n");
}

/* "64M" -> 67108864; K, M, G are powers of 1024. Returns -1 when malformed. */
static long long parse_bytes(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    switch (*end) {
    case 'k':
    case 'K':
        v *= 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        v *= 1024.0 * 1024.0;
        end++;
        break;
    case 'g':
    case 'G':
        v *= 1024.0 * 1024.0 * 1024.0;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'B' || *end == 'b') end++;
    return *end ? -1 : (long long)v;
}

static long parse_long(const char *s) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return errno || end == s || *end || v < 0 ? -1 : v;
}

/* The command line. */
typedef struct {
    long long min_bytes; /* first size */
    long long max_bytes; /* last size (sizes double) */
    long iters;          /* timed iterations per size (at least 200 below 1 MiB) */
    long warmup;         /* untimed iterations per size */
    const char *json;    /* --json FILE ('-': stdout) or NULL */
} mpi_opts;

/* Parse argv into `o`. Returns 0, 1 after --help, -1 on bad arguments. */
static int parse_args(mpi_opts *o, int argc, char **argv) {
    *o = (mpi_opts){.min_bytes = 64LL << 20, .max_bytes = 64LL << 20, .iters = 20, .warmup = 3};
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (v && !strcmp(a, "--bytes"))
            o->min_bytes = o->max_bytes = parse_bytes(v), i++;
        else if (v && !strcmp(a, "--min-bytes"))
            o->min_bytes = parse_bytes(v), i++;
        else if (v && !strcmp(a, "--max-bytes"))
            o->max_bytes = parse_bytes(v), i++;
        else if (v && !strcmp(a, "--iters"))
            o->iters = parse_long(v), i++;
        else if (v && !strcmp(a, "--warmup"))
            o->warmup = parse_long(v), i++;
        else if (v && !strcmp(a, "--json"))
            o->json = v, i++;
        else
            bad = 1;
    }
    return bad || o->min_bytes < 1 || o->max_bytes < o->min_bytes || o->iters < 1 || o->warmup < 0
               ? -1
               : 0;
}

/* Rank 0: the run and the nccl-tests column names. */
static void print_header(const mpi_opts *o, int n) {
    int vlen;
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(ver, &vlen);
    char *nl = strchr(ver, ',');
    if (nl) *nl = 0;
    printf("# mpi_allreduce: %d ranks, MPI_Allreduce in place, %ld iterations (at least 200 "
           "below 1 MiB), %ld warm-up (%s)\n",
           n, o->iters, o->warmup, ver);
    printf("#\n# %10s %12s %8s %6s %11s %8s %8s %7s\n", "size", "count", "type", "redop", "time",
           "algbw", "busbw", "#wrong");
    printf("# %10s %12s %8s %6s %11s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
}

/* One size: the checked all-reduce, the warm-up, the timed iterations. On rank 0, *t_us is the
 * slowest rank's mean time per all-reduce and *wrong_all the wrong elements of all ranks. */
static void measure_size(const mpi_opts *o, float *buf, size_t count, long n_iters, double *t_us,
                         double *wrong_all) {
    int n, k;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &k);
    int icount = (int)count; /* MPI counts are int: 64 MiB is 16M floats */
    for (size_t i = 0; i < count; i++) buf[i] = (float)((i % 251) + (size_t)k);
    MPI_Allreduce(MPI_IN_PLACE, buf, icount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double wrong = 0;
    for (size_t i = 0; i < count; i++)
        if (buf[i] != (float)(n * (int)(i % 251) + n * (n - 1) / 2)) wrong++;
    MPI_Reduce(&wrong, wrong_all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);

    for (long w = 0; w < o->warmup; w++)
        MPI_Allreduce(MPI_IN_PLACE, buf, icount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long it = 0; it < n_iters; it++) {
        if (it % 16 == 0) memset(buf, 0, count * sizeof(float)); /* keep the values finite */
        MPI_Allreduce(MPI_IN_PLACE, buf, icount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double mean_us = (MPI_Wtime() - t0) / (double)n_iters * 1e6;
    MPI_Reduce(&mean_us, t_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
}

/* Rank 0: one row of the table and, with --json, one object. */
static void report_size(const mpi_opts *o, int n, size_t count, long n_iters, double t,
                        double wrong_all, FILE *js) {
    size_t bytes = count * sizeof(float);
    double algbw = (double)bytes / (t * 1e-6) / 1e9;
    double busbw = algbw * 2.0 * (n - 1) / n;
    printf("  %10zu %12zu %8s %6s %11.1f %8.3f %8.3f %7.0f\n", bytes, count, "float", "sum", t,
           algbw, busbw, wrong_all);
    fflush(stdout);
    if (js)
        fprintf(js,
                "{\"impl\": \"openmpi\", \"bytes\": %zu, \"time_us\": %.3f, "
                "\"algbw\": %.6f, \"busbw\": %.6f, \"wrong\": %.0f, \"nodes\": %d, "
                "\"iters\": %ld, \"warmup\": %ld}\n",
                bytes, t, algbw, busbw, wrong_all, n, n_iters, o->warmup);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int n, k;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &k);
    mpi_opts o;
    int pa = parse_args(&o, argc, argv);
    if (pa != 0) {
        if (k == 0) usage(pa > 0 ? stdout : stderr);
        MPI_Finalize();
        return pa > 0 ? 0 : 2;
    }

    size_t maxc = (size_t)o.max_bytes / sizeof(float);
    float *buf = malloc((maxc ? maxc : 1) * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "mpi_allreduce: rank %d: out of memory\n", k);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    FILE *js = NULL;
    if (k == 0 && o.json) {
        js = strcmp(o.json, "-") ? fopen(o.json, "w") : stdout;
        if (!js) fprintf(stderr, "mpi_allreduce: cannot write %s: %s\n", o.json, strerror(errno));
    }
    if (k == 0) print_header(&o, n);

    int rc = 0;
    for (long long b = o.min_bytes; b <= o.max_bytes; b *= 2) {
        size_t count = (size_t)b / sizeof(float);
        if (count == 0) count = 1;
        size_t bytes = count * sizeof(float);
        long n_iters = bytes < (1u << 20) && o.iters < 200 ? 200 : o.iters; /* as hetring */
        double t = 0, wrong_all = 0;
        measure_size(&o, buf, count, n_iters, &t, &wrong_all);
        if (k == 0) {
            if (wrong_all > 0) rc = 1;
            report_size(&o, n, count, n_iters, t, wrong_all, js);
        }
        if (b > o.max_bytes / 2) break; /* no overflow of b *= 2 */
    }
    if (js && js != stdout) fclose(js);
    free(buf);
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
}
