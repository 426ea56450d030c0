/* test_ccl.c - the collectives library (csrc/ccl): the reduction core against a scalar reference for
 * every dtype and op, then every collective between fork()ed ranks over a real shared segment with a
 * small chunk (so that every call takes several rounds): exact expected values, in place and out of
 * place, mismatched calls, a timed-out and a killed peer, and no segment left in /dev/shm. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctest.h"
#pragma GCC diagnostic ignored "-Wformat-zero-length"
#include "ncl.h"

#define CHUNK 4096
#define TMO 10000

/* ---- the reduction core ------------------------------------------------------------------------- */
static double ref_combine(double a, double b, ncl_redop_t op)
{
	switch (op) {
	case NCL_PROD: return a * b;
	case NCL_MAX: return a > b ? a : b;
	case NCL_MIN: return a < b ? a : b;
	case NCL_BAND: return (double)((int64_t)a & (int64_t)b);
	case NCL_BOR: return (double)((int64_t)a | (int64_t)b);
	case NCL_BXOR: return (double)((int64_t)a ^ (int64_t)b);
	default: return a + b;
	}
}

static void put(void *p, ncl_dtype_t dt, size_t i, double v)
{
	switch (dt) {
	case NCL_F32: ((float *)p)[i] = (float)v; break;
	case NCL_F64: ((double *)p)[i] = v; break;
	case NCL_F16: { _Float16 h = (_Float16)v; memcpy((char *)p + 2 * i, &h, 2); break; }
	case NCL_BF16: { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); uint16_t h = (uint16_t)(u >> 16); memcpy((char *)p + 2 * i, &h, 2); break; }
	case NCL_I8: ((int8_t *)p)[i] = (int8_t)v; break;
	case NCL_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
	case NCL_BOOL: ((uint8_t *)p)[i] = v != 0; break;
	case NCL_I16: ((int16_t *)p)[i] = (int16_t)v; break;
	case NCL_I32: ((int32_t *)p)[i] = (int32_t)v; break;
	default: ((int64_t *)p)[i] = (int64_t)v; break;
	}
}

