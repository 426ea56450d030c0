/* gemm_amx.c - bf16 and int8 GEMM on the AMX tile unit (TDPBF16PS: bf16 pairs summed in f32; TDPBSSD:
 * int8 quads summed in int32; TDPBUSD: uint8 x int8).  Compiled with -mamx-tile -mamx-bf16 -mamx-int8 and AVX-512; called only
 * through the dispatch context (dispatch.c sets nk_gemm_isa_t.bf16_tiles / i8_tiles at the amx level,
 * after the OS granted the tile permission).
 *
 * Tiles: all eight are 16 rows x 64 bytes.  0-3 accumulate a 32 x 32 block of C (2 x 2 tiles of 16 x 16
 * f32 or int32), 4-5 hold two 16-row tiles of A (16 rows x 64 bytes: 32 bf16 or 64 int8 of k), 6-7 two
 * tiles of B in the VNNI layout (16 rows of k groups x 16 columns x the group: 2 bf16 or 4 int8).
 *
 * Layouts (zero-padded, so edge tiles need no masks: M, N to 16, K to a tile's k), both packed once per
 * row / column super block (all of K, at most SUPER_BYTES each) by all the threads and then shared:
 *   - B strip s (16 columns) holds its k tiles one after another, tile t at bp + (s * nkt + t) * 1024;
 *     element (k, j) of a tile at byte (k / g) * 64 + j * 4 + (k % g) * es (g = 4 / es per group);
 *   - A row tile r (16 rows) likewise at ap + (r * nkt + t) * 1024, element (i, k) at byte i * 64 + k * es.
 *   Row-major and column-major operands are packed 64 bytes at a time (column-major through a 16 x 16
 *   transpose of 32-bit groups); other strides element by element.
 * A task is an MB x NB block of C (smaller blocks while there are fewer than 4 tasks per thread),
 * accumulated over the k slices (KSLICE tiles of k) in the thread's f32 (int32) scratch block; each
 * 32 x 32 block goes through the epilogue (alpha, beta, bias, the bf16 rounding of the AVX-512 path) right
 * after its last slice, while it is in L1.  Loop nest of a task: k slice > strip pair (the B panel, 32 KiB,
 * stays in L1) > row-tile pair.  Every element of C sums the same k tiles in the same order whatever the
 * thread count. */
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "nk.h"
#include "nk_gemm_impl.h"
#include "nk_impl.h"
#include "nk_workspace.h"
#include "nrt.h"

#define TILE 1024                /* bytes of one tile */
#define KSLICE 16                /* k tiles per slice: 512 bf16 / 1024 int8 of k */
#define MB 256                   /* rows of C per task (multiple of 32) */
#define NB 256                   /* columns of C per task (multiple of 32) */
#define SUPER_BYTES ((int64_t)16 << 20) /* shared packed A (B) per row (column) super block, at most */
#define PAR_MIN_MACS ((int64_t)1 << 18)   /* below: the calling thread only */

enum { KIND_BF16, KIND_I8, KIND_U8 }; /* bf16 x bf16, int8 x int8, uint8 x int8 */

typedef struct {
	uint8_t palette, start_row, reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
} tilecfg_t;

typedef struct {
	const nk_gemm_args_t *g;
	int kind, es;          /* KIND_*, bytes per element of A and B */
	int64_t kt, nkt;       /* k per tile (64 / es), k tiles over K */
	int64_t b;             /* batch entry */
	int64_t ic, rtiles;    /* row super block: first row, 16-row tiles */
	int64_t jc, nc;        /* column super block: first column, columns */
	int64_t strips;        /* 16-column strips of the super block */
	uint8_t *ap, *bp;      /* packed A and B of the super blocks */
	int64_t mb, nb;        /* task block (multiples of 32, at most MB x NB) */
	int64_t tasks_m, tasks_n;
	float alpha, beta;
	atomic_int *failed;
} amx_plan_t;

