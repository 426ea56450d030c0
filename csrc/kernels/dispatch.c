/* dispatch.c - the kernel-dispatch point: the CPU's features (cpuid, XCR0, the AMX tile permission), the
 * level NEURON_KERNELS forces, and the per-family kernel context built from them (nk_dispatch.h,
 * nk_dispatch_impl.h).  The rest of the library asks nk_kernels() and never tests features inline.
 *
 * One context per level, built once: the reference tables, then the portable level (the optimized
 * portable C), then each ISA the CPU has up to the level, overriding the families it has kernels for
 * (BLIS's bli_cntx_init_<arch>).  nk_force_reference switches between the reference context and the
 * chosen one at any time; NEURON_KERNELS is read once. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define NK_X86 1
#endif

#include "nk_dispatch_impl.h"
#include "nk_impl.h"

/* ---- reference switch: 0 = not decided yet, 1 = optimized, 2 = reference ---------------------- */
static atomic_int reference_mode;

void nk_force_reference(bool on)
{
	atomic_store(&reference_mode, on ? 2 : 1);
}

bool nk_using_reference(void)
{
	int m = atomic_load(&reference_mode);
	if (m == 0) {
		const char *e = getenv("NEURON_KERNELS");
		m = (e && strcmp(e, "ref") == 0) ? 2 : 1;
		int expect = 0;
		atomic_compare_exchange_strong(&reference_mode, &expect, m);
		m = atomic_load(&reference_mode);
	}
	return m == 2;
}

/* ---- the CPU ------------------------------------------------------------------------------------ */
static nk_cpu_t cpu;

#ifdef NK_X86
static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

/* Linux keeps AMX tile data off until a process asks (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). */
static bool amx_request_permission(void)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
	return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
	return false;
#endif
}

/* Cache sizes from cpuid's deterministic cache parameters: leaf 4 (Intel), 0x8000001D (AMD, with the
 * topology extensions); each subleaf one cache: type (1 data, 2 instruction, 3 unified), level, and
 * ways x partitions x line size x sets. */
static void cache_detect(nk_cpu_t *c, unsigned max)
{
	unsigned leaf = 4, a, b, cx, d;

	if (strcmp(c->vendor, "AuthenticAMD") == 0) {
		if (__get_cpuid_max(0x80000000, NULL) < 0x8000001d || !__get_cpuid(0x80000001, &a, &b, &cx, &d) ||
		    !(cx & (1u << 22)))
			return;
		leaf = 0x8000001d;
	} else if (max < 4) {
		return;
	}
	for (unsigned i = 0; i < 16; i++) {
		__cpuid_count(leaf, i, a, b, cx, d);
		unsigned type = a & 0x1f, level = (a >> 5) & 7;
		size_t bytes = (size_t)(((b >> 22) & 0x3ff) + 1) * (((b >> 12) & 0x3ff) + 1) * ((b & 0xfff) + 1) * (cx + 1);

		if (type == 0)
			break;
		if (type == 2)
			continue;
		if (level == 1)
			c->l1d_bytes = bytes;
		else if (level == 2)
			c->l2_bytes = bytes;
		else if (level == 3)
			c->l3_bytes = bytes;
	}
}

static void cpu_detect(nk_cpu_t *c)
{
	unsigned a = 0, b = 0, cx = 0, d = 0, max = 0;
	uint64_t xcr0 = 0;
	bool osxsave;

	if (!__get_cpuid(0, &max, &b, &cx, &d))
		return;
	memcpy(c->vendor, &b, 4), memcpy(c->vendor + 4, &d, 4), memcpy(c->vendor + 8, &cx, 4);
	c->vendor[12] = 0;
	if (!__get_cpuid(1, &a, &b, &cx, &d))
		return;
	c->family = (a >> 8) & 0xf;
	c->model = (a >> 4) & 0xf;
	if (c->family == 0xf)
		c->family += (a >> 20) & 0xff;
	if (c->family >= 6)
		c->model |= ((a >> 16) & 0xf) << 4;
	cache_detect(c, max);
	osxsave = cx & (1u << 27);
	c->fma = cx & (1u << 12);
	if (osxsave)
		xcr0 = xgetbv0();
	bool ymm = (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0, tiles = (xcr0 & 0x60000) == 0x60000;
	if (max < 7)
		return;
	__get_cpuid_count(7, 0, &a, &b, &cx, &d);
	unsigned sub = a;
	c->avx2 = ymm && (b & (1u << 5));
	c->fma = c->fma && ymm;
	c->avx512 = zmm && (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));
	c->avx512_fp16 = c->avx512 && (d & (1u << 23));
	c->amx_bf16 = tiles && (d & (1u << 22));
	c->amx_tile = tiles && (d & (1u << 24));
	c->amx_int8 = tiles && (d & (1u << 25));
	if (sub >= 1) {
		__get_cpuid_count(7, 1, &a, &b, &cx, &d);
		c->avx512_bf16 = c->avx512 && (a & (1u << 5));
	}
	if (c->amx_tile)
		c->amx_permitted = amx_request_permission();
}
#else
static void cpu_detect(nk_cpu_t *c)
{
	(void)c;
}
#endif

