/* gemm_amx.c - bf16 and int8 GEMM on the AMX tile unit (TDPBF16PS: bf16 pairs summed in f32; TDPBSSD:
 * int8 quads summed in int32; TDPBUSD: uint8 x int8).  Compiled with -mamx-tile -mamx-bf16 -mamx-int8 and AVX-512; called only
 * through the dispatch context (dispatch.c sets nk_gemm_isa_t.bf16_tiles / i8_tiles at the amx level,
 * after the OS granted the tile permission).
 *
 * Tiles: all eight are 16 rows x 64 bytes.  0-3 accumulate a 32 x 32 block of C (2 x 2 tiles of 16 x 16
 * f32 or int32), 4-5 hold two 16-row tiles of A (16 rows x 64 bytes: 32 bf16 or 64 int8 of k), 6-7 two
 * tiles of B in the VNNI layout (16 rows of k groups x 16 columns x the group: 2 bf16 or 4 int8).
 *
 * A: a row-major A on whole cache lines (64-byte aligned rows, as the device allocator gives) is read
 * in place, each tile straight from the source with the row stride; only its k tail (K % kt) and, when
 * M % 16, its last row tile are packed (zero-padded).  Any other A is packed once per row super block
 * (at most SUPER_BYTES) by all the threads and shared: row tile r's k tile t at ap + (r * nkt + t) *
 * 1024, element (i, k) at byte i * 64 + k * es (column-major through a 16 x 16 transpose of 32-bit
 * groups, other strides element by element).
 * B: each task packs its own columns, one k slice at a time, into the thread's buffer (at most
 * BBLOCK_BYTES, so that it stays in L2 while all the task's rows stream past it): strip s (16 columns)
 * holds its k tiles one after another, element (k, j) of a tile at byte (k / g) * 64 + j * 4 + (k % g)
 * * es (g = 4 / es per group).  Packing in the task keeps the packed B out of memory (a shared packed B
 * was written to and read back from DRAM: 14 % of a 2048^3 call).
 * A task is an nb-column block of C over all the rows of the super block (rows split while there are
 * fewer than 2 tasks per thread); per k slice (at most KS_TILES tiles: one slice up to K = 2048 bf16),
 * per row pair, per strip pair, one 2 x 2 tile block, the next row pair's A prefetched into L2 meanwhile
 * (the A rows stream from L3 / DRAM once per task: nb sets the traffic, 1 / nb bytes per flop).  With
 * one slice a block's sums live in the tiles only; with several, in the task's f32 (int32) scratch.
 * The epilogue (alpha, beta, bias, the bf16 rounding of the AVX-512 path) of each 32 x 32 block runs
 * right after the next block's tile products are issued.  Every element of C sums the same k tiles in
 * the same order whatever the thread count. */
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "nk.h"
#include "nk_gemm_impl.h"
#include "nk_impl.h"
#include "nk_workspace.h"
#include "nrt.h"

#define TILE 1024                /* bytes of one tile */
#define KS_TILES 64              /* k tiles per slice at most: 2048 bf16 / 4096 int8 of k */
#define BBLOCK_BYTES ((int64_t)1 << 20) /* packed B of a task's columns in one slice (kept in L2) */
#define NB_MAX 512               /* columns of C per task, at most (multiple of 32) */
#define PF_MAX 8                 /* A lines prefetched per k step, at most */
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
	int64_t kfull;         /* whole k tiles (K / kt): read from the source when A is direct */
	int64_t nsl, kts;      /* k slices, k tiles per slice */
	int64_t b;             /* batch entry */
	int64_t ic, rtiles;    /* row super block: first row, 16-row tiles */
	int64_t strips;        /* 16-column strips of C */
	bool a_direct;         /* row-major A: whole tiles loaded from the source (stride lda bytes) */
	const uint8_t *asrc;   /* A of batch entry b, row 0 (a_direct) */
	int64_t lda;           /* bytes between rows of A (a_direct) */
	uint8_t *ap;           /* packed A of the super block (a_direct: the k-tail tiles, then the last row tile) */
	uint8_t *alast;        /* a_direct: the packed last row tile when M % 16 (all k tiles), else NULL */
	int64_t mb, nb;        /* task block (multiples of 32) */
	int64_t tasks_m, tasks_n;
	float alpha, beta;
	atomic_int *failed;
} amx_plan_t;

static inline int64_t amx_max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

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