static void tiles_config(void)
{
	tilecfg_t cfg;

	memset(&cfg, 0, sizeof cfg);
	cfg.palette = 1;
	for (int i = 0; i < 8; i++)
		cfg.rows[i] = 16, cfg.colsb[i] = 64;
	_tile_loadconfig(&cfg);
}

/* ---- packing ------------------------------------------------------------------------------------ */

/* r[j] word i -> r[i] word j (a 16 x 16 transpose of 32-bit words). */
static inline __attribute__((always_inline)) void transpose16(__m512i r[16])
{
	__m512i t[16], u[16];

	for (int q = 0; q < 16; q += 4) {
		t[q] = _mm512_unpacklo_epi32(r[q], r[q + 1]);
		t[q + 1] = _mm512_unpackhi_epi32(r[q], r[q + 1]);
		t[q + 2] = _mm512_unpacklo_epi32(r[q + 2], r[q + 3]);
		t[q + 3] = _mm512_unpackhi_epi32(r[q + 2], r[q + 3]);
	}
	for (int q = 0; q < 16; q += 4) {
		u[q] = _mm512_unpacklo_epi64(t[q], t[q + 2]);
		u[q + 1] = _mm512_unpackhi_epi64(t[q], t[q + 2]);
		u[q + 2] = _mm512_unpacklo_epi64(t[q + 1], t[q + 3]);
		u[q + 3] = _mm512_unpackhi_epi64(t[q + 1], t[q + 3]);
	}
	/* u[4q + c], 128-bit lane L: rows 4q..4q+3 of column 4L + c */
	for (int c = 0; c < 4; c++) {
		__m512i x0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88), x1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xdd);
		__m512i y0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88), y1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xdd);

		r[c] = _mm512_shuffle_i32x4(x0, y0, 0x88);
		r[8 + c] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
		r[4 + c] = _mm512_shuffle_i32x4(x1, y1, 0x88);
		r[12 + c] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
	}
}

/* One 32-bit group of 16 lanes from `grp` rows (2 bf16 / 4 int8 each; rows past `rows` zero): row q's
 * 16 elements at src + q * rstride bytes, the first n of them (the others zero). */
static inline __attribute__((always_inline)) __m512i group16(const uint8_t *src, int64_t rstride, int es, int rows,
							     __mmask16 mk)
{
	__m512i w = _mm512_setzero_si512();

	for (int q = 0; q < 4 / es && q < rows; q++) {
		const uint8_t *row = src + q * rstride;
		__m512i x = es == 2 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, row))
				    : _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mk, row));
		w = _mm512_or_si512(w, _mm512_slli_epi32(x, 8 * es * q));
	}
	return w;
}

static inline __mmask64 bytes_mask(int64_t nbytes)
{
	return nbytes >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << nbytes) - 1);
}

static void pack_b_strip(const amx_plan_t *pl, int64_t s);

