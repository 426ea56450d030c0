/* Machine-limit microbenchmarks for `python -m bench` (compiled at bench time with cc -O3 -march=native).
 *
 *   limits fma   THREADS SECONDS   f32 FMA peak: independent vector FMA chains, GFLOP/s over all threads
 *   limits fma_cpu THREADS SECONDS the same per CPU-second: each repetition timed by thread 0's CPU clock
 *                                  (CLOCK_THREAD_CPUTIME_ID), the limit to compare GEMMs timed in CPU time
 *                                  against on a loaded machine (the wall figure then measures the others)
 *   limits bf16  THREADS SECONDS   bf16 dot-product peak (AVX512-BF16 vdpbf16ps), GFLOP/s; 0 if unsupported
 *   limits amx_bf16 THREADS SECONDS AMX tile peak: TDPBF16PS into 4 independent 16x16 f32 tiles, GFLOP/s;
 *                                  0 if the CPU, the compiler or the OS (tile permission) lacks it
 *   limits amx_int8 THREADS SECONDS the same with TDPBSSD (int8 -> int32), GOP/s (a multiply-add is 2 ops)
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
#if defined(__AVX512F__) || defined(__AVX2__) || defined(__FMA__) || defined(__AMX_TILE__)
#include <immintrin.h>
#endif
#if defined(__AMX_TILE__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static pthread_barrier_t bar;
static int nthreads = 1;
static volatile float sink_f;
static int use_cputime; /* fma_cpu: repetitions timed by thread 0's CPU clock, kernel only */

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

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

/* ------------------------------------------------------------------------------------------ AMX */
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AMX_INT8__) && defined(__linux__)
#define HAVE_AMX 1
typedef struct { unsigned char palette, start_row, reserved[14]; unsigned short colsb[16]; unsigned char rows[16]; } tilecfg_t;

/* Linux keeps the tile data off until the process asks (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). */
static int amx_permit(void) {
    return __builtin_cpu_supports("amx-tile") && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

static void amx_config(void) {
    static char zero[1024] __attribute__((aligned(64)));
    tilecfg_t c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.rows[i] = 16, c.colsb[i] = 64;
    _tile_loadconfig(&c);
    _tile_loadd(4, zero, 64); _tile_loadd(5, zero, 64); _tile_loadd(6, zero, 64); _tile_loadd(7, zero, 64);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
}

/* 4 tile products per iteration (a 2 x 2 block of accumulators, the GEMM kernel's shape) */
static float amx_kernel(long iters, int int8) {
    static char out[1024] __attribute__((aligned(64)));
    amx_config();
    if (int8)
        for (long i = 0; i < iters; i++) {
            _tile_dpbssd(0, 4, 6); _tile_dpbssd(1, 4, 7); _tile_dpbssd(2, 5, 6); _tile_dpbssd(3, 5, 7);
        }
    else
        for (long i = 0; i < iters; i++) {
            _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
        }
    _tile_stored(0, out, 64);
    _tile_release();
    return out[0];
}
#endif

static int mode_bf16 = 0; /* 0 f32 FMA, 1 vdpbf16ps, 2 AMX bf16, 3 AMX int8 */
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
        if (tid == 0) t0 = use_cputime ? thread_cpu() : now();
        float r;
#if defined(HAVE_AMX)
        if (mode_bf16 >= 2) r = amx_kernel(fma_iters, mode_bf16 == 3);
        else
#endif
#if defined(__AVX512BF16__)
        r = mode_bf16 ? bf16_kernel(fma_iters) : fma_kernel(fma_iters);
#else
        r = fma_kernel(fma_iters);
#endif
        sink_f = r;
        if (tid == 0 && use_cputime) rep_record(thread_cpu() - t0);
        pthread_barrier_wait(&bar);
        if (tid == 0 && !use_cputime) {
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
    /* AMX: 4 tile products of 16 x 16 outputs over 32 bf16 / 64 int8 of k per iteration */
    double per_iter = bf16 == 2 ? 4.0 * 16 * 16 * 32 * 2 : bf16 == 3 ? 4.0 * 16 * 16 * 64 * 2 :
                      bf16 ? (double)NACC * 2 * 16 * 2 : (double)NACC * VW * 2;
    /* calibrate on one thread */
    long it = 1 << 16;
    for (;;) {
        double t0 = now();
#if defined(HAVE_AMX)
        if (bf16 >= 2) sink_f = amx_kernel(it, bf16 == 3);
        else
#endif
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
    if (!strcmp(argv[1], "fma") || !strcmp(argv[1], "fma_cpu")) {
        double sec = argc > 3 ? atof(argv[3]) : 0.3;
        use_cputime = !strcmp(argv[1], "fma_cpu");
        printf("%.3f %s\n", compute_peak(sec, 0), VARIANT);
    } else if (!strcmp(argv[1], "bf16")) {
#if defined(__AVX512BF16__)
        double sec = argc > 3 ? atof(argv[3]) : 0.3;
        printf("%.3f avx512bf16\n", compute_peak(sec, 1));
#else
        printf("0 unsupported\n");
#endif
    } else if (!strcmp(argv[1], "amx_bf16") || !strcmp(argv[1], "amx_int8")) {
        int int8 = !strcmp(argv[1], "amx_int8");
#if defined(HAVE_AMX)
        double sec = argc > 3 ? atof(argv[3]) : 0.3;
        if (amx_permit() && (int8 ? __builtin_cpu_supports("amx-int8") : __builtin_cpu_supports("amx-bf16")))
            printf("%.3f %s\n", compute_peak(sec, int8 ? 3 : 2), int8 ? "tdpbssd" : "tdpbf16ps");
        else
            printf("0 unsupported\n");
#else
        (void)int8;
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