static void pack_b_strip(const amx_plan_t *pl, int64_t s, int64_t t0, int64_t t1, uint8_t *dst);

/* B's tiles of strips s0 .. s1-1 (columns 16 s ..) and k tiles t0 .. t1-1 into the VNNI layout at dst:
 * tile (s, t) at dst + ((s - s0) * ldt + t - t0) * TILE. */
static void pack_b(const amx_plan_t *pl, int64_t s0, int64_t s1, int64_t t0, int64_t t1, uint8_t *dst, int64_t ldt)
{
	const nk_gemm_args_t *g = pl->g;
	int64_t K = g->K;
	int es = pl->es, grp = 4 / es;

	if (g->cs_b == 1) {
		/* row-major B: one group of rows (2 bf16 / 4 int8) at a time, widened and interleaved; k outer
		 * and the strips inner, so that each row's cache lines are used whole while they are in L1 */
		const __m512i lo_idx = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), hi_idx = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);

		for (int64_t t = t0; t < t1; t++)
			for (int64_t r = 0; r < 16; r++) {
				int64_t k = t * pl->kt + r * grp;

				/* the first two lines of the rows 4 groups ahead: a block's rows are short runs a page
				 * apart, each of which the L2 streamer then follows (all the lines: slower at 2048^3) */
				for (int64_t q = 0; q < grp && k + 4 * grp + q < K; q++) {
					const char *row = (const char *)g->B + (pl->b * g->bs_b + (k + 4 * grp + q) * g->rs_b + s0 * 16) * es;

					_mm_prefetch(row, _MM_HINT_T0);
					_mm_prefetch(row + 64, _MM_HINT_T0);
				}
				for (int64_t s = s0; s < s1; s++) {
					int64_t j0 = s * 16, n = nk_min64(16, g->N - j0);
					uint8_t *d = dst + ((s - s0) * ldt + t - t0) * TILE + r * 64;

					/* bf16, two whole strips and two rows: 32 columns of both rows interleaved at once
					 * (per 128-bit lane, unpack gives the pairs of columns 8L..8L+3 and 8L+4..8L+7) */
					if (es == 2 && s + 1 < s1 && j0 + 32 <= g->N && k + 1 < K) {
						const uint16_t *r0 = (const uint16_t *)g->B + pl->b * g->bs_b + k * g->rs_b + j0;
						__m512i x0 = _mm512_loadu_si512(r0), x1 = _mm512_loadu_si512(r0 + g->rs_b);
						__m512i lo = _mm512_unpacklo_epi16(x0, x1), hi = _mm512_unpackhi_epi16(x0, x1);

						_mm512_store_si512(d, _mm512_permutex2var_epi64(lo, lo_idx, hi));
						_mm512_store_si512(d + ldt * TILE, _mm512_permutex2var_epi64(lo, hi_idx, hi));
						s++;
						continue;
					}
					const uint8_t *B = (const uint8_t *)g->B + (pl->b * g->bs_b + k * g->rs_b + j0) * es;
					__m512i w = k < K ? group16(B, g->rs_b * es, es, (int)(K - k), (__mmask16)((1u << n) - 1))
							  : _mm512_setzero_si512();

					_mm512_store_si512(d, w);
				}
			}
		return;
	}
	for (int64_t s = s0; s < s1; s++)
		pack_b_strip(pl, s, t0, t1, dst + (s - s0) * ldt * TILE);
}

