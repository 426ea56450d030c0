/* Machine-limit microbenchmarks for `python -m bench` (compiled at bench time with cc -O3 -march=native).
 *
 *   limits fma   THREADS SECONDS   f32 FMA peak: independent vector FMA chains, GFLOP/s over all threads
 *   limits bf16  THREADS SECONDS   bf16 dot-product peak (AVX512-BF16 vdpbf16ps), GFLOP/s; 0 if unsupported
 *   limits triad THREADS N REPS    STREAM triad a[i] = b[i] + s*c[i] on N f32 per array, GB/s (3*N*4 bytes)
 *   limits read  THREADS N REPS    read-only bandwidth: sum of N f32, GB/s (N*4 bytes)
 *
 * Each prints one line "<value> <variant>".  Threads are pthreads; the time of a repetition is the wall time
 * between two barriers, and the median repetition is reported: the ops are timed as medians of their rounds,
 * and on this shared VM single repetitions of a 64 MiB pass move by up to 2x (a best-of figure is a spike).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#if defined(__AVX512F__) || defined(__AVX2__) || defined(__FMA__)
#include <immintrin.h>
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static pthread_barrier_t bar;
static int nthreads = 1;
static volatile float sink_f;

/* ------------------------------------------------------------------------------------------ FMA */
#if defined(__AVX512F__)
#define VW 16
#define VARIANT "avx512"
typedef __m512 vf;
#define VSET1(x) _mm512_set1_ps(x)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUM(a) _mm512_reduce_add_ps(a)
#elif defined(__AVX2__) && defined(__FMA__)
#define VW 8
#define VARIANT "avx2"
typedef __m256 vf;
#define VSET1(x) _mm256_set1_ps(x)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
static float VSUM(__m256 a) { float t[8]; _mm256_storeu_ps(t, a); float s = 0; for (int i = 0; i < 8; i++) s += t[i]; return s; }
#else
#define VW 1
#define VARIANT "scalar"
typedef float vf;
#define VSET1(x) (x)
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VADD(a, b) ((a) + (b))
#define VSUM(a) (a)
#endif

#define NACC 16
#define FMA_REPS 9 /* median of FMA_REPS short repetitions: the machine may be shared */
static long fma_iters = 1;

static float fma_kernel(long iters) {
    vf acc[NACC];
    for (int j = 0; j < NACC; j++) acc[j] = VSET1(0.001f * j);
    vf m = VSET1(0.999999f), c = VSET1(1e-7f);
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int j = 0; j < NACC; j++) acc[j] = VFMA(acc[j], m, c);
    }
    vf s = acc[0];
    for (int j = 1; j < NACC; j++) s = VADD(s, acc[j]);
    return VSUM(s);
}

#if defined(__AVX512BF16__)
static float bf16_kernel(long iters) {
    __m512 acc[NACC];
    for (int j = 0; j < NACC; j++) acc[j] = _mm512_set1_ps(0.001f * j);
    __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
    __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int j = 0; j < NACC; j++) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
    }
    __m512 s = acc[0];
    for (int j = 1; j < NACC; j++) s = _mm512_add_ps(s, acc[j]);
    return _mm512_reduce_add_ps(s);
}
#endif

static int mode_bf16 = 0;
/* the repetition times of the current run (thread 0 records them) */
static double *rep_dt;
static long rep_cnt;

static void rep_start(long reps) {
    rep_dt = realloc(rep_dt, (size_t)(reps > 0 ? reps : 1) * sizeof(double));
    if (!rep_dt) { fprintf(stderr, "out of memory\n"); exit(1); }
    rep_cnt = 0;
}