/* Strips s0 .. s1-1 of the super block (columns jc + 16 s .., all of K) into their VNNI tiles. */
static void pack_b_strips(const amx_plan_t *pl, int64_t s0, int64_t s1)
{
	const nk_gemm_args_t *g = pl->g;
	int64_t K = g->K;
	int es = pl->es, grp = 4 / es;

	if (g->cs_b == 1) {
		/* row-major B: one group of rows (2 bf16 / 4 int8) at a time, widened and interleaved; k outer
		 * and the strips inner, so that each row's cache lines are used whole while they are in L1 */
		const __m512i lo_idx = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), hi_idx = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);

		for (int64_t t = 0; t < pl->nkt; t++)
			for (int64_t r = 0; r < 16; r++) {
				int64_t k = t * pl->kt + r * grp;

				for (int64_t s = s0; s < s1; s++) {
					int64_t j0 = pl->jc + s * 16, n = nk_min64(16, pl->jc + pl->nc - j0);

					/* bf16, two whole strips and two rows: 32 columns of both rows interleaved at once
					 * (per 128-bit lane, unpack gives the pairs of columns 8L..8L+3 and 8L+4..8L+7) */
					if (es == 2 && s + 1 < s1 && j0 + 32 <= pl->jc + pl->nc && k + 1 < K) {
						const uint16_t *r0 = (const uint16_t *)g->B + pl->b * g->bs_b + k * g->rs_b + j0;
						__m512i x0 = _mm512_loadu_si512(r0), x1 = _mm512_loadu_si512(r0 + g->rs_b);
						__m512i lo = _mm512_unpacklo_epi16(x0, x1), hi = _mm512_unpackhi_epi16(x0, x1);

						_mm512_store_si512(pl->bp + (s * pl->nkt + t) * TILE + r * 64,
								   _mm512_permutex2var_epi64(lo, lo_idx, hi));
						_mm512_store_si512(pl->bp + ((s + 1) * pl->nkt + t) * TILE + r * 64,
								   _mm512_permutex2var_epi64(lo, hi_idx, hi));
						s++;
						continue;
					}
					const uint8_t *B = (const uint8_t *)g->B + (pl->b * g->bs_b + k * g->rs_b + j0) * es;
					__m512i w = k < K ? group16(B, g->rs_b * es, es, (int)(K - k), (__mmask16)((1u << n) - 1))
							  : _mm512_setzero_si512();

					_mm512_store_si512(pl->bp + (s * pl->nkt + t) * TILE + r * 64, w);
				}
			}
		return;
	}
	for (int64_t s = s0; s < s1; s++)
		pack_b_strip(pl, s);
}

/* Strip s of the super block (columns jc + 16 s .., all of K) into its VNNI tiles (B not row-major). */
static void pack_b_strip(const amx_plan_t *pl, int64_t s)
{
	const nk_gemm_args_t *g = pl->g;
	uint8_t *dst = pl->bp + s * pl->nkt * TILE;
	int64_t j0 = pl->jc + s * 16, n = nk_min64(16, pl->jc + pl->nc - j0), K = g->K;
	const uint8_t *B = (const uint8_t *)g->B + (pl->b * g->bs_b + j0 * g->cs_b) * pl->es;
	int es = pl->es, grp = 4 / es;

	if (g->rs_b == 1) {
		/* column-major B (the weight of a linear, W^T): each column's groups are 32-bit words in a row:
		 * 16 columns of 16 words, transposed */
		for (int64_t t = 0; t < pl->nkt; t++) {
			__mmask64 mk = bytes_mask((K - t * pl->kt) * es);
			__m512i r[16];

			for (int j = 0; j < 16; j++)
				r[j] = j < n ? _mm512_maskz_loadu_epi8(mk, B + (j * g->cs_b + t * pl->kt) * es)
					     : _mm512_setzero_si512();
			transpose16(r);
			for (int q = 0; q < 16; q++)
				_mm512_store_si512(dst + t * TILE + q * 64, r[q]);
		}
		return;
	}
	/* any other layout: element by element */
	memset(dst, 0, (size_t)(pl->nkt * TILE));
	for (int64_t j = 0; j < n; j++)
		for (int64_t k = 0; k < K; k++)
			memcpy(dst + (k / pl->kt) * TILE + (k % pl->kt) / grp * 64 + j * 4 + (k % grp) * es,
			       B + (k * g->rs_b + j * g->cs_b) * es, (size_t)es);
}

/* Row tile r of the row super block (rows ic + 16 r .., zero rows past M), all k tiles, into the shared
 * packed A. */