/* Strip s (columns 16 s ..), k tiles t0 .. t1-1, into its VNNI tiles at dst (B not row-major). */
static void pack_b_strip(const amx_plan_t *pl, int64_t s, int64_t t0, int64_t t1, uint8_t *dst)
{
	const nk_gemm_args_t *g = pl->g;
	int64_t j0 = s * 16, n = nk_min64(16, g->N - j0), K = g->K;
	const uint8_t *B = (const uint8_t *)g->B + (pl->b * g->bs_b + j0 * g->cs_b) * pl->es;
	int es = pl->es, grp = 4 / es;

	if (g->rs_b == 1) {
		/* column-major B (the weight of a linear, W^T): each column's groups are 32-bit words in a row:
		 * 16 columns of 16 words, transposed */
		for (int64_t t = t0; t < t1; t++) {
			__mmask64 mk = bytes_mask((K - t * pl->kt) * es);
			__m512i r[16];

			/* the columns' lines 4 tiles ahead (16 runs a row of W apart: too many streams for the
			 * hardware prefetchers) */
			if (t + 4 < pl->nkt)
				for (int j = 0; j < n; j++)
					_mm_prefetch((const char *)B + (j * g->cs_b + (t + 4) * pl->kt) * es, _MM_HINT_T0);
			for (int j = 0; j < 16; j++)
				r[j] = j < n ? _mm512_maskz_loadu_epi8(mk, B + (j * g->cs_b + t * pl->kt) * es)
					     : _mm512_setzero_si512();
			transpose16(r);
			for (int q = 0; q < 16; q++)
				_mm512_store_si512(dst + (t - t0) * TILE + q * 64, r[q]);
		}
		return;
	}
	/* any other layout: element by element */
	memset(dst, 0, (size_t)((t1 - t0) * TILE));
	for (int64_t j = 0; j < n; j++)
		for (int64_t k = t0 * pl->kt; k < nk_min64(K, t1 * pl->kt); k++)
			memcpy(dst + (k / pl->kt - t0) * TILE + (k % pl->kt) / grp * 64 + j * 4 + (k % grp) * es,
			       B + (k * g->rs_b + j * g->cs_b) * es, (size_t)es);
}

/* Row tile r of the row super block (rows ic + 16 r .., zero rows past M), k tiles t0 .. nkt-1, into
 * dst (tile t at dst + (t - t0) * TILE). */