/* The best level this CPU runs. */
static int cpu_level(const nk_cpu_t *c)
{
	if (c->amx_tile && c->amx_permitted && c->avx512)
		return NK_ISA_AMX;
	if (c->avx512)
		return NK_ISA_AVX512;
	if (c->avx2 && c->fma)
		return NK_ISA_AVX2;
	return NK_ISA_PORTABLE;
}

/* NEURON_KERNELS as a level (-1: unset or not a level name). */
static int env_level(void)
{
	static const char *const names[NK_NISA] = { "ref", "portable", "avx2", "avx512", "amx" };
	const char *e = getenv("NEURON_KERNELS");

	for (int i = 0; e && i < NK_NISA; i++)
		if (strcmp(e, names[i]) == 0)
			return i;
	return -1;
}

/* ---- the contexts --------------------------------------------------------------------------------- */
static nk_kernels_t ctx_ref, ctx_opt;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void ctx_init_ref(nk_kernels_t *k)
{
	memset(k, 0, sizeof *k);
	k->level = NK_ISA_REF;
	k->gemm_table = nk_gemm_isa_ref;
	k->softmax = &nk_rowops_ref;
	k->layernorm = &nk_lnops_ref;
	k->attention = &nk_attops_ref;
}

/* The optimized portable C: every family's run path with the reference tables. */
static void ctx_init_portable(nk_kernels_t *k)
{
	ctx_init_ref(k);
	k->level = NK_ISA_PORTABLE;
	for (int f = 0; f < NK_NFAM; f++)
		k->isa[f] = NK_ISA_PORTABLE;
}

/* The f32 GEMM blocking for Intel cores with two full 512-bit FMA ports, a 48 KiB L1d and at least 2 MiB of
 * L2 (Sapphire Rapids and later server cores); other CPUs (Zen 4's 32 KiB / 1 MiB) keep the table's
 * KC 512 x NC 2048, whose 4 MiB B block lives in L3.  Intel's L3 is far slower per core than Zen 4's, so
 * the B block is kept in half of L2 instead: kc 256 (the 14 x 256 A panel, 14 KiB, stays in L1 while the
 * 32 KiB B panels stream past it) and nc = L2 / 2 / (kc * 4) columns (1024 for 2 MiB).  Measured on the
 * Intel Xeon (KVM, 2 MiB L2), one thread, GFLOP per CPU-second, load 7-14, the blockings interleaved in one
 * process: 2048^3 163 -> 168, 4096^3 159 -> 160 (kc 384 x nc 1024: 165 / 167, within the noise). */
static void gemm_blocking_intel(nk_gemm_isa_t *g, const nk_cpu_t *c)
{
	if (strcmp(c->vendor, "GenuineIntel") != 0 || c->l1d_bytes < (48u << 10) || c->l2_bytes < (2u << 20))
		return;
	g->kc = 256;
	g->nc = (int)(c->l2_bytes / 2 / (256 * sizeof(float)) / NK_GEMM_NR * NK_GEMM_NR);
	if (g->nc > NK_GEMM_KC * NK_GEMM_NC / 256)
		g->nc = NK_GEMM_KC * NK_GEMM_NC / 256;
	g->sgemm = nk_sgemm_avx512_14x32_k2;
	g->sgemm_b = nk_sgemm_avx512_14x32_k2_b;
	g->sgemm_b_pf = nk_sgemm_avx512_14x32_k2_b_pf;
	g->sgemm_bias = nk_sgemm_avx512_14x32_k2_bias;
	g->sgemm_a = nk_sgemm_avx512_14x32_k2_a;
	/* two threads: one k-slice (1 MiB of packed B) per shared super block, which both cores keep in L2 while
	 * their row panels pass; 2048^3 / 4096^3 / 512x3072x768 at 2 threads, GFLOP per CPU-second at load 8:
	 * 159 / 158 / 170 -> 164 / 175 / 177 (wall 59 / 82 / 85 -> 65 / 127 / 174) */
	g->shared_kslices = 1;
}