static void pack_a_tile(const amx_plan_t *pl, int64_t r)
{
	const nk_gemm_args_t *g = pl->g;
	int64_t i0 = pl->ic + r * 16;
	int es = pl->es, grp = 4 / es, rows = (int)nk_min64(16, g->M - i0);
	const uint8_t *A = (const uint8_t *)g->A + (pl->b * g->bs_a + i0 * g->rs_a) * es;

	for (int64_t t = 0; t < pl->nkt; t++) {
		uint8_t *d = pl->ap + (r * pl->nkt + t) * TILE;
		int64_t kk = t * pl->kt, kn = nk_min64(pl->kt, g->K - kk);

		if (g->cs_a == 1) {
			__mmask64 mk = bytes_mask(kn * es);

			for (int i = 0; i < 16; i++) {
				__m512i x = i < rows ? _mm512_maskz_loadu_epi8(mk, A + (i * g->rs_a + kk) * es) : _mm512_setzero_si512();
				_mm512_store_si512(d + i * 64, x);
			}
		} else if (g->rs_a == 1) {
			/* column-major A (dY^T of a weight gradient): groups of k rows interleaved into 32-bit words
			 * per row i, then transposed */
			__mmask16 mk = (__mmask16)((1u << rows) - 1);
			__m512i w[16];

			for (int q = 0; q < 16; q++) {
				int64_t k = kk + q * grp;
				w[q] = k < kk + kn ? group16(A + k * g->cs_a * es, g->cs_a * es, es, (int)(kk + kn - k), mk)
						   : _mm512_setzero_si512();
			}
			transpose16(w);
			for (int i = 0; i < 16; i++)
				_mm512_store_si512(d + i * 64, w[i]);
		} else {
			memset(d, 0, TILE);
			for (int i = 0; i < rows; i++)
				for (int64_t k = 0; k < kn; k++)
					memcpy(d + i * 64 + k * es, A + (i * g->rs_a + (kk + k) * g->cs_a) * es, (size_t)es);
		}
	}
}

/* The pack job: groups of BGROUP B strips first, then (when this super block packs A) A row tiles. */
#define BGROUP 16
static void pack_tiles(void *ctx, int64_t t0, int64_t t1)
{
	const amx_plan_t *pl = ctx;
	int64_t nb = nk_cdiv(pl->strips, BGROUP);

	for (int64_t t = t0; t < t1; t++)
		if (t < nb)
			pack_b_strips(pl, t * BGROUP, nk_min64(pl->strips, (t + 1) * BGROUP));
		else
			pack_a_tile(pl, t - nb);
}

/* ---- the tile block ----------------------------------------------------------------------------- */

/* One tile product of the kind: C tile c += A tile a x B tile b. */
#define TDP(kind, c, a, b)                         \
	do {                                       \
		if ((kind) == KIND_BF16)           \
			_tile_dpbf16ps(c, a, b);   \
		else if ((kind) == KIND_I8)        \
			_tile_dpbssd(c, a, b);     \
		else                               \
			_tile_dpbusd(c, a, b);     \
	} while (0)

/* A tm x tn block of 16 x 16 tiles (tm, tn in 1..2) of C over nt k tiles: a holds the A row tiles (the
 * second at + astr), b the B strips (the second at + bstr), c the f32/int32 scratch (row stride ldc
 * bytes), zeroed instead of loaded on the first slice. */
static inline __attribute__((always_inline)) void tile_block(int kind, int tm, int tn, const uint8_t *a, int64_t astr,
							     const uint8_t *b, int64_t bstr, int64_t nt, char *c,
							     int64_t ldc, bool first)
{
	if (first) {
		_tile_zero(0);
		if (tn > 1)
			_tile_zero(1);
		if (tm > 1)
			_tile_zero(2);
		if (tm > 1 && tn > 1)
			_tile_zero(3);
	} else {
		_tile_loadd(0, c, ldc);
		if (tn > 1)
			_tile_loadd(1, c + 64, ldc);
		if (tm > 1)
			_tile_loadd(2, c + 16 * ldc, ldc);
		if (tm > 1 && tn > 1)
			_tile_loadd(3, c + 16 * ldc + 64, ldc);
	}
	/* the order of the optimization manual: each tile is reloaded right after its last reader, so that
	 * the loads of one step overlap the products of the last (tiles are not renamed) */
	for (int64_t t = 0; t < nt; t++) {
		_tile_loadd(4, a + t * TILE, 64);
		_tile_loadd(6, b + t * TILE, 64);
		TDP(kind, 0, 4, 6);
		if (tn > 1) {
			_tile_loadd(7, b + bstr + t * TILE, 64);
			TDP(kind, 1, 4, 7);
		}
		if (tm > 1) {
			_tile_loadd(5, a + astr + t * TILE, 64);
			TDP(kind, 2, 5, 6);
			if (tn > 1)
				TDP(kind, 3, 5, 7);
		}
	}
	_tile_stored(0, c, ldc);
	if (tn > 1)
		_tile_stored(1, c + 64, ldc);
	if (tm > 1)
		_tile_stored(2, c + 16 * ldc, ldc);
	if (tm > 1 && tn > 1)
		_tile_stored(3, c + 16 * ldc + 64, ldc);
}

