/* test_dispatch.c - the kernel-dispatch point (dispatch.c): the features it reads from cpuid agree with
 * the compiler's own detection (__builtin_cpu_supports), AMX is recorded with its permission, each
 * NEURON_KERNELS level gives the families the ISA it names (capped by the CPU; the test re-runs itself
 * under each level), nk_force_reference switches every family to the reference and back, and
 * nk_kernels_describe lists every family. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk_dispatch_impl.h"
#include "nk_impl.h"

static const char *self_exe;

static void test_cpu_features(void)
{
	const nk_cpu_t *c = nk_cpu();

#if defined(__x86_64__)
	__builtin_cpu_init();
	bool f = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
	CHECK(c->avx512 == f, "avx512 %d, the compiler says %d", c->avx512, f);
	CHECK(c->avx2 == (bool)__builtin_cpu_supports("avx2"), "avx2");
	CHECK(c->fma == (bool)__builtin_cpu_supports("fma"), "fma");
	CHECK(c->avx512_bf16 == (bool)__builtin_cpu_supports("avx512bf16"), "avx512_bf16");
	CHECK(c->avx512_fp16 == (bool)__builtin_cpu_supports("avx512fp16"), "avx512_fp16");
	CHECK(c->amx_tile == (bool)__builtin_cpu_supports("amx-tile"), "amx_tile %d", c->amx_tile);
	CHECK(c->amx_bf16 == (bool)__builtin_cpu_supports("amx-bf16"), "amx_bf16");
	CHECK(c->amx_int8 == (bool)__builtin_cpu_supports("amx-int8"), "amx_int8");
	CHECK(strcmp(c->vendor, "GenuineIntel") == 0 || strcmp(c->vendor, "AuthenticAMD") == 0 || c->vendor[0],
	      "vendor '%s'", c->vendor);
	/* Linux grants the tile data permission to any process that asks on an AMX CPU */
	CHECK(!c->amx_tile || c->amx_permitted, "AMX present but the tile permission was refused");
	CHECK(!c->amx_permitted || c->amx_tile, "tile permission without AMX");
#endif
	printf("  %s %u/%u avx512 %d bf16 %d fp16 %d amx %d/%d/%d permitted %d\n", c->vendor, c->family, c->model,
	       c->avx512, c->avx512_bf16, c->avx512_fp16, c->amx_tile, c->amx_bf16, c->amx_int8, c->amx_permitted);
}