static void ctx_init_avx512(nk_kernels_t *k, const nk_cpu_t *c)
{
	static const int fams[] = { NK_FAM_CAST, NK_FAM_POINTWISE, NK_FAM_REDUCE, NK_FAM_RANDOM, NK_FAM_OPTIM,
				    NK_FAM_GEMM, NK_FAM_ATTENTION, NK_FAM_SOFTMAX, NK_FAM_LAYERNORM, NK_FAM_NORM,
				    NK_FAM_CONV, NK_FAM_POOL };

	for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++)
		k->isa[fams[i]] = NK_ISA_AVX512;
	k->gemm_table = nk_gemm_isa_avx512;
	gemm_blocking_intel(&k->gemm_table, c);
	if (!c->avx512_bf16) { /* vdpbf16ps: the bf16 pair kernels and the bf16 GEMV dot */
		nk_gemm_isa_t *g = &k->gemm_table;
		g->sbgemm = NULL, g->sbgemm_bf16c = NULL, g->sbgemm_a = NULL, g->sbgemm_bf16c_a = NULL;
		g->dot_bf16 = NULL;
	}
	k->softmax = &nk_rowops_avx512;
	k->layernorm = &nk_lnops_avx512;
	k->attention = &nk_attops_avx512;
}

/* AVX2 + FMA (x86 without AVX-512): the families with *_avx2.c kernels.  Runs before the AVX-512 step,
 * which overrides every family it has kernels for. */
static void ctx_init_avx2(nk_kernels_t *k, const nk_cpu_t *c)
{
	(void)c;
	/* ---- the GEMM family: micro-kernels (gemm_avx2.c); convolution and attention reach them through
	 * the GEMM driver ---- */
	k->isa[NK_FAM_GEMM] = NK_ISA_AVX2;
	k->gemm_table = nk_gemm_isa_avx2;
	k->isa[NK_FAM_ATTENTION] = NK_ISA_AVX2; /* the tile ops (attention_avx2.c) */
	k->attention = &nk_attops_avx2;

	/* ---- the row families: softmax rows (softmax_avx2.c; also attention's online softmax rows), dense
	 * f32 row reductions (reduce_avx2.c), the transcendental pointwise ops ---- */
	k->isa[NK_FAM_REDUCE] = NK_ISA_AVX2;
	k->isa[NK_FAM_POINTWISE] = NK_ISA_AVX2; /* exp, tanh, sigmoid, silu, gelu and backward (pointwise_avx2.c) */
	k->isa[NK_FAM_SOFTMAX] = NK_ISA_AVX2;
	k->softmax = &nk_rowops_avx2;
}

/* AMX: the bf16 and int8 GEMMs on the tile unit (over the AVX-512 context: the tiny shapes and every
 * other family keep their AVX-512 kernels). */
static void ctx_init_amx(nk_kernels_t *k, const nk_cpu_t *c)
{
	if (c->amx_bf16)
		k->gemm_table.bf16_tiles = nk_gemm_amx_bf16;
	if (c->amx_int8)
		k->gemm_table.i8_tiles = nk_gemm_amx_i8;
	if (c->amx_bf16 || c->amx_int8)
		k->isa[NK_FAM_GEMM] = NK_ISA_AMX;
}