#define TILE_BLOCK_KIND(kind)                                                                           \
	static void tile_block_##kind(int tm, int tn, const uint8_t *a, int64_t astr, const uint8_t *b,   \
				      int64_t bstr, int64_t nt, char *c, int64_t ldc, bool first)          \
	{                                                                                               \
		if (tm == 2 && tn == 2)                                                                 \
			tile_block(kind, 2, 2, a, astr, b, bstr, nt, c, ldc, first);                     \
		else if (tm == 2)                                                                       \
			tile_block(kind, 2, 1, a, astr, b, bstr, nt, c, ldc, first);                     \
		else if (tn == 2)                                                                       \
			tile_block(kind, 1, 2, a, astr, b, bstr, nt, c, ldc, first);                     \
		else                                                                                    \
			tile_block(kind, 1, 1, a, astr, b, bstr, nt, c, ldc, first);                     \
	}
TILE_BLOCK_KIND(KIND_BF16)
TILE_BLOCK_KIND(KIND_I8)
TILE_BLOCK_KIND(KIND_U8)

/* ---- epilogue ----------------------------------------------------------------------------------- */

/* C rows i0.. (m x n at columns j0..) from acc (row stride lda floats / int32): bf16 C = alpha * acc +
 * beta * old (old: the bias or C; beta == 0 reads neither), rounded to nearest even with NaN -> 0x7fc0
 * (as nk_f32_to_bf16_avx512); int32 C = acc, plus C when beta != 0 (torch._int_mm's out: no alpha). */
static void store_block(const amx_plan_t *pl, const void *acc, int64_t lda, int64_t i0, int64_t m, int64_t j0,
			int64_t n)
{
	const nk_gemm_args_t *g = pl->g;
	const __m512i rbias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), qnan = _mm512_set1_epi32(0x7fc0);
	const __m512 va = _mm512_set1_ps(pl->alpha), vb = _mm512_set1_ps(pl->beta);

	for (int64_t i = 0; i < m; i++) {
		if (pl->kind != KIND_BF16) {
			const int32_t *a = (const int32_t *)acc + i * lda;
			int32_t *c = (int32_t *)g->C + pl->b * g->bs_c + (i0 + i) * g->rs_c + j0 * g->cs_c;

			if (g->cs_c != 1) {
				for (int64_t j = 0; j < n; j++)
					c[j * g->cs_c] = (int32_t)((uint32_t)a[j] + (pl->beta != 0 ? (uint32_t)c[j * g->cs_c] : 0u));
				continue;
			}
			for (int64_t j = 0; j < n; j += 16) {
				__mmask16 mk = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
				__m512i v = _mm512_maskz_loadu_epi32(mk, a + j);

				if (pl->beta != 0)
					v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(mk, c + j));
				_mm512_mask_storeu_epi32(c + j, mk, v);
			}
			continue;
		}
		const float *a = (const float *)acc + i * lda;
		uint16_t *c = (uint16_t *)g->C + pl->b * g->bs_c + (i0 + i) * g->rs_c + j0 * g->cs_c;
		const uint16_t *old = NULL;
		int64_t cs_old = g->cs_c;

		if (pl->beta != 0 && g->bias)
			old = (const uint16_t *)g->bias + pl->b * g->bs_bias + (i0 + i) * g->rs_bias + j0 * g->cs_bias,
			cs_old = g->cs_bias;
		else if (pl->beta != 0)
			old = c;
		if (g->cs_c != 1 || (old && cs_old != 1)) {
			for (int64_t j = 0; j < n; j++) {
				float v = pl->alpha * a[j];

				if (old)
					v += pl->beta * nk_bf16_to_f32(old[j * cs_old]);
				c[j * g->cs_c] = nk_f32_to_bf16(v);
			}
			continue;
		}
		for (int64_t j = 0; j < n; j += 16) {
			__mmask16 mk = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
			__m512 f = _mm512_mul_ps(va, _mm512_maskz_loadu_ps(mk, a + j));

			if (old) {
				__m512i o = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, old + j));
				f = _mm512_add_ps(f, _mm512_mul_ps(vb, _mm512_castsi512_ps(_mm512_slli_epi32(o, 16))));
			}
			__m512i u = _mm512_castps_si512(f);
			__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
			__m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(rbias, lsb)), 16);

			r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), qnan);
			_mm256_mask_storeu_epi16(c + j, mk, _mm512_cvtepi32_epi16(r));
		}
	}
}