static void pack_a_tile(const amx_plan_t *pl, int64_t r, int64_t t0, uint8_t *dst)
{
	const nk_gemm_args_t *g = pl->g;
	int64_t i0 = pl->ic + r * 16;
	int es = pl->es, grp = 4 / es, rows = (int)nk_min64(16, g->M - i0);
	const uint8_t *A = (const uint8_t *)g->A + (pl->b * g->bs_a + i0 * g->rs_a) * es;

	for (int64_t t = t0; t < pl->nkt; t++) {
		uint8_t *d = dst + (t - t0) * TILE;
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

/* The A part of the pack job for row tile r: all its tiles (packed A), or with a direct A its k-tail
 * tile (K % kt) or, for the last row tile when M % 16, all its tiles into alast. */
static void pack_a_job(const amx_plan_t *pl, int64_t r)
{
	if (!pl->a_direct)
		pack_a_tile(pl, r, 0, pl->ap + r * pl->nkt * TILE);
	else if (pl->alast && r == pl->rtiles - 1)
		pack_a_tile(pl, r, 0, pl->alast);
	else if (pl->kfull < pl->nkt)
		pack_a_tile(pl, r, pl->kfull, pl->ap + r * TILE);
}

/* The pack job of the row super block: A row tiles t0 .. t1-1 (a direct A: its tails only). */
static void pack_a_tiles(void *ctx, int64_t t0, int64_t t1)
{
	const amx_plan_t *pl = ctx;

	for (int64_t t = t0; t < t1; t++)
		pack_a_job(pl, pl->a_direct && pl->kfull == pl->nkt ? pl->rtiles - 1 : t);
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

/* Where the k tiles of the two A row tiles of a block are, for k tiles [t0, t1): tile t of row tile q
 * at p[q] + t * step[q], its rows rs[q] bytes apart (the source, or packed tiles: rs 64). */
typedef struct {
	const uint8_t *p[2];
	int64_t rs[2], step[2];
	int64_t t0, t1;
} aseg_t;

/* The lines prefetched (into L2) at each k step t: pf[q] + t * pstep[q], q < n (the next row pair's A,
 * spread over the strip pairs of this one). */
typedef struct {
	const char *pf[PF_MAX];
	int64_t pstep[PF_MAX];
	int n;
} apf_t;

/* Vector work done a little at every k step of a tile block, while the tile unit is busy: the epilogue
 * of the previous block (rows of `pend`) and the packing of the B strips the next block needs (k tiles
 * of strips ps .. ps + pns - 1 into pdst, ldt tiles per strip).  Each advances in proportion to the
 * steps, so both are done by the block's last step. */
typedef struct {
	const amx_plan_t *pl;
	const char *pend;         /* NULL: no epilogue */
	int64_t ldc, pi, pm, pj, pn, rows_done;
	uint8_t *pdst;            /* NULL: no packing */
	int64_t ps, pns, pt0, pt1, ldt, tiles_done;
} side_t;

static void side_step(side_t *sd, int64_t u, int64_t steps);

/* A tm x tn block of 16 x 16 tiles (tm, tn in 1..2) of C over the k tiles of the segments: B tile t of
 * the first strip at b + (t - bt0) * TILE (the second at + bstr); c the f32/int32 block (row stride ldc bytes),
 * zeroed instead of loaded when `first`. */
static inline __attribute__((always_inline)) void tile_block(int kind, int tm, int tn, const aseg_t *seg, int nseg,
							     const uint8_t *b, int64_t bt0, int64_t bstr, char *c,
							     int64_t ldc, bool first, const apf_t *pf, side_t *sd)
{
	int64_t u = 0, steps = 0;

	for (int q = 0; q < nseg; q++)
		steps += seg[q].t1 - seg[q].t0;
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
	for (int q = 0; q < nseg; q++) {
		const uint8_t *a0 = seg[q].p[0], *a1 = seg[q].p[1];
		int64_t rs0 = seg[q].rs[0], rs1 = seg[q].rs[1], st0 = seg[q].step[0], st1 = seg[q].step[1];

		/* the order of the optimization manual: each tile is reloaded right after its last reader, so
		 * that the loads of one step overlap the products of the last (tiles are not renamed) */
		for (int64_t t = seg[q].t0; t < seg[q].t1; t++, u++) {
			const uint8_t *bt = b + (t - bt0) * TILE;

			for (int i = 0; i < pf->n; i++)
				_mm_prefetch(pf->pf[i] + t * pf->pstep[i], _MM_HINT_T1);
			_tile_loadd(4, a0 + t * st0, rs0);
			_tile_loadd(6, bt, 64);
			TDP(kind, 0, 4, 6);
			if (tn > 1) {
				_tile_loadd(7, bt + bstr, 64);
				TDP(kind, 1, 4, 7);
			}
			if (tm > 1) {
				_tile_loadd(5, a1 + t * st1, rs1);
				TDP(kind, 2, 5, 6);
				if (tn > 1)
					TDP(kind, 3, 5, 7);
			}
			if (sd)
				side_step(sd, u, steps);
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

#define TILE_BLOCK_KIND(kind)                                                                              \
	static void tile_block_##kind(int tm, int tn, const aseg_t *seg, int nseg, const uint8_t *b, int64_t bt0,  \
				      int64_t bstr, char *c, int64_t ldc, bool first, const apf_t *pf, side_t *sd) \
	{                                                                                                  \
		if (tm == 2 && tn == 2)                                                                    \
			tile_block(kind, 2, 2, seg, nseg, b, bt0, bstr, c, ldc, first, pf, sd);            \
		else if (tm == 2)                                                                          \
			tile_block(kind, 2, 1, seg, nseg, b, bt0, bstr, c, ldc, first, pf, sd);            \
		else if (tn == 2)                                                                          \
			tile_block(kind, 1, 2, seg, nseg, b, bt0, bstr, c, ldc, first, pf, sd);            \
		else                                                                                       \
			tile_block(kind, 1, 1, seg, nseg, b, bt0, bstr, c, ldc, first, pf, sd);            \
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

/* Step u of `steps`: the epilogue rows and packed tiles due by then (all of them at the last step). */
static void side_step(side_t *sd, int64_t u, int64_t steps)
{
	if (sd->pend) {
		int64_t due = (u + 1) * sd->pm / steps;

		if (due > sd->rows_done) {
			store_block(sd->pl, sd->pend + sd->rows_done * sd->ldc, sd->ldc / 4, sd->pi + sd->rows_done,
				    due - sd->rows_done, sd->pj, sd->pn);
			sd->rows_done = due;
		}
	}
	if (sd->pdst) {
		int64_t nt = sd->pt1 - sd->pt0, due = (u + 1) * nt / steps;

		if (due > sd->tiles_done) {
			pack_b(sd->pl, sd->ps, sd->ps + sd->pns, sd->pt0 + sd->tiles_done, sd->pt0 + due,
			       sd->pdst + sd->tiles_done * TILE, sd->ldt);
			sd->tiles_done = due;
		}
	}
}

/* ---- tasks -------------------------------------------------------------------------------------- */

/* Row tile r of the super block, k tiles from the source (!ktail) or the k-tail tile: where they are. */
static inline void a_rowtile(const amx_plan_t *pl, int64_t r, bool ktail, const uint8_t **p, int64_t *rs,
			     int64_t *step)
{
	if (!pl->a_direct) {
		*p = pl->ap + r * pl->nkt * TILE, *rs = 64, *step = TILE;
	} else if (pl->alast && r == pl->rtiles - 1) {
		*p = pl->alast, *rs = 64, *step = TILE;
	} else if (!ktail) {
		*p = pl->asrc + (pl->ic + r * 16) * pl->lda, *rs = pl->lda, *step = 64;
	} else {
		*p = pl->ap + r * TILE, *rs = 64, *step = 0;
	}
}

/* The segments of row tiles r, r + 1 (tm of them) over k tiles [t0, t1): the whole tiles of a direct A,
 * then its packed k tail. */
static int a_segments(const amx_plan_t *pl, int64_t r, int tm, int64_t t0, int64_t t1, aseg_t seg[2])
{
	int n = 0;
	int64_t split = pl->a_direct ? amx_max64(t0, nk_min64(t1, pl->kfull)) : t1;

	for (int part = 0; part < 2; part++) {
		int64_t b0 = part ? split : t0, b1 = part ? t1 : split;

		if (b0 >= b1)
			continue;
		for (int q = 0; q < 2; q++)
			a_rowtile(pl, r + (q < tm ? q : 0), part == 1, &seg[n].p[q], &seg[n].rs[q], &seg[n].step[q]);
		seg[n].t0 = b0, seg[n].t1 = b1;
		n++;
	}
	return n;
}

/* The prefetch of row pair r .. r + tm - 1's A (the next pair) while strip pair sp of nsp runs: rows
 * sp * rpp .. of the pair, so that all its lines are asked for once over the strip pairs. */
static void a_prefetch(const amx_plan_t *pl, int64_t r, int tm, int64_t sp, int64_t nsp, apf_t *pf)
{
	int64_t rpp = nk_min64(PF_MAX, nk_cdiv(32, nsp)), lo = sp * rpp, hi = nk_min64(lo + rpp, 16 * tm);

	pf->n = 0;
	for (int64_t i = lo; i < hi; i++) {
		const uint8_t *p;
		int64_t rs, step;

		a_rowtile(pl, r + i / 16, false, &p, &rs, &step);
		pf->pf[pf->n] = (const char *)p + (i % 16) * rs;
		pf->pstep[pf->n++] = step;
	}
}

/* C's rows of a block, asked for a block before its epilogue writes them (C is usually out of cache). */
static void c_prefetch(const amx_plan_t *pl, int64_t i0, int64_t m, int64_t j0, int64_t n)
{
	const nk_gemm_args_t *g = pl->g;
	int64_t es = pl->kind == KIND_BF16 ? 2 : 4;

	if (g->cs_c != 1)
		return;
	for (int64_t i = 0; i < m; i++) {
		const char *row = (const char *)g->C + (pl->b * g->bs_c + (i0 + i) * g->rs_c + j0) * es;

		__builtin_prefetch(row, 1, 3);
		__builtin_prefetch(row + n * es - 1, 1, 3);
	}
}

/* Task (block column bn, block row bm of the super block): per k slice, the task's B of the slice
 * (at most BBLOCK_BYTES) packed into bbuf, where it stays in L2 while the row pairs stream past: per row
 * pair, per strip pair, one tile block; its 32 x 32 block of C goes through the epilogue after the last
 * slice.  One slice: the block lives only in the tiles and two 4 KiB buffers of acc; several: acc holds
 * the task's f32 (int32) block (row stride nb) between slices. */
static void run_task(const amx_plan_t *pl, char *acc, uint8_t *bbuf, int64_t task)
{
	const nk_gemm_args_t *g = pl->g;
	int64_t bn = task / pl->tasks_m, bm = task % pl->tasks_m;
	int64_t r0 = bm * (pl->mb / 16), mt = nk_min64(pl->mb / 16, pl->rtiles - r0);
	int64_t s0 = bn * (pl->nb / 16), ns = nk_min64(pl->nb / 16, pl->strips - s0);
	int64_t i0 = pl->ic + r0 * 16, j0 = s0 * 16, nsp = nk_cdiv(ns, 2);
	int64_t ldc = pl->nsl > 1 ? pl->nb * 4 : 128;
	apf_t pf;
	/* the epilogue of a block runs during the next block's tile products (its tile stores have then
	 * completed, and the vector work overlaps the tile unit's): one block pending */
	const char *pend = NULL;
	int64_t pi = 0, pm = 0, pj = 0, pn = 0;
	int flip = 0;

	for (int64_t sl = 0; sl < pl->nsl; sl++) {
		int64_t t0 = sl * pl->kts, t1 = nk_min64(pl->nkt, t0 + pl->kts), nt = t1 - t0, bstr = nt * TILE;
		bool first = sl == 0, last = sl == pl->nsl - 1;

		/* the first strip pair now, each of the others during the first row pair's block before it */
		pack_b(pl, s0, s0 + nk_min64(2, ns), t0, t1, bbuf, nt);
		for (int64_t mq = 0; mq < mt; mq += 2) {
			int tm = (int)nk_min64(2, mt - mq), tmn = (int)nk_min64(2, mt - mq - 2);
			aseg_t seg[2];
			int nseg = a_segments(pl, r0 + mq, tm, t0, t1, seg);

			for (int64_t sq = 0; sq < ns; sq += 2) {
				int tn = (int)nk_min64(2, ns - sq);
				const uint8_t *b = bbuf + sq * bstr;
				char *c = pl->nsl > 1 ? acc + (mq * 16 * pl->nb + sq * 16) * 4 : acc + (flip ^= 1) * 32 * 128;
				side_t sd = { .pl = pl };

				if (mq == 0 && sq + 2 < ns)
					sd.pdst = bbuf + (sq + 2) * bstr, sd.ps = s0 + sq + 2, sd.pns = nk_min64(2, ns - sq - 2),
					sd.pt0 = t0, sd.pt1 = t1, sd.ldt = nt;
				if (last && pend)
					sd.pend = pend, sd.ldc = ldc, sd.pi = pi, sd.pm = pm, sd.pj = pj, sd.pn = pn;
				pf.n = 0;
				if (tmn > 0)
					a_prefetch(pl, r0 + mq + 2, tmn, sq / 2, nsp, &pf);
				/* this block's C, a whole block ahead of its epilogue */
				if (last)
					c_prefetch(pl, i0 + mq * 16, nk_min64(32, g->M - i0 - mq * 16), j0 + sq * 16,
						   nk_min64(32, g->N - j0 - sq * 16));
				if (pl->kind == KIND_BF16)
					tile_block_KIND_BF16(tm, tn, seg, nseg, b, t0, bstr, c, ldc, first, &pf,
							     sd.pdst || sd.pend ? &sd : NULL);
				else if (pl->kind == KIND_I8)
					tile_block_KIND_I8(tm, tn, seg, nseg, b, t0, bstr, c, ldc, first, &pf,
							   sd.pdst || sd.pend ? &sd : NULL);
				else
					tile_block_KIND_U8(tm, tn, seg, nseg, b, t0, bstr, c, ldc, first, &pf,
							   sd.pdst || sd.pend ? &sd : NULL);
				if (last) {
					pend = c, pi = i0 + mq * 16, pj = j0 + sq * 16;
					pm = nk_min64(32, g->M - pi), pn = nk_min64(32, g->N - pj);
				}
			}
		}
	}
	if (pend)
		store_block(pl, pend, ldc / 4, pi, pm, pj, pn);
}

static void run_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const amx_plan_t *pl = ctx;
	char *acc = nk_ws_get(NK_WS_GEMM_C, pl->nsl > 1 ? (size_t)(pl->mb * pl->nb * 4) : 2 * 32 * 32 * 4);
	/* the thread's packed B block (the A slot: this thread packs no A panel of its own here) */
	uint8_t *bbuf = nk_ws_get(NK_WS_GEMM_A, (size_t)(pl->nb / 16 * pl->kts * TILE));

	if (!acc || !bbuf) {
		atomic_store(pl->failed, 1);
		return;
	}
	tiles_config();
	for (int64_t t = t0; t < t1; t++)
		run_task(pl, acc, bbuf, t);
	_tile_release();
}

/* Task blocks of the super block: columns nb (the B of a slice within BBLOCK_BYTES), rows mb (all of
 * them), split further while there are fewer than 2 tasks per thread or the tasks do not share out
 * evenly (then up to 4 per thread).  Each task packs its B block and streams its rows' A, so a split of
 * rows packs B again and a split of columns reads A again: the split goes to the smaller operand's side
 * (columns when A has no more rows than B has columns). */
static void plan_tasks(amx_plan_t *pl, bool par, int64_t nt)
{
	int64_t nb_max = nk_min64(NB_MAX, amx_max64(32, BBLOCK_BYTES / (pl->kts * TILE) * 16 / 32 * 32));
	int64_t rows = pl->rtiles * 16, rpairs = nk_cdiv(pl->rtiles, 2), cpairs = nk_cdiv(pl->strips, 2);
	int64_t ncb = nk_cdiv(pl->g->N, nb_max), nrb = 1;

	while (par && (ncb * nrb < 2 * nt || ((ncb * nrb) % nt && ncb * nrb < 4 * nt))) {
		bool cols = rows <= pl->g->N ? ncb < cpairs : nrb >= rpairs;

		if (cols && ncb < cpairs)
			ncb++;
		else if (nrb < rpairs)
			nrb++;
		else
			break;
	}
	pl->mb = nk_cdiv(nk_cdiv(rows, nrb), 32) * 32;
	pl->nb = nk_cdiv(nk_cdiv(pl->g->N, ncb), 32) * 32;
	pl->tasks_m = nk_cdiv(pl->rtiles, pl->mb / 16);
	pl->tasks_n = nk_cdiv(pl->strips, pl->nb / 16);
}

/* The whole GEMM: per batch entry and row super block (packed A of at most SUPER_BYTES, all of K; a
 * direct A packs only its tails and has one row super block), A packed over the pool, then the tasks. */
static int amx_gemm(const nk_gemm_args_t *g, int kind)
{
	atomic_int failed = 0;
	amx_plan_t pl = {
		.g = g,
		.kind = kind,
		.es = kind == KIND_BF16 ? 2 : 1,
		.alpha = (float)g->alpha,
		.beta = (float)g->beta,
		.failed = &failed,
	};
	int64_t macs = g->M * g->N * g->K, tile_row, sm, nt = nrt_num_threads(), abytes;
	bool par = macs >= PAR_MIN_MACS && nt > 1;

	pl.kt = 64 / pl.es;
	pl.nkt = nk_cdiv(g->K, pl.kt);
	pl.kfull = g->K / pl.kt;
	pl.nsl = nk_cdiv(pl.nkt, KS_TILES);
	pl.kts = nk_cdiv(pl.nkt, pl.nsl);
	pl.strips = nk_cdiv(g->N, 16);
	/* tiles straight from A when its rows are whole cache lines (a tile row across two lines costs two
	 * loads: measured 1.5x slower than packing first) */
	pl.a_direct = g->cs_a == 1 && pl.kfull > 0 && (g->rs_a * pl.es) % 64 == 0 && (uintptr_t)g->A % 64 == 0 &&
		      (g->batch == 1 || (g->bs_a * pl.es) % 64 == 0);
	pl.lda = g->rs_a * pl.es;
	tile_row = pl.nkt * TILE; /* bytes of one packed row tile */
	sm = nk_cdiv(g->M, 16) * 16;
	if (!pl.a_direct)
		sm = amx_max64(nk_min64(32, sm), nk_min64(sm, SUPER_BYTES / (tile_row * 2) * 32));
	abytes = pl.a_direct ? (sm / 16 + (g->M % 16 ? pl.nkt : 0)) * TILE : sm / 16 * tile_row;
	pl.ap = nk_ws_get(NK_WS_GEMM_B, (size_t)abytes);
	if (!pl.ap) {
		nrt_kernel_fail("gemm: out of host memory for the packing workspace");
		return -1;
	}
	pl.alast = pl.a_direct && g->M % 16 ? pl.ap + sm / 16 * TILE : NULL;
	for (int64_t b = 0; b < g->batch; b++)
		for (int64_t ic = 0; ic < g->M; ic += sm) {
			int64_t ntasks, npack;

			pl.b = b, pl.ic = ic;
			pl.asrc = (const uint8_t *)g->A + b * g->bs_a * pl.es;
			pl.rtiles = nk_cdiv(nk_min64(sm, g->M - ic), 16);
			plan_tasks(&pl, par, nt);
			ntasks = pl.tasks_m * pl.tasks_n;
			npack = !pl.a_direct || pl.kfull < pl.nkt ? pl.rtiles : pl.alast ? 1 : 0;
			if (par) {
				nrt_parallel_for(npack, 1, pack_a_tiles, &pl);
				nrt_parallel_for(ntasks, 1, run_tasks, &pl);
			} else {
				pack_a_tiles(&pl, 0, npack);
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