static double get(const void *p, ncl_dtype_t dt, size_t i)
{
	switch (dt) {
	case NCL_F32: return ((const float *)p)[i];
	case NCL_F64: return ((const double *)p)[i];
	case NCL_F16: { _Float16 h; memcpy(&h, (const char *)p + 2 * i, 2); return (double)h; }
	case NCL_BF16: { uint16_t h; memcpy(&h, (const char *)p + 2 * i, 2); uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
	case NCL_I8: return ((const int8_t *)p)[i];
	case NCL_U8: return ((const uint8_t *)p)[i];
	case NCL_BOOL: return ((const uint8_t *)p)[i];
	case NCL_I16: return ((const int16_t *)p)[i];
	case NCL_I32: return ((const int32_t *)p)[i];
	default: return (double)((const int64_t *)p)[i];
	}
}

/* Small integer values (exact in every dtype, products included) from rank k and element i. */
static double val(int k, size_t i, ncl_dtype_t dt)
{
	if (dt == NCL_BOOL)
		return (double)((i + (size_t)k) % 3 == 0);
	return (double)((int)((i * 7 + (size_t)k * 3) % 9) - (dt == NCL_U8 ? 0 : 4));
}

static void test_reduce_core(void)
{
	enum { N = 1100, MAXS = 4 };
	static unsigned char src[MAXS][N * 8], dst[N * 8];

	for (int dt = 0; dt < NCL_NDTYPES; dt++)
		for (int op = 0; op < NCL_NOPS; op++)
			for (int ns = 1; ns <= MAXS; ns++) {
				const void *srcs[MAXS];
				int bad = 0;

				if (!ncl_redop_supported(op, dt)) {
					srcs[0] = src[0];
					CHECK(ncl_reduce_buffers(dst, srcs, 1, 4, dt, op, 1.0) == NCL_ERR_INVALID,
					      "%s %s accepted", ncl_dtype_name(dt), ncl_redop_name(op));
					continue;
				}
				for (int k = 0; k < ns; k++) {
					for (size_t i = 0; i < N; i++)
						put(src[k], dt, i, val(k, i, dt));
					srcs[k] = src[k];
				}
				CHECK(ncl_reduce_buffers(dst, srcs, ns, N, dt, op, 0.5) == 0, "%s", ncl_last_error());
				for (size_t i = 0; i < N && bad < 3; i++) {
					double want = val(0, i, dt) * (op == NCL_PREMUL_SUM ? 0.5 : 1);

					for (int k = 1; k < ns; k++) {
						double v = val(k, i, dt) * (op == NCL_PREMUL_SUM ? 0.5 : 1);
						want = dt == NCL_BOOL && op != NCL_BXOR
						    ? (op == NCL_PROD || op == NCL_MIN || op == NCL_BAND ? (want && v) : (want || v))
						    : ref_combine(want, v, op == NCL_PREMUL_SUM || op == NCL_AVG ? NCL_SUM : op);
					}
					if (op == NCL_AVG)
						want /= ns;
					if (dt == NCL_I8 || dt == NCL_U8 || dt == NCL_BOOL) { /* wrap like the dtype */
						unsigned char tmp[8];
						put(tmp, dt, 0, want);
						want = get(tmp, dt, 0);
					}
					if (dt == NCL_BF16 || dt == NCL_F16 || dt == NCL_F32) {
						unsigned char tmp[8];
						put(tmp, dt, 0, want);
						want = get(tmp, dt, 0);
					}
					if (get(dst, dt, i) != want) {
						bad++;
						CHECK(0, "%s %s nsrc %d [%zu]: got %g want %g", ncl_dtype_name(dt),
						      ncl_redop_name(op), ns, i, get(dst, dt, i), want);
					}
				}
			}
}

static void test_reduce_alias_and_rounding(void)
{
	float a[600], b[600];
	const void *srcs[2] = { a, b };
	uint16_t h[3][1];
	const void *hs[3] = { h[0], h[1], h[2] };

	for (int i = 0; i < 600; i++)
		a[i] = (float)i, b[i] = (float)(2 * i);
	CHECK(ncl_reduce_buffers(b, srcs, 2, 600, NCL_F32, NCL_SUM, 1.0) == 0); /* dst aliases a source */
	for (int i = 0; i < 600; i++)
		CHECK(b[i] == 3.0f * (float)i, "[%d] %g", i, b[i]);
	/* bf16 accumulates in f32 and rounds once: 256 + 1 + 1 = 258 (pairwise rounding would give 256) */
	put(h[0], NCL_BF16, 0, 256.0);
	put(h[1], NCL_BF16, 0, 1.0);
	put(h[2], NCL_BF16, 0, 1.0);
	CHECK(ncl_reduce_buffers(h[0], hs, 3, 1, NCL_BF16, NCL_SUM, 1.0) == 0);
	CHECK(get(h[0], NCL_BF16, 0) == 258.0, "%g", get(h[0], NCL_BF16, 0));
	/* NaN propagates through MAX and MIN */
	a[0] = NAN, b[0] = 1.0f;
	CHECK(ncl_reduce_buffers(a, srcs, 2, 1, NCL_F32, NCL_MAX, 1.0) == 0 && isnan(a[0]));
	a[0] = 1.0f, b[0] = NAN;
	CHECK(ncl_reduce_buffers(a, srcs, 2, 1, NCL_F32, NCL_MIN, 1.0) == 0 && isnan(a[0]));
}

/* ---- fork()ed ranks ------------------------------------------------------------------------------ */
typedef void (*rank_fn)(ncl_comm_t *c, int rank, int n);
static char seg_name[64];

static bool shm_exists(const char *name)
{
	int fd = shm_open(name, O_RDONLY, 0);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* Runs fn on n ranks: rank 0 in this process, ranks 1..n-1 in children.  Returns the children's pids in
 * pids (for tests that kill one); waits for them unless nowait. */
static void run_ranks(int n, rank_fn fn)
{
	static int serial;
	pid_t pids[8];
	ncl_comm_t *c = NULL;

	snprintf(seg_name, sizeof seg_name, "/tn-ncl-test-%d-%d", (int)getpid(), ++serial);
	CHECK(ncl_comm_create(seg_name, n, CHUNK, &c) == 0, "%s", ncl_last_error());
	if (!c)
		return;
	fflush(stdout);
	fflush(stderr);
	for (int r = 1; r < n; r++) {
		pids[r] = fork();
		if (pids[r] == 0) {
			ncl_comm_t *cc = NULL;

			ctest_failures = 0;
			CHECK(ncl_comm_attach(seg_name, r, n, &cc) == 0, "%s", ncl_last_error());
			if (cc) {
				CHECK(ncl_comm_ready(cc, TMO) == 0, "%s", ncl_last_error());
				fn(cc, r, n);
				ncl_comm_destroy(cc);
			}
			_exit(ctest_failures > 100 ? 100 : ctest_failures);
		}
	}
	CHECK(ncl_comm_ready(c, TMO) == 0, "%s", ncl_last_error());
	CHECK(!shm_exists(seg_name), "segment %s still linked after ready", seg_name);
	fn(c, 0, n);
	for (int r = 1; r < n; r++) {
		int st = 0;

		waitpid(pids[r], &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: %s %d", r,
		      WIFEXITED(st) ? "failures" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	}
	ncl_comm_destroy(c);
	CHECK(!shm_exists(seg_name));
}

static void ranks_all_reduce(ncl_comm_t *c, int rank, int n)
{
	static const ncl_dtype_t dts[] = { NCL_F32, NCL_BF16, NCL_F16, NCL_F64, NCL_I32, NCL_I64, NCL_U8, NCL_BOOL };
	enum { N = 3001 }; /* f32: 3 rounds of a 4 KiB chunk */
	static unsigned char in[N * 8], out[N * 8];

	for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
		for (int op = 0; op < NCL_NOPS; op++) {
			ncl_dtype_t dt = dts[t];
			int bad = 0;
			bool inplace = (op & 1) != 0;

			if (!ncl_redop_supported(op, dt))
				continue;
			for (size_t i = 0; i < N; i++)
				put(in, dt, i, val(rank, i, dt));
			CHECK(ncl_all_reduce(c, in, inplace ? in : out, N, dt, op, 0.5, NCL_CALL(TMO)) == 0, "%s",
			      ncl_last_error());
			for (size_t i = 0; i < N && bad < 3; i++) {
				double want = val(0, i, dt) * (op == NCL_PREMUL_SUM ? 0.5 : 1);
				unsigned char tmp[8];

				for (int k = 1; k < n; k++) {
					double v = val(k, i, dt) * (op == NCL_PREMUL_SUM ? 0.5 : 1);
					want = dt == NCL_BOOL && op != NCL_BXOR
					    ? (op == NCL_PROD || op == NCL_MIN || op == NCL_BAND ? (want && v) : (want || v))
					    : ref_combine(want, v, op == NCL_PREMUL_SUM || op == NCL_AVG ? NCL_SUM : op);
				}
				if (op == NCL_AVG)
					want /= n;
				put(tmp, dt, 0, want);
				want = get(tmp, dt, 0);
				if (get(inplace ? in : out, dt, i) != want) {
					bad++;
					CHECK(0, "rank %d all_reduce %s %s [%zu]: got %g want %g", rank, ncl_dtype_name(dt),
					      ncl_redop_name(op), i, get(inplace ? in : out, dt, i), want);
				}
			}
		}
}

static void ranks_copies(ncl_comm_t *c, int rank, int n)
{
	enum { N = 2500 };
	static int32_t buf[N], in[N], all[8][N], blocks[8][N], got[N];
	void *recvs[8];
	const void *sends[8];
	int bad = 0;
	uint64_t seq0 = ncl_comm_last_seq(c);

	/* broadcast from the last rank */
	for (int i = 0; i < N; i++)
		buf[i] = rank == n - 1 ? i * 3 + 1 : -1;
	CHECK(ncl_broadcast(c, buf, N, NCL_I32, n - 1, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	for (int i = 0; i < N && bad < 3; i++)
		if (buf[i] != i * 3 + 1)
			{ bad++; CHECK(0, "rank %d broadcast [%d] = %d", rank, i, buf[i]); }
	/* all_gather */
	for (int i = 0; i < N; i++)
		in[i] = rank * 100000 + i;
	for (int p = 0; p < n; p++)
		recvs[p] = all[p];
	CHECK(ncl_all_gather(c, in, recvs, N, NCL_I32, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	for (int p = 0; p < n; p++)
		for (int i = 0; i < N && bad < 6; i++)
			if (all[p][i] != p * 100000 + i)
				{ bad++; CHECK(0, "rank %d all_gather [%d][%d] = %d", rank, p, i, all[p][i]); }
	/* gather to rank 1 */
	memset(all, 0, sizeof all);
	CHECK(ncl_gather(c, in, rank == 1 ? recvs : NULL, N, NCL_I32, 1, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	if (rank == 1)
		for (int p = 0; p < n; p++)
			CHECK(all[p][N - 1] == p * 100000 + N - 1 && all[p][0] == p * 100000);
	/* reduce_scatter: block q of rank p holds p + q*1000 + i; rank q gets sum_p */
	for (int q = 0; q < n; q++) {
		for (int i = 0; i < N; i++)
			blocks[q][i] = rank + q * 1000 + i;
		sends[q] = blocks[q];
	}
	CHECK(ncl_reduce_scatter(c, sends, got, N, NCL_I32, NCL_SUM, 1.0, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	for (int i = 0; i < N && bad < 9; i++) {
		int want = n * (n - 1) / 2 + n * (rank * 1000 + i);
		if (got[i] != want)
			{ bad++; CHECK(0, "rank %d reduce_scatter [%d] = %d want %d", rank, i, got[i], want); }
	}
	/* scatter from rank 0 */
	memset(got, 0, sizeof got);
	CHECK(ncl_scatter(c, rank == 0 ? sends : NULL, got, N, NCL_I32, 0, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	CHECK(got[0] == rank * 1000 && got[N - 1] == rank * 1000 + N - 1, "rank %d scatter %d", rank, got[0]);
	/* reduce (MAX) to rank 0 */
	CHECK(ncl_reduce(c, in, rank == 0 ? got : NULL, N, NCL_I32, NCL_MAX, 1.0, 0, NCL_CALL(TMO)) == 0, "%s",
	      ncl_last_error());
	if (rank == 0)
		CHECK(got[5] == (n - 1) * 100000 + 5);
	/* all_to_all with uneven counts: rank p sends p + q + 1 (times 300) elements to rank q */
	{
		size_t sc[8], rc[8];
		for (int q = 0; q < n; q++) {
			sc[q] = (size_t)(rank + q + 1) * 300;
			rc[q] = (size_t)(q + rank + 1) * 300;
			for (size_t i = 0; i < sc[q]; i++)
				blocks[q][i] = rank * 10000 + q * 1000 + (int)i;
			sends[q] = blocks[q];
			recvs[q] = all[q];
		}
		CHECK(ncl_all_to_all(c, sends, sc, recvs, rc, NCL_I32, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
		for (int p = 0; p < n; p++)
			for (size_t i = 0; i < rc[p] && bad < 12; i++)
				if (all[p][i] != p * 10000 + rank * 1000 + (int)i)
					{ bad++; CHECK(0, "rank %d all_to_all [%d][%zu] = %d", rank, p, i, all[p][i]); }
	}
	CHECK(ncl_barrier(c, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	CHECK(ncl_comm_last_seq(c) == seq0 + 8, "seq %llu", (unsigned long long)ncl_comm_last_seq(c));
}

static void ranks_p2p(ncl_comm_t *c, int rank, int n)
{
	enum { N = 70000 }; /* 280 KB: several 64 KiB p2p chunks */
	static int32_t buf[N];
	int peer = 1 - rank;

	if (rank > 1)
		return;
	for (int round = 0; round < 2; round++) {
		bool sender = (rank == 0) == (round == 0);

		if (sender) {
			for (int i = 0; i < N; i++)
				buf[i] = i ^ round;
			CHECK(ncl_send(c, buf, N, NCL_I32, peer, 7, TMO) == 0, "%s", ncl_last_error());
			CHECK(ncl_send(c, buf, 3, NCL_I32, peer, 8, TMO) == 0, "%s", ncl_last_error());
		} else {
			memset(buf, 0, sizeof buf);
			CHECK(ncl_recv(c, buf, N, NCL_I32, peer, 7, TMO) == 0, "%s", ncl_last_error());
			CHECK(buf[0] == round && buf[N - 1] == ((N - 1) ^ round));
			CHECK(ncl_recv(c, buf, 3, NCL_I32, peer, 8, TMO) == 0, "%s", ncl_last_error());
		}
	}
	CHECK(ncl_send(c, buf, 1, NCL_I32, rank, 0, TMO) == NCL_ERR_INVALID); /* self */
	CHECK(ncl_send(c, buf, 1, NCL_I32, n, 0, TMO) == NCL_ERR_INVALID);    /* out of range */
}

static void ranks_mismatch(ncl_comm_t *c, int rank, int n)
{
	float x[64] = { 0 };
	int rc = ncl_all_reduce(c, x, x, rank == 0 ? 10 : 20, NCL_F32, NCL_SUM, 1.0, NCL_CALL(TMO));

	CHECK(rc == NCL_ERR_MISMATCH || rc == NCL_ERR_PEER, "rank %d rc %d", rank, rc);
	CHECK(strstr(ncl_last_error(), "seq 1") != NULL, "%s", ncl_last_error());
	/* the communicator is broken from now on */
	CHECK(ncl_barrier(c, NCL_CALL(TMO)) != 0);
}

static void ranks_timeout(ncl_comm_t *c, int rank, int n)
{
	if (rank == 0) {
		int64_t t0 = (int64_t)time(NULL);
		int rc = ncl_barrier(c, NCL_CALL(300));

		CHECK(rc == NCL_ERR_TIMEOUT, "rc %d: %s", rc, ncl_last_error());
		CHECK(strstr(ncl_last_error(), "rank 1") != NULL, "%s", ncl_last_error());
		CHECK((int64_t)time(NULL) - t0 < 5);
		/* the rank's last collectives: the ready barrier's predecessors if any, then this one */
		CHECK(strstr(ncl_last_error(), "[last collectives of rank 0, oldest first:") &&
		      strstr(ncl_last_error(), "barrier 0 x uint8 failed (") && strstr(ncl_last_error(), "]"),
		      "%s", ncl_last_error());
	} else {
		/* arrives late: sees rank 0's failure instead of hanging */
		usleep(600000);
		CHECK(ncl_barrier(c, NCL_CALL(TMO)) == NCL_ERR_PEER, "%s", ncl_last_error());
	}
}

static void ranks_killed(ncl_comm_t *c, int rank, int n)
{
	float x[16] = { 0 };

	if (rank == 1) {
		CHECK(ncl_barrier(c, NCL_CALL(TMO)) == 0);
		kill(getpid(), SIGKILL);
	}
	CHECK(ncl_barrier(c, NCL_CALL(TMO)) == 0);
	{
		int64_t t0 = (int64_t)time(NULL);
		int rc = ncl_all_reduce(c, x, x, 16, NCL_F32, NCL_SUM, 1.0, NCL_CALL(TMO));

		CHECK(rc == NCL_ERR_PEER, "rc %d: %s", rc, ncl_last_error());
		CHECK(strstr(ncl_last_error(), "rank 1") && strstr(ncl_last_error(), "died"), "%s", ncl_last_error());
		CHECK((int64_t)time(NULL) - t0 < 5, "took %lld s", (long long)((int64_t)time(NULL) - t0));
	}
}

/* ---- the direct path (direct.c) -------------------------------------------------------------------- */
/* Calls of many 64 KiB pieces, sizes that are multiples of neither the piece nor the group size. */
static void ranks_direct_large(ncl_comm_t *c, int rank, int n)
{
	enum { N = 100003, M = 33331 };
	static float a[N], b[N];
	static uint16_t h[N];
	static int32_t blk[3][M], got[M];
	static int64_t all[3][M];
	static double d[N];
	const void *sends[3];
	void *recvs[3];
	int bad = 0;

	for (int i = 0; i < N; i++) {
		a[i] = (float)(rank + 1 + i % 7);
		put(h, NCL_BF16, (size_t)i, (double)((rank * 3 + i) % 11));
		d[i] = rank == n - 1 ? i * 0.5 : -1;
	}
	CHECK(ncl_all_reduce(c, a, b, N, NCL_F32, NCL_SUM, 1.0, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	for (int i = 0; i < N && bad < 3; i++)
		if (b[i] != (float)(n * (n + 1) / 2 + n * (i % 7)))
			{ bad++; CHECK(0, "rank %d direct all_reduce [%d] = %g", rank, i, b[i]); }
	CHECK(ncl_all_reduce(c, h, h, N, NCL_BF16, NCL_MAX, 1.0, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	for (int i = 0; i < N && bad < 6; i++) {
		double want = 0;
		for (int k = 0; k < n; k++)
			want = fmax(want, (double)((k * 3 + i) % 11));
		if (get(h, NCL_BF16, (size_t)i) != want)
			{ bad++; CHECK(0, "rank %d direct bf16 max [%d] = %g want %g", rank, i, get(h, NCL_BF16, (size_t)i), want); }
	}
	for (int q = 0; q < n; q++) {
		for (int i = 0; i < M; i++)
			blk[q][i] = rank * 7 + q * 1000 + i;
		sends[q] = blk[q];
	}
	CHECK(ncl_reduce_scatter(c, sends, got, M, NCL_I32, NCL_SUM, 1.0, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	for (int i = 0; i < M && bad < 9; i++)
		if (got[i] != 7 * n * (n - 1) / 2 + n * (rank * 1000 + i))
			{ bad++; CHECK(0, "rank %d direct reduce_scatter [%d] = %d", rank, i, got[i]); }
	/* all_gather in place: this rank's input is its own block of the output */
	for (int p = 0; p < n; p++)
		for (int i = 0; i < M; i++)
			all[p][i] = p == rank ? (int64_t)rank << 40 | i : -1;
	for (int p = 0; p < n; p++)
		recvs[p] = all[p];
	CHECK(ncl_all_gather(c, all[rank], recvs, M, NCL_I64, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	for (int p = 0; p < n; p++)
		for (int i = 0; i < M && bad < 12; i++)
			if (all[p][i] != ((int64_t)p << 40 | i))
				{ bad++; CHECK(0, "rank %d direct all_gather [%d][%d]", rank, p, i); }
	CHECK(ncl_broadcast(c, d, N, NCL_F64, n - 1, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	for (int i = 0; i < N && bad < 15; i++)
		if (d[i] != i * 0.5)
			{ bad++; CHECK(0, "rank %d direct broadcast [%d] = %g", rank, i, d[i]); }
	CHECK(ncl_comm_direct(c));
}

/* Every collective again, each call that can going direct (NEURON_CCL_DIRECT_MIN=1 at create). */
static void ranks_direct(ncl_comm_t *c, int rank, int n)
{
	uint64_t before;

	ranks_all_reduce(c, rank, n);
	ranks_copies(c, rank, n);
	before = ncl_comm_direct_calls(c);
	CHECK(before >= 4, "rank %d: only %llu direct calls", rank, (unsigned long long)before);
	ranks_direct_large(c, rank, n);
	CHECK(ncl_comm_direct_calls(c) == before + 5, "rank %d: %llu direct calls", rank,
	      (unsigned long long)ncl_comm_direct_calls(c));
}

/* A mismatch, and a peer killed before a direct call, are errors as on the staged path. */
static void ranks_direct_faults(ncl_comm_t *c, int rank, int n)
{
	static float x[50000];
	int64_t t0;
	int rc;

	if (rank == 1) {
		CHECK(ncl_barrier(c, NCL_CALL(TMO)) == 0);
		kill(getpid(), SIGKILL);
	}
	CHECK(ncl_barrier(c, NCL_CALL(TMO)) == 0);
	t0 = (int64_t)time(NULL);
	rc = ncl_all_reduce(c, x, x, 50000, NCL_F32, NCL_SUM, 1.0, NCL_CALL(TMO));
	CHECK(rc == NCL_ERR_PEER, "rc %d: %s", rc, ncl_last_error());
	CHECK(strstr(ncl_last_error(), "rank 1") && strstr(ncl_last_error(), "died"), "%s", ncl_last_error());
	CHECK((int64_t)time(NULL) - t0 < 5);
}

static void ranks_direct_mismatch(ncl_comm_t *c, int rank, int n)
{
	static float x[50000];
	int rc = ncl_all_reduce(c, x, x, 40000, NCL_F32, rank == 0 ? NCL_SUM : NCL_MAX, 1.0, NCL_CALL(TMO));

	CHECK(rc == NCL_ERR_MISMATCH || rc == NCL_ERR_PEER, "rank %d rc %d", rank, rc);
	CHECK(strstr(ncl_last_error(), "seq 1") != NULL, "%s", ncl_last_error());
}

/* The reductions' work queues: a rank that claims nothing (cap 0) leaves its queue to its peers, which
 * must drain it; the results stay bitwise the rank-order ones (bf16 summed in f32, rounded once). */
static uint16_t bf16_of(float f) /* round to nearest even (finite values) */
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float f32_of(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* A bf16 value of rank k at element i whose sums need more than bf16's 8 bits. */
static uint16_t bf16_val(int k, size_t i)
{
	uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(k * 40503u);

	return bf16_of((float)((int)(x % 2001) - 1000) / 7.0f + (k == 1 ? 256.0f : 0.0f));
}

static size_t pieces_of(size_t bytes, size_t piece)
{
	return (bytes + piece - 1) / piece;
}

static void ranks_direct_steal(ncl_comm_t *c, int rank, int n)
{
	enum { N = 200003, M = 70001, G = 100001, B = 90001, A = 70001 };
	static int32_t a2a_in[3][5 * A], a2a_out[3][5 * A];
	static float a[N], b[N];
	static int64_t all[3][G], mine64[G];
	static double d[B];
	static uint16_t h[N];
	static int32_t blk[3][M], got[M];
	const void *sends[3];
	uint64_t before = ncl_comm_direct_pieces(c), mine, total = 0, want_pieces = 0;
	int64_t cnt;
	int bad = 0;

	ncl_comm_test_claim_cap(c, rank == 1 ? 0 : UINT64_MAX);
	for (int i = 0; i < N; i++) {
		a[i] = (float)(rank + 1 + i % 5);
		b[i] = -1;
		h[i] = bf16_val(rank, (size_t)i);
	}
	CHECK(ncl_all_reduce(c, a, b, N, NCL_F32, NCL_SUM, 1.0, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	for (int i = 0; i < N && bad < 3; i++)
		if (b[i] != (float)(n * (n + 1) / 2 + n * (i % 5)))
			{ bad++; CHECK(0, "rank %d stolen all_reduce [%d] = %g", rank, i, b[i]); }
	CHECK(ncl_all_reduce(c, h, h, N, NCL_BF16, NCL_SUM, 1.0, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	for (int i = 0; i < N && bad < 6; i++) {
		float acc = f32_of(bf16_val(0, (size_t)i));

		for (int k = 1; k < n; k++)
			acc += f32_of(bf16_val(k, (size_t)i));
		if (h[i] != bf16_of(acc))
			{ bad++; CHECK(0, "rank %d stolen bf16 sum [%d] = %04x want %04x", rank, i, h[i], bf16_of(acc)); }
	}
	for (int q = 0; q < n; q++) {
		for (int i = 0; i < M; i++)
			blk[q][i] = rank * 5 + q * 100 + i;
		sends[q] = blk[q];
	}
	CHECK(ncl_reduce_scatter(c, sends, got, M, NCL_I32, NCL_SUM, 1.0, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	for (int i = 0; i < M && bad < 9; i++)
		if (got[i] != 5 * n * (n - 1) / 2 + n * (rank * 100 + i))
			{ bad++; CHECK(0, "rank %d stolen reduce_scatter [%d] = %d", rank, i, got[i]); }
	/* all_gather out of place and in place, and broadcast from rank 0 and from rank 1: with rank 1
	 * claiming nothing, rank 0 pushes its block (its buffer) to rank 1, and the peers pull rank 1's */
	for (int inplace = 0; inplace < 2; inplace++) {
		void *recvs[3];

		for (int p = 0; p < n; p++) {
			for (int i = 0; i < G; i++)
				all[p][i] = p == rank ? (int64_t)rank << 40 | i : -1;
			recvs[p] = all[p];
		}
		for (int i = 0; i < G; i++)
			mine64[i] = (int64_t)rank << 40 | i;
		CHECK(ncl_all_gather(c, inplace ? all[rank] : mine64, recvs, G, NCL_I64, NCL_CALL(TMO)) == 0, "%s",
		      ncl_last_error());
		for (int p = 0; p < n; p++)
			for (int i = 0; i < G && bad < 12; i++)
				if (all[p][i] != ((int64_t)p << 40 | i))
					{ bad++; CHECK(0, "rank %d stolen all_gather (in place %d) [%d][%d]", rank, inplace, p, i); }
	}
	for (int root = 0; root < 2; root++) {
		for (int i = 0; i < B; i++)
			d[i] = rank == root ? i * 0.25 + root : -1;
		CHECK(ncl_broadcast(c, d, B, NCL_F64, root, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
		for (int i = 0; i < B && bad < 15; i++)
			if (d[i] != i * 0.25 + root)
				{ bad++; CHECK(0, "rank %d stolen broadcast from %d [%d] = %g", rank, root, i, d[i]); }
	}
	want_pieces += 2 * (size_t)n * (n - 1) * pieces_of((size_t)G * 8, 256 << 10) +
		       2 * (size_t)(n - 1) * pieces_of((size_t)B * 8, 256 << 10);
	/* all_to_all with uneven counts: rank p sends (p + q + 1) * A elements to rank q */
	{
		size_t sc[3], rc[3];
		void *recvs[3];
		uint64_t calls = ncl_comm_direct_calls(c);

		for (int q = 0; q < n; q++) {
			sc[q] = (size_t)(rank + q + 1) * A;
			rc[q] = (size_t)(q + rank + 1) * A;
			for (size_t i = 0; i < sc[q]; i++)
				a2a_in[q][i] = rank * 1000000 + q * 100000 + (int)i % 100000;
			sends[q] = a2a_in[q];
			recvs[q] = a2a_out[q];
		}
		CHECK(ncl_all_to_all(c, sends, sc, recvs, rc, NCL_I32, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
		CHECK(ncl_comm_direct_calls(c) == calls + 1);
		for (int p = 0; p < n; p++)
			for (size_t i = 0; i < rc[p] && bad < 18; i++)
				if (a2a_out[p][i] != p * 1000000 + rank * 100000 + (int)i % 100000)
					{ bad++; CHECK(0, "rank %d stolen all_to_all [%d][%zu] = %d", rank, p, i, a2a_out[p][i]); }
		for (int p = 0; p < n; p++)
			for (int q = 0; q < n; q++)
				if (p != q)
					want_pieces += pieces_of((size_t)(p + q + 1) * A * 4, 256 << 10);
		/* in place (every block its own output): the single pass cannot, so it stages, rightly */
		for (int q = 0; q < n; q++) {
			sc[q] = rc[q] = A;
			for (size_t i = 0; i < A; i++)
				a2a_in[q][i] = rank * 1000000 + q * 100000 + (int)i % 100000;
			recvs[q] = a2a_in[q];
		}
		CHECK(ncl_all_to_all(c, sends, sc, recvs, rc, NCL_I32, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
		CHECK(ncl_comm_direct_calls(c) == calls + 1, "in-place all_to_all went direct");
		for (int p = 0; p < n; p++)
			for (size_t i = 0; i < A && bad < 21; i++)
				if (a2a_in[p][i] != p * 1000000 + rank * 100000 + (int)i % 100000)
					{ bad++; CHECK(0, "rank %d in-place all_to_all [%d][%zu] = %d", rank, p, i, a2a_in[p][i]); }
	}
	/* every piece was done exactly once, none of them by rank 1 */
	mine = ncl_comm_direct_pieces(c) - before;
	CHECK(rank != 1 || mine == 0, "rank 1 claimed %llu pieces with cap 0", (unsigned long long)mine);
	for (int q = 0; q < n; q++) {
		size_t len = N / n + ((size_t)q < (size_t)N % n);

		want_pieces += pieces_of(len * 4, 64 << 10) + pieces_of(len * 2, 64 << 10) +
			       pieces_of((size_t)M * 4, 64 << 10);
	}
	ncl_comm_test_claim_cap(c, UINT64_MAX);
	cnt = (int64_t)mine;
	CHECK(ncl_all_reduce(c, &cnt, &cnt, 1, NCL_I64, NCL_SUM, 1.0, NCL_CALL(TMO)) == 0, "%s", ncl_last_error());
	total = (uint64_t)cnt;
	CHECK(total == want_pieces, "rank %d: %llu pieces done, %llu in the calls", rank, (unsigned long long)total,
	      (unsigned long long)want_pieces);
}

/* A peer SIGKILLed while large direct all_reduces run: the survivor's call fails naming it, and it
 * does not wait for its timeout. */
static void *kill_later(void *arg)
{
	usleep(30000);
	kill((pid_t)(intptr_t)arg, SIGKILL);
	return NULL;
}

static void ranks_direct_killed_mid(ncl_comm_t *c, int rank, int n)
{
	enum { N = 4 << 20 };
	float *x = calloc(N, sizeof *x);
	pthread_t t;
	int64_t t0 = (int64_t)time(NULL);
	int rc = 0;

	if (!x)
		return;
	if (rank == 0)
		CHECK(pthread_create(&t, NULL, kill_later, (void *)(intptr_t)ncl_comm_peer_pid(c, 1)) == 0);
	for (int k = 0; k < 1000 && !rc; k++)
		rc = ncl_all_reduce(c, x, x, N, NCL_F32, NCL_SUM, 1.0, NCL_CALL(TMO));
	if (rank == 0) {
		pthread_join(t, NULL);
		CHECK(rc == NCL_ERR_PEER, "rc %d: %s", rc, ncl_last_error());
		CHECK(strstr(ncl_last_error(), "rank 1") && strstr(ncl_last_error(), "died"), "%s", ncl_last_error());
		CHECK((int64_t)time(NULL) - t0 < 5);
	}
	free(x);
}

/* all_to_all counts that do not pair up: a mismatch on every rank, before any copy. */
static void ranks_direct_a2a_mismatch(ncl_comm_t *c, int rank, int n)
{
	static int32_t in[2][40000], out[2][40000];
	const void *sends[2] = { in[0], in[1] };
	void *recvs[2] = { out[0], out[1] };
	size_t sc[2] = { 30000, 30000 }, rc[2] = { 30000, rank == 0 ? 40000 : 30000 };
	int r = ncl_all_to_all(c, sends, sc, recvs, rc, NCL_I32, NCL_CALL(TMO));

	/* a rank that sees the peer's failure first reports that, with the peer's message */
	CHECK(r == NCL_ERR_MISMATCH || r == NCL_ERR_PEER, "rank %d rc %d: %s", rank, r, ncl_last_error());
	CHECK(strstr(ncl_last_error(), "rank 1 sends 30000 elements to rank 0, which expects 40000"), "%s",
	      ncl_last_error());
	CHECK(out[1][0] == 0 && out[1][29999] == 0, "rank %d: copied before the check", rank);
}

static void test_direct(void)
{
	CHECK(setenv("NEURON_CCL_DIRECT_MIN", "1", 1) == 0);
	run_ranks(2, ranks_direct);
	run_ranks(3, ranks_direct);
	run_ranks(2, ranks_direct_mismatch);
	run_ranks(2, ranks_direct_a2a_mismatch);
	run_ranks(2, ranks_direct_steal);
	run_ranks(3, ranks_direct_steal);
	CHECK(setenv("NEURON_CCL_DIRECT_MIN", "64K", 1) == 0);
	run_ranks(2, ranks_direct_large);
	CHECK(setenv("NEURON_CCL_DIRECT_MIN", "bogus", 1) == 0);
	{
		ncl_comm_t *c = NULL;
		CHECK(ncl_comm_create("/tn-ncl-bogus", 2, CHUNK, &c) == NCL_ERR_INVALID && !c);
		CHECK(strstr(ncl_last_error(), "NEURON_CCL_DIRECT_MIN"), "%s", ncl_last_error());
		CHECK(!shm_exists("/tn-ncl-bogus"));
	}
	unsetenv("NEURON_CCL_DIRECT_MIN");
}

static void test_collectives_2(void) { run_ranks(2, ranks_all_reduce); run_ranks(2, ranks_copies); }
static void test_collectives_3(void) { run_ranks(3, ranks_all_reduce); run_ranks(3, ranks_copies); }
/* recv from any source: ranks 1 and 2 send to rank 0, which takes them in whatever order they come. */
static void ranks_recv_any(ncl_comm_t *c, int rank, int n)
{
	int32_t v[4] = { 0 };

	if (rank > 0) {
		for (int i = 0; i < 4; i++)
			v[i] = rank * 10 + i;
		CHECK(ncl_send(c, v, 4, NCL_I32, 0, 5, TMO) == 0, "%s", ncl_last_error());
		return;
	}
	int seen = 0, src = -1;

	for (int m = 0; m < 2; m++) {
		CHECK(ncl_recv_any(c, v, 4, NCL_I32, 5, TMO, &src) == 0, "%s", ncl_last_error());
		CHECK(src == 1 || src == 2, "src %d", src);
		CHECK(v[0] == src * 10 && v[3] == src * 10 + 3);
		seen |= 1 << src;
	}
	CHECK(seen == 6);
	/* nothing else comes with tag 6: a timeout naming the tag */
	CHECK(ncl_recv_any(c, v, 4, NCL_I32, 6, 100, &src) == NCL_ERR_TIMEOUT && strstr(ncl_last_error(), "tag 6"),
	      "%s", ncl_last_error());
}

static void test_p2p(void) { run_ranks(2, ranks_p2p); run_ranks(3, ranks_recv_any); }
static void test_mismatch(void) { run_ranks(2, ranks_mismatch); }
static void test_timeout(void) { run_ranks(2, ranks_timeout); }

static void killed_peer(void (*fn)(ncl_comm_t *, int, int))
{
	pid_t pid;
	ncl_comm_t *c = NULL;
	int st = 0;

	snprintf(seg_name, sizeof seg_name, "/tn-ncl-test-%d-kill", (int)getpid());
	CHECK(ncl_comm_create(seg_name, 2, CHUNK, &c) == 0, "%s", ncl_last_error());
	if (!c)
		return;
	pid = fork();
	if (pid == 0) {
		ncl_comm_t *cc = NULL;
		if (ncl_comm_attach(seg_name, 1, 2, &cc) || ncl_comm_ready(cc, TMO))
			_exit(1);
		fn(cc, 1, 2);
		_exit(2);
	}
	CHECK(ncl_comm_ready(c, TMO) == 0, "%s", ncl_last_error());
	fn(c, 0, 2); /* the child stays a zombie until waitpid: its death is still seen */
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	ncl_comm_destroy(c);
	CHECK(!shm_exists(seg_name));
}

static void test_bad_args(void)
{
	ncl_comm_t *c = NULL;

	CHECK(ncl_comm_create("no-slash", 2, CHUNK, &c) == NCL_ERR_INVALID && !c);
	CHECK(ncl_comm_create("/tn-ncl-x", 0, CHUNK, &c) == NCL_ERR_INVALID);
	CHECK(ncl_comm_create("/tn-ncl-x", 2, 100, &c) == NCL_ERR_INVALID);
	CHECK(ncl_comm_attach("/tn-ncl-does-not-exist", 1, 2, &c) == NCL_ERR_HOST && !c);
	CHECK(ncl_all_reduce(NULL, NULL, NULL, 0, NCL_F32, NCL_SUM, 1, NCL_CALL(TMO)) == NCL_ERR_INVALID);
	{
		size_t b;
		CHECK(ncl_parse_chunk_bytes("1MiB", &b) == 0 && b == 1 << 20);
		CHECK(ncl_parse_chunk_bytes("64K", &b) == 0 && b == 65536);
		CHECK(ncl_parse_chunk_bytes("12", &b) == NCL_ERR_INVALID);
		CHECK(ncl_parse_chunk_bytes("x", &b) == NCL_ERR_INVALID);
	}
}

/* The helpers the glue calls: all_to_all split counts, the ticket order, the ordered worker. */
static void test_split_counts(void)
{
	size_t c[3];
	int64_t uneven[3] = { 1, 0, 4 }, bad[3] = { 1, 1, 1 };

	CHECK(ncl_split_counts(NULL, 0, 6, 5, 3, "input", c) == 0 && c[0] == 10 && c[1] == 10 && c[2] == 10);
	CHECK(ncl_split_counts(uneven, 3, 5, 2, 3, "input", c) == 0 && c[0] == 2 && c[1] == 0 && c[2] == 8);
	CHECK(ncl_split_counts(NULL, 0, 7, 1, 3, "output", c) == NCL_ERR_INVALID &&
	      strstr(ncl_last_error(), "output dim 0 (7) is not divisible by the group size 3"));
	CHECK(ncl_split_counts(bad, 3, 5, 1, 3, "input", c) == NCL_ERR_INVALID &&
	      strstr(ncl_last_error(), "sum to 3, dim 0 is 5"));
	CHECK(ncl_split_counts(bad, 2, 2, 1, 3, "input", c) == NCL_ERR_INVALID && strstr(ncl_last_error(), "need 3"));
}

static void test_order(void)
{
	ncl_order_t *o = NULL;
	uint64_t a, b;

	CHECK(ncl_order_create(&o) == 0);
	a = ncl_order_take(o);
	b = ncl_order_take(o);
	CHECK(a == 1 && b == 2 && ncl_order_last(o) == 2);
	CHECK(ncl_order_wait(o, a, 50, "t") == 0);
	CHECK(ncl_order_wait(o, b, 20, "t") == NCL_ERR_TIMEOUT && strstr(ncl_last_error(), "t (seq 2): timed out"));
	ncl_order_done(o, a);
	CHECK(ncl_order_wait(o, b, 20, "t") == 0);
	ncl_order_abort(o);
	CHECK(ncl_order_wait(o, ncl_order_take(o) + 1, 1000, "t") == NCL_ERR_ABORTED);
	ncl_order_destroy(o);
}

static int worker_log[8], worker_n;
static void worker_job(void *p)
{
	worker_log[worker_n++] = (int)(intptr_t)p;
}

static void test_worker(void)
{
	ncl_worker_t *w = NULL;

	CHECK(ncl_worker_create(&w) == 0);
	for (intptr_t i = 0; i < 5; i++)
		CHECK(ncl_worker_submit(w, worker_job, (void *)i) == 0);
	ncl_worker_destroy(w); /* runs what is queued first */
	CHECK(worker_n == 5);
	for (int i = 0; i < 5; i++)
		CHECK(worker_log[i] == i);
	CHECK(ncl_worker_create(&w) == 0);
	ncl_worker_destroy(w); /* never started */
}

static void test_killed_peer(void)
{
	killed_peer(ranks_killed);
	CHECK(setenv("NEURON_CCL_DIRECT_MIN", "1", 1) == 0);
	killed_peer(ranks_direct_faults);
	killed_peer(ranks_direct_killed_mid);
	unsetenv("NEURON_CCL_DIRECT_MIN");
}

int main(void)
{
	RUN(test_split_counts);
	RUN(test_order);
	RUN(test_worker);
	RUN(test_reduce_core);
	RUN(test_reduce_alias_and_rounding);
	RUN(test_bad_args);
	RUN(test_collectives_2);
	RUN(test_collectives_3);
	RUN(test_p2p);
	RUN(test_mismatch);
	RUN(test_timeout);
	RUN(test_killed_peer);
	RUN(test_direct);
	return ctest_finish();
}