/* ---- tasks -------------------------------------------------------------------------------------- */

/* Task (block row bm, block column bn of the super blocks): every k slice into the scratch acc (row
 * stride NB), each 32 x 32 block stored through the epilogue right after its last slice (still in L1). */
static void run_task(const amx_plan_t *pl, char *acc, int64_t task)
{
	const nk_gemm_args_t *g = pl->g;
	int64_t bm = task / pl->tasks_n, bn = task % pl->tasks_n;
	int64_t r0 = bm * (pl->mb / 16), mt = nk_min64(pl->mb / 16, pl->rtiles - r0);
	int64_t s0 = bn * (pl->nb / 16), ns = nk_min64(pl->nb / 16, pl->strips - s0);
	int64_t i0 = pl->ic + r0 * 16, j0 = pl->jc + s0 * 16, bstr = pl->nkt * TILE;

	for (int64_t t0 = 0; t0 < pl->nkt; t0 += KSLICE) {
		int64_t nt = nk_min64(KSLICE, pl->nkt - t0);
		bool last = t0 + nt == pl->nkt;

		for (int64_t sq = 0; sq < ns; sq += 2) {
			int tn = (int)nk_min64(2, ns - sq);
			const uint8_t *b = pl->bp + ((s0 + sq) * pl->nkt + t0) * TILE;

			for (int64_t mq = 0; mq < mt; mq += 2) {
				int tm = (int)nk_min64(2, mt - mq);
				const uint8_t *a = pl->ap + ((r0 + mq) * pl->nkt + t0) * TILE;
				char *c = acc + (mq * 16 * NB + sq * 16) * 4;

				if (pl->kind == KIND_BF16)
					tile_block_KIND_BF16(tm, tn, a, bstr, b, bstr, nt, c, NB * 4, t0 == 0);
				else if (pl->kind == KIND_I8)
					tile_block_KIND_I8(tm, tn, a, bstr, b, bstr, nt, c, NB * 4, t0 == 0);
				else
					tile_block_KIND_U8(tm, tn, a, bstr, b, bstr, nt, c, NB * 4, t0 == 0);
				if (last) {
					int64_t ii = i0 + mq * 16, jj = j0 + sq * 16;

					store_block(pl, c, NB, ii, nk_min64(32, g->M - ii), jj,
						    nk_min64(32, pl->jc + pl->nc - jj));
				}
			}
		}
	}
}

static void run_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const amx_plan_t *pl = ctx;
	char *acc = nk_ws_get(NK_WS_GEMM_C, (size_t)MB * NB * 4);

	if (!acc) {
		atomic_store(pl->failed, 1);
		return;
	}
	tiles_config();
	for (int64_t t = t0; t < t1; t++)
		run_task(pl, acc, t);
	_tile_release();
}