static void rep_record(double dt) { rep_dt[rep_cnt++] = dt; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median of the recorded repetition times */
static double rep_median(void) {
    qsort(rep_dt, (size_t)rep_cnt, sizeof(double), cmp_double);
    return rep_cnt % 2 ? rep_dt[rep_cnt / 2] : 0.5 * (rep_dt[rep_cnt / 2 - 1] + rep_dt[rep_cnt / 2]);
}

static void *compute_thread(void *arg) {
    long tid = (long)arg;
    for (int rep = 0; rep < FMA_REPS; rep++) {
        double t0 = 0;
        pthread_barrier_wait(&bar);
        if (tid == 0) t0 = now();
        float r;
#if defined(__AVX512BF16__)
        r = mode_bf16 ? bf16_kernel(fma_iters) : fma_kernel(fma_iters);
#else
        r = fma_kernel(fma_iters);
#endif
        sink_f = r;
        pthread_barrier_wait(&bar);
        if (tid == 0) {
            double dt = now() - t0;
            rep_record(dt);
        }
    }
    return NULL;
}

static void run_threads(void *(*fn)(void *)) {
    pthread_t th[256];
    pthread_barrier_init(&bar, NULL, nthreads);
    for (long t = 1; t < nthreads; t++) pthread_create(&th[t], NULL, fn, (void *)t);
    fn((void *)0);
    for (long t = 1; t < nthreads; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&bar);
}

/* flops per inner iteration: NACC vector FMAs of VW lanes, 2 flops each (bf16 dot: 2*VW pairs, 2 flops each) */
static double compute_peak(double seconds, int bf16) {
    mode_bf16 = bf16;
    double per_iter = bf16 ? (double)NACC * 2 * 16 * 2 : (double)NACC * VW * 2;
    /* calibrate on one thread */
    long it = 1 << 16;
    for (;;) {
        double t0 = now();
        sink_f = bf16 ?
#if defined(__AVX512BF16__)
            bf16_kernel(it)
#else
            0
#endif
            : fma_kernel(it);
        double dt = now() - t0;
        if (dt > 0.02 || it > (1L << 40)) { it = (long)(it * (seconds / FMA_REPS) / (dt > 0 ? dt : 1e-9)); break; }
        it *= 4;
    }
    if (it < 1) it = 1;
    fma_iters = it;
    rep_start(FMA_REPS);
    run_threads(compute_thread);
    return per_iter * (double)fma_iters * nthreads / rep_median() / 1e9;
}

/* ---------------------------------------------------------------------------------------- triad */
static float *A, *B, *C;
static long triad_n = 0, triad_reps = 1;

static void *triad_thread(void *arg) {
    long tid = (long)arg;
    long lo = triad_n * tid / nthreads, hi = triad_n * (tid + 1) / nthreads;
    for (long i = lo; i < hi; i++) { A[i] = 0; B[i] = 1.0f; C[i] = 2.0f; } /* first touch by the owner */
    const float s = 3.0f;
    for (long rep = 0; rep < triad_reps + 1; rep++) { /* first repetition is a warmup */
        double t0 = 0;
        pthread_barrier_wait(&bar);
        if (tid == 0) t0 = now();
        float *restrict a = A, *restrict b = B, *restrict c = C;
        for (long i = lo; i < hi; i++) a[i] = b[i] + s * c[i];
        pthread_barrier_wait(&bar);
        if (tid == 0 && rep > 0) {
            double dt = now() - t0;
            rep_record(dt);
        }
    }
    return NULL;
}

typedef float v16f __attribute__((vector_size(64)));
static volatile float read_sink;

static void *read_thread(void *arg) {
    long tid = (long)arg;
    long lo = triad_n * tid / nthreads, hi = triad_n * (tid + 1) / nthreads;
    lo = (lo + 127) & ~127L;                                 /* 128-element (512 B) chunks */
    hi = tid == nthreads - 1 ? (triad_n & ~127L) : ((hi + 127) & ~127L);
    for (long i = lo; i < hi; i++) B[i] = 1.0f;
    for (long rep = 0; rep < triad_reps + 1; rep++) {
        double t0 = 0;
        pthread_barrier_wait(&bar);
        if (tid == 0) t0 = now();
        v16f s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0};
        for (long i = lo; i < hi; i += 128) {
            s0 += *(const v16f *)(B + i);
            s1 += *(const v16f *)(B + i + 16);
            s2 += *(const v16f *)(B + i + 32);
            s3 += *(const v16f *)(B + i + 48);
            s4 += *(const v16f *)(B + i + 64);
            s5 += *(const v16f *)(B + i + 80);
            s6 += *(const v16f *)(B + i + 96);
            s7 += *(const v16f *)(B + i + 112);
        }
        v16f s = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
        read_sink = s[0] + s[15];
        pthread_barrier_wait(&bar);
        if (tid == 0 && rep > 0) {
            double dt = now() - t0;
            rep_record(dt);
        }
    }
    return NULL;
}

/* Buffers as the device arena allocates them: 2 MiB-aligned and advised as transparent huge pages when
 * at least 2 MiB (alloc.c), so that the limits and the ops stream through the same kind of pages. */
static float *big_alloc(size_t bytes) {
    size_t huge = (size_t)2 << 20;
    void *p = NULL;
    bytes = (bytes + 63) / 64 * 64;
    if (posix_memalign(&p, bytes >= huge ? huge : 64, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= huge) (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

static double readbw(long n, long reps) {
    n &= ~127L;
    triad_n = n;
    triad_reps = reps;
    B = big_alloc((size_t)n * sizeof(float));
    if (!B) { fprintf(stderr, "out of memory\n"); exit(1); }
    rep_start(reps);
    run_threads(read_thread);
    free(B);
    return (double)n * sizeof(float) / rep_median() / 1e9;
}

static double triad(long n, long reps) {
    triad_n = n;
    triad_reps = reps;
    size_t bytes = (size_t)n * sizeof(float);
    A = big_alloc(bytes);
    B = big_alloc(bytes);
    C = big_alloc(bytes);
    if (!A || !B || !C) { fprintf(stderr, "out of memory\n"); exit(1); }
    rep_start(reps);
    run_threads(triad_thread);
    sink_f = A[n / 2];
    free(A); free(B); free(C);
    return 3.0 * (double)bytes / rep_median() / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: limits fma|bf16|triad THREADS ...\n"); return 2; }
    nthreads = atoi(argv[2]);
    if (nthreads < 1) nthreads = 1;
    if (nthreads > 256) nthreads = 256;
    if (!strcmp(argv[1], "fma")) {
        double sec = argc > 3 ? atof(argv[3]) : 0.3;
        printf("%.3f %s\n", compute_peak(sec, 0), VARIANT);
    } else if (!strcmp(argv[1], "bf16")) {
#if defined(__AVX512BF16__)
        double sec = argc > 3 ? atof(argv[3]) : 0.3;
        printf("%.3f avx512bf16\n", compute_peak(sec, 1));
#else
        printf("0 unsupported\n");
#endif
    } else if (!strcmp(argv[1], "triad")) {
        long n = argc > 3 ? atol(argv[3]) : (16L << 20);
        long reps = argc > 4 ? atol(argv[4]) : 10;
        printf("%.3f triad\n", triad(n, reps));
    } else if (!strcmp(argv[1], "read")) {
        long n = argc > 3 ? atol(argv[3]) : (16L << 20);
        long reps = argc > 4 ? atol(argv[4]) : 10;
        printf("%.3f read\n", readbw(n, reps));
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    return 0;
}