static void ctx_init(void)
{
	int want = env_level(), have;

	cpu_detect(&cpu);
	have = cpu_level(&cpu);
	ctx_init_ref(&ctx_ref);
	ctx_init_portable(&ctx_opt);
	/* NEURON_KERNELS=ref forces the reference (nk_using_reference); nk_force_reference(false) then runs
	 * the best the CPU has, as does any value that is not a level */
	int level = want <= NK_ISA_REF || want > have ? have : want;
	if (level >= NK_ISA_AVX2)
		ctx_init_avx2(&ctx_opt, &cpu);
	if (level >= NK_ISA_AVX512)
		ctx_init_avx512(&ctx_opt, &cpu);
	if (level >= NK_ISA_AMX)
		ctx_init_amx(&ctx_opt, &cpu);
	ctx_opt.level = level;
	ctx_ref.gemm = &ctx_ref.gemm_table;
	ctx_opt.gemm = &ctx_opt.gemm_table;
}

const nk_kernels_t *nk_kernels(void)
{
	pthread_once(&ctx_once, ctx_init);
	return nk_using_reference() ? &ctx_ref : &ctx_opt;
}

/* ---- queries ---------------------------------------------------------------------------------------- */
const nk_cpu_t *nk_cpu(void)
{
	pthread_once(&ctx_once, ctx_init);
	return &cpu;
}

const char *nk_isa_name(int isa)
{
	static const char *const names[NK_NISA] = { "ref", "portable", "avx2", "avx512", "amx" };
	return isa >= 0 && isa < NK_NISA ? names[isa] : "?";
}

const char *nk_family_name(int family)
{
	static const char *const names[NK_NFAM] = { "cast", "pointwise", "reduce", "random", "optim", "gemm",
						    "attention", "softmax", "layernorm", "norm", "conv", "pool" };
	return family >= 0 && family < NK_NFAM ? names[family] : "?";
}

int nk_kernels_level(void)
{
	return nk_kernels()->level;
}

int nk_family_isa(int family)
{
	return family >= 0 && family < NK_NFAM ? nk_kernels()->isa[family] : NK_ISA_REF;
}

/* AVX-512 F/BW/VL/DQ in use: the CPU has it, the reference is not forced, NEURON_KERNELS allows it. */
bool nk_cpu_avx512(void)
{
	return nk_kernels()->level >= NK_ISA_AVX512;
}

nk_gemm_isa_t nk_gemm_isa_select(void)
{
	return *nk_kernels()->gemm;
}

size_t nk_kernels_describe(char *buf, size_t n)
{
	const nk_cpu_t *c = nk_cpu();
	const nk_kernels_t *k = nk_kernels();
	size_t len = 0;
	char blocks[160];
	int w;

#define PUT(...)                                                                      \
	do {                                                                          \
		w = buf ? snprintf(buf + (len < n ? len : n), len < n ? n - len : 0, __VA_ARGS__) \
			: snprintf(NULL, 0, __VA_ARGS__);                             \
		len += w > 0 ? (size_t)w : 0;                                         \
	} while (0)
	PUT("cpu %s family %u model %u:%s%s%s%s%s%s%s%s%s%s", c->vendor[0] ? c->vendor : "unknown", c->family,
	    c->model, c->avx2 ? " avx2" : "", c->fma ? " fma" : "", c->avx512 ? " avx512f/bw/vl/dq" : "",
	    c->avx512_bf16 ? " avx512_bf16" : "", c->avx512_fp16 ? " avx512_fp16" : "", c->amx_tile ? " amx_tile" : "",
	    c->amx_bf16 ? " amx_bf16" : "", c->amx_int8 ? " amx_int8" : "",
	    c->amx_tile ? (c->amx_permitted ? " (amx permitted)" : " (amx refused by the OS)") : "", "");
	snprintf(blocks, sizeof blocks, "; caches l1d %zu KiB, l2 %zu KiB, l3 %zu KiB; gemm f32 blocks kc %d x nc %d",
		 c->l1d_bytes >> 10, c->l2_bytes >> 10, c->l3_bytes >> 10, k->gemm->kc > 0 ? k->gemm->kc : NK_GEMM_KC,
		 k->gemm->nc > 0 ? k->gemm->nc : NK_GEMM_NC);
	PUT("%s\n", blocks);
	PUT("level %s\n", nk_isa_name(k->level));
	for (int f = 0; f < NK_NFAM; f++)
		PUT("%s %s\n", nk_family_name(f), nk_isa_name(k->isa[f]));
#undef PUT
	return len;
}