/* The level this process was started with (NEURON_KERNELS) against what the families got. */
static void test_levels(void)
{
	const nk_cpu_t *c = nk_cpu();
	const char *e = getenv("NEURON_KERNELS");
	int best = c->amx_tile && c->amx_permitted && c->avx512 ? NK_ISA_AMX
		   : c->avx512 ? NK_ISA_AVX512 : c->avx2 && c->fma ? NK_ISA_AVX2 : NK_ISA_PORTABLE;
	int want = best;

	for (int i = 0; i < NK_NISA; i++)
		if (e && strcmp(e, nk_isa_name(i)) == 0)
			want = i;
	if (want == NK_ISA_REF) {
		CHECK(nk_using_reference() && nk_kernels_level() == NK_ISA_REF, "ref: the reference context");
		for (int f = 0; f < NK_NFAM; f++)
			CHECK(nk_family_isa(f) == NK_ISA_REF, "ref: %s uses %s", nk_family_name(f), nk_isa_name(nk_family_isa(f)));
		nk_force_reference(false);
		want = best; /* NEURON_KERNELS=ref then nk_force_reference(false): the CPU's best */
	}
	if (want > best)
		want = best;
	CHECK(nk_kernels_level() == want, "level %s, expected %s", nk_isa_name(nk_kernels_level()), nk_isa_name(want));
	int fam = want >= NK_ISA_AVX512 ? NK_ISA_AVX512 : NK_ISA_PORTABLE;
	/* AMX: the GEMM family only (bf16 and int8 tiles), over the AVX-512 context; AVX2: the GEMM family
	 * (gemm_avx2.c), softmax rows (softmax_avx2.c) and attention tile ops (attention_avx2.c), the others
	 * portable */
	bool amx = want == NK_ISA_AMX && (c->amx_bf16 || c->amx_int8);
	for (int f = 0; f < NK_NFAM; f++) {
		bool avx2_fam = f == NK_FAM_GEMM || f == NK_FAM_SOFTMAX || f == NK_FAM_ATTENTION || f == NK_FAM_REDUCE || f == NK_FAM_POINTWISE; /* the families with *_avx2.c kernels */
		int e = f == NK_FAM_GEMM && amx ? NK_ISA_AMX : avx2_fam && want == NK_ISA_AVX2 ? NK_ISA_AVX2 : fam;
		CHECK(nk_family_isa(f) == e, "%s uses %s, expected %s", nk_family_name(f), nk_isa_name(nk_family_isa(f)),
		      nk_isa_name(e));
	}
	const nk_kernels_t *k = nk_kernels();
	CHECK((k->gemm->bf16_tiles != NULL) == (want == NK_ISA_AMX && c->amx_bf16), "bf16 tiles at the amx level only");
	CHECK((k->gemm->i8_tiles != NULL) == (want == NK_ISA_AMX && c->amx_int8), "int8 tiles at the amx level only");
	/* Intel cores with a 48 KiB L1d and 2 MiB of L2: the f32 blocking kept in L2 and the _k2 kernels; every
	 * other CPU (Zen 4) the AVX-512 table as it is */
	bool intel = !strcmp(c->vendor, "GenuineIntel") && c->l1d_bytes >= (48u << 10) && c->l2_bytes >= (2u << 20);
	bool k2 = fam == NK_ISA_AVX512 && intel;
	CHECK((k->gemm->sgemm == (k2 ? nk_sgemm_avx512_14x32_k2 : nk_gemm_isa_avx512.sgemm)) == (fam == NK_ISA_AVX512),
	      "gemm table");
	CHECK(fam != NK_ISA_AVX512 || (k->gemm->kc == (k2 ? 256 : NK_GEMM_KC) &&
	      k->gemm->nc == (k2 ? (int)(c->l2_bytes / 2 / 1024 / NK_GEMM_NR * NK_GEMM_NR) : NK_GEMM_NC)),
	      "gemm f32 blocking kc %d nc %d", k->gemm->kc, k->gemm->nc);
	CHECK(!k2 || (k->gemm->sgemm_a == nk_sgemm_avx512_14x32_k2_a && k->gemm->sgemm_b == nk_sgemm_avx512_14x32_k2_b &&
		      k->gemm->sgemm_bias == nk_sgemm_avx512_14x32_k2_bias &&
		      k->gemm->sgemm_b_pf == nk_sgemm_avx512_14x32_k2_b_pf && k->gemm->shared_kslices == 1),
	      "Intel: all five f32 kernels unrolled");
	CHECK((k->gemm->sgemm == nk_gemm_isa_avx2.sgemm) == (want == NK_ISA_AVX2), "avx2 gemm table at the avx2 level");
	CHECK((k->gemm->sbgemm != NULL) == (fam == NK_ISA_AVX512 && c->avx512_bf16), "bf16 GEMM kernels need avx512_bf16");
	CHECK((k->softmax == &nk_rowops_avx512) == (fam == NK_ISA_AVX512), "softmax table");
	CHECK((k->softmax == &nk_rowops_avx2) == (want == NK_ISA_AVX2), "avx2 softmax table at the avx2 level");
	CHECK((k->layernorm == &nk_lnops_avx512) == (fam == NK_ISA_AVX512), "layernorm table");
	CHECK((k->attention == &nk_attops_avx512) == (fam == NK_ISA_AVX512), "attention table");
	CHECK((k->attention == &nk_attops_avx2) == (want == NK_ISA_AVX2), "avx2 attention table at the avx2 level");
	CHECK(nk_cpu_avx512() == (want >= NK_ISA_AVX512), "nk_cpu_avx512");
	nk_gemm_isa_t sel = nk_gemm_isa_select();
	CHECK(sel.sgemm == k->gemm->sgemm && sel.sbgemm == k->gemm->sbgemm, "nk_gemm_isa_select is the context's");
}

static void test_force_reference(void)
{
	bool was = nk_using_reference();

	nk_force_reference(true);
	CHECK(nk_kernels_level() == NK_ISA_REF && nk_family_isa(NK_FAM_GEMM) == NK_ISA_REF && !nk_cpu_avx512() &&
	      nk_kernels()->gemm->sgemm == nk_gemm_isa_ref.sgemm, "forced reference");
	nk_force_reference(false);
	CHECK(nk_kernels_level() != NK_ISA_REF && nk_family_isa(NK_FAM_GEMM) != NK_ISA_REF, "reference off");
	nk_force_reference(was);
}

static void test_describe(void)
{
	char buf[2048];
	size_t n = nk_kernels_describe(buf, sizeof buf), m = nk_kernels_describe(NULL, 0);
	char small[16];

	CHECK(n == m && n < sizeof buf && strlen(buf) == n, "describe: %zu / %zu", n, m);
	CHECK(strncmp(buf, "cpu ", 4) == 0 && strstr(buf, "\nlevel "), "describe: %s", buf);
	for (int f = 0; f < NK_NFAM; f++) {
		char line[64];

		snprintf(line, sizeof line, "\n%s %s\n", nk_family_name(f), nk_isa_name(nk_family_isa(f)));
		CHECK(strstr(buf, line) != NULL, "describe lists %s", nk_family_name(f));
	}
	CHECK(nk_kernels_describe(small, sizeof small) == n && strlen(small) == sizeof small - 1, "describe truncates");
	if (!getenv("NEURON_KERNELS"))
		printf("%s", buf);
}

/* Every level in a child process (the level is read once per process). */
static void test_each_level(void)
{
	if (getenv("NEURON_KERNELS"))
		return;
	for (int i = 0; i < NK_NISA; i++) {
		char cmd[4200];

		snprintf(cmd, sizeof cmd, "NEURON_KERNELS=%s '%s' > /dev/null", nk_isa_name(i), self_exe);
		CHECK(system(cmd) == 0, "%s with NEURON_KERNELS=%s failed", self_exe, nk_isa_name(i));
	}
}

int main(int argc, char **argv)
{
	(void)argc;
	self_exe = argv[0];
	RUN(test_cpu_features);
	RUN(test_levels);
	RUN(test_force_reference);
	RUN(test_describe);
	RUN(test_each_level);
	return ctest_finish();
}