/* The whole GEMM: per batch entry, per row and column super block (packed A and B of at most
 * SUPER_BYTES each, all of K), A and B packed over the pool, then the tasks. */
static int amx_gemm(const nk_gemm_args_t *g, int kind)
{
	atomic_int failed = 0;
	amx_plan_t pl = {
		.g = g,
		.kind = kind,
		.es = kind == KIND_BF16 ? 2 : 1,
		.alpha = (float)g->alpha,
		.beta = (float)g->beta,
		.mb = MB,
		.nb = NB,
		.failed = &failed,
	};
	int64_t macs = g->M * g->N * g->K, tile_row, sm, sn, nt = nrt_num_threads();
	bool par = macs >= PAR_MIN_MACS && nt > 1;

	pl.kt = 64 / pl.es;
	pl.nkt = nk_cdiv(g->K, pl.kt);
	tile_row = pl.nkt * TILE; /* bytes of one packed strip / row tile */
	/* rows and columns per super block: multiples of MB / NB within SUPER_BYTES (at least one block) */
	sm = nk_min64(nk_cdiv(g->M, 16) * 16, SUPER_BYTES / (tile_row * MB / 16) * MB);
	sn = nk_min64(nk_cdiv(g->N, 16) * 16, SUPER_BYTES / (tile_row * NB / 16) * NB);
	if (sm < 16)
		sm = nk_min64(MB, nk_cdiv(g->M, 16) * 16);
	if (sn < 16)
		sn = nk_min64(NB, nk_cdiv(g->N, 16) * 16);
	pl.ap = nk_ws_get(NK_WS_GEMM_B, (size_t)((sm + sn) / 16 * tile_row));
	if (!pl.ap) {
		nrt_kernel_fail("gemm: out of host memory for the packing workspace");
		return -1;
	}
	pl.bp = pl.ap + sm / 16 * tile_row;
	/* smaller task blocks while there are fewer than 4 per thread (halving the longer side) */
	while (par && nk_cdiv(sm, pl.mb) * nk_cdiv(sn, pl.nb) < 4 * nt && (pl.mb > 32 || pl.nb > 32)) {
		if (pl.mb >= pl.nb && pl.mb > 32)
			pl.mb /= 2;
		else
			pl.nb /= 2;
	}
	for (int64_t b = 0; b < g->batch; b++)
		for (int64_t ic = 0; ic < g->M; ic += sm)
			for (int64_t jc = 0; jc < g->N; jc += sn) {
				int64_t ntasks, npack;

				pl.b = b, pl.ic = ic, pl.jc = jc, pl.nc = nk_min64(sn, g->N - jc);
				pl.rtiles = nk_cdiv(nk_min64(sm, g->M - ic), 16);
				pl.strips = nk_cdiv(pl.nc, 16);
				pl.tasks_m = nk_cdiv(pl.rtiles, pl.mb / 16);
				pl.tasks_n = nk_cdiv(pl.strips, pl.nb / 16);
				ntasks = pl.tasks_m * pl.tasks_n;
				/* A is packed with the first column super block of its rows */
				npack = nk_cdiv(pl.strips, BGROUP) + (jc == 0 ? pl.rtiles : 0);
				if (par) {
					nrt_parallel_for(npack, 1, pack_tiles, &pl);
					nrt_parallel_for(ntasks, 1, run_tasks, &pl);
				} else {
					pack_tiles(&pl, 0, npack);
					run_tasks(&pl, 0, ntasks);
				}
				if (atomic_load(&failed)) {
					nrt_kernel_fail("gemm: out of host memory for the packing workspace");
					return -1;
				}
			}
	return 0;
}

int nk_gemm_amx_bf16(const nk_gemm_args_t *g)
{
	return amx_gemm(g, KIND_BF16);
}

int nk_gemm_amx_i8(const nk_gemm_args_t *g)
{
	return amx_gemm(g, g->dtype == NK_U8 ? KIND_U8 : KIND_I8);
}
