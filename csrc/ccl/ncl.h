/* ncl.h - TorchNeuron collectives: the ranks of a process group on one host exchange data through one
 * POSIX shared-memory segment per communicator.
 *
 * A communicator is created by rank 0 (ncl_comm_create) under a name that the caller passes to the other
 * ranks (the C++ glue uses the c10d store); they attach (ncl_comm_attach), and ncl_comm_ready waits until
 * every rank is attached, after which rank 0 unlinks the name: the segment then lives only as long as
 * the mappings, so nothing is left in /dev/shm after a normal exit, a destroy or a killed rank.
 *
 * Every call blocks the calling thread until its part is done, never longer than timeout_ms; it returns
 * 0 or a negative NCL_ERR_* code, and ncl_last_error() gives a thread-local message naming the
 * collective, its sequence number and the rank that is missing or failed.  A rank that dies (SIGKILL
 * included) is noticed through a robust mutex it holds for its lifetime; a rank whose call fails marks
 * itself failed so that its peers fail at once instead of at their timeout.  After any failure the
 * communicator is broken: every later call fails with the first error.  Nothing here exits, aborts or
 * asserts.  No PyTorch types appear in this layer.
 *
 * All ranks must issue the same collectives in the same order; each round carries a descriptor (kind,
 * sequence number, dtype, count, op, root) that the peers compare, so a mismatch is an error on every
 * rank, never garbage.  Reductions combine the ranks' values in rank order, accumulating bf16/f16 in
 * f32 and rounding once, so every rank gets bitwise the same result.
 */
#ifndef NCL_H
#define NCL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
	NCL_OK = 0,
	NCL_ERR_INVALID = -1,  /* bad argument (null pointer, rank out of range, unsupported dtype/op) */
	NCL_ERR_HOST = -2,     /* the host refused memory, a segment or a thread */
	NCL_ERR_TIMEOUT = -3,  /* a peer did not arrive within the timeout */
	NCL_ERR_PEER = -4,     /* a peer died, left, or failed its side of the call */
	NCL_ERR_MISMATCH = -5, /* the ranks issued different calls (kind, count, dtype, op, root, tag) */
	NCL_ERR_ABORTED = -6,  /* ncl_comm_abort was called, or the communicator broke earlier */
};

typedef enum {
	NCL_F32, NCL_F64, NCL_F16, NCL_BF16, NCL_I8, NCL_U8, NCL_I16, NCL_I32, NCL_I64, NCL_BOOL,
	NCL_NDTYPES
} ncl_dtype_t;

typedef enum {
	NCL_SUM, NCL_PROD, NCL_MAX, NCL_MIN, NCL_AVG, NCL_PREMUL_SUM, NCL_BAND, NCL_BOR, NCL_BXOR,
	NCL_NOPS
} ncl_redop_t;

const char *ncl_status_string(int status);
/* Details of the last failing call on this thread ("" if none). */
const char *ncl_last_error(void);
size_t ncl_dtype_size(ncl_dtype_t dt); /* 0 for an unknown dtype */
const char *ncl_dtype_name(ncl_dtype_t dt);
const char *ncl_redop_name(ncl_redop_t op);
/* Whether op is defined for dt (bitwise ops: integers and bool; AVG and PREMUL_SUM: floats). */
bool ncl_redop_supported(ncl_redop_t op, ncl_dtype_t dt);

/* ---- the reduction core ----------------------------------------------------------------------- */
/* dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i] for i < count, in that order.  AVG divides
 * the sum by nsrc; PREMUL_SUM sums srcs[k][i] * scale.  bf16/f16 accumulate in f32 and round once; f64
 * accumulates in f64.  dst may alias any source.  Single-threaded. */
int ncl_reduce_buffers(void *dst, const void *const *srcs, int nsrc, size_t count, ncl_dtype_t dt,
		       ncl_redop_t op, double scale);

/* ---- communicators ---------------------------------------------------------------------------- */
typedef struct ncl_comm ncl_comm_t;

/* Bytes of each rank's staging half-buffer (two per rank): NEURON_CCL_CHUNK_BYTES, default 4 MiB. */
#define NCL_CHUNK_BYTES_DEFAULT ((size_t)4 << 20)
int ncl_parse_chunk_bytes(const char *s, size_t *bytes);
/* all_reduce, reduce_scatter, all_gather, broadcast and all_to_all of at least NEURON_CCL_DIRECT_MIN
 * bytes per rank (default 64 KiB; "off" never; read by rank 0 at create, stored in the segment) skip
 * the staging halves: each rank reads its peers' buffers in place and all_reduce writes its slice of the result
 * into every rank's output (cross-memory attach, process_vm_readv/writev), so an all_reduce moves as
 * many bytes per rank as one memcpy of the buffer.  ncl_comm_ready probes whether every peer's memory
 * is reachable (same user, no ptrace restriction); where some rank's is not, every rank stages. */

/* Rank 0: creates the segment `name` ("/..." as for shm_open) for nranks ranks. */
int ncl_comm_create(const char *name, int nranks, size_t chunk_bytes, ncl_comm_t **out);
/* Ranks 1..nranks-1: attaches to the segment rank 0 created. */
int ncl_comm_attach(const char *name, int rank, int nranks, ncl_comm_t **out);
/* Waits until every rank has attached; rank 0 then unlinks the name (also on failure). */
int ncl_comm_ready(ncl_comm_t *c, int64_t timeout_ms);
/* Marks this rank as departed (peers waiting for it fail at once), unlinks the name if still linked
 * and unmaps.  c may be NULL.  Must not run concurrently with a call on c (see ncl_comm_abort). */
void ncl_comm_destroy(ncl_comm_t *c);
/* From any thread: makes the calls waiting on c fail with NCL_ERR_ABORTED, and breaks c. */
void ncl_comm_abort(ncl_comm_t *c);
int ncl_comm_rank(const ncl_comm_t *c);
int ncl_comm_size(const ncl_comm_t *c);
/* Collectives run in sequence-number order on every rank.  A caller that issues a collective now and
 * runs it later on another thread (the glue enqueues it on a device queue) takes its number at issue
 * time with ncl_comm_take_seq and passes it in ncl_call_t.seq; the call then first waits (within its
 * timeout) until every lower number has run in this process, so collectives issued in the same order on
 * every rank run in that order even when they execute on different threads.  seq = 0 takes the next
 * number at call time.  Numbers start at 1; send/recv are not numbered. */
uint64_t ncl_comm_take_seq(ncl_comm_t *c);
uint64_t ncl_comm_last_seq(const ncl_comm_t *c); /* highest number taken so far */
typedef struct {
	int64_t timeout_ms; /* > 0 */
	uint64_t seq;       /* 0: take the next number now */
} ncl_call_t;
#define NCL_CALL(ms) ((ncl_call_t){ (ms), 0 })
/* Test hooks: whether this rank can reach every peer's memory directly (see below), and how many of
 * its calls went direct. */
bool ncl_comm_direct(const ncl_comm_t *c);
uint64_t ncl_comm_direct_calls(const ncl_comm_t *c);
/* Test hooks: how many pieces (of NCL_DIRECT_PIECE bytes) this rank reduced or copied in its direct
 * calls, whoever's queue they came from; and a cap on the pieces it claims per direct call
 * (UINT64_MAX by default; 0 leaves all the work to its peers, which must then take it). */
uint64_t ncl_comm_direct_pieces(const ncl_comm_t *c);
void ncl_comm_test_claim_cap(ncl_comm_t *c, uint64_t cap);
/* Test hook: the process id stored for rank r in the segment. */
int ncl_comm_peer_pid(const ncl_comm_t *c, int r);

/* Process-local ticket order without a communicator (the glue's Gloo transport): tickets from 1;
 * ncl_order_wait returns once every lower ticket is done, NCL_ERR_TIMEOUT after timeout_ms, or
 * NCL_ERR_ABORTED after ncl_order_abort; `what` starts the error message. */
typedef struct ncl_order ncl_order_t;
int ncl_order_create(ncl_order_t **out);
void ncl_order_destroy(ncl_order_t *o); /* o may be NULL */
uint64_t ncl_order_take(ncl_order_t *o);
uint64_t ncl_order_last(const ncl_order_t *o);
int ncl_order_wait(ncl_order_t *o, uint64_t seq, int64_t timeout_ms, const char *what);
void ncl_order_done(ncl_order_t *o, uint64_t seq);
void ncl_order_abort(ncl_order_t *o);

/* A thread (started at the first submit) that runs jobs one at a time in submission order;
 * ncl_worker_destroy runs the jobs still queued, then joins it.  w may be NULL for destroy. */
typedef struct ncl_worker ncl_worker_t;
int ncl_worker_create(ncl_worker_t **out);
int ncl_worker_submit(ncl_worker_t *w, void (*fn)(void *), void *arg);
void ncl_worker_destroy(ncl_worker_t *w);

/* Elements per rank of an all_to_all buffer whose dim 0 has dim0 rows of row elements: splits[p] rows
 * each (nsplits == nranks; they must sum to dim0), or with nsplits == 0 dim0 / nranks rows each (dim0
 * must divide).  which names the buffer in the error. */
int ncl_split_counts(const int64_t *splits, size_t nsplits, int64_t dim0, int64_t row, int nranks,
		     const char *which, size_t *counts);

/* ---- collectives ------------------------------------------------------------------------------ */
/* recv may equal send (in place).  count is in elements. */
int ncl_all_reduce(ncl_comm_t *c, const void *send, void *recv, size_t count, ncl_dtype_t dt,
		   ncl_redop_t op, double scale, ncl_call_t call);
/* Only root's recv is written (recv may be NULL elsewhere). */
int ncl_reduce(ncl_comm_t *c, const void *send, void *recv, size_t count, ncl_dtype_t dt, ncl_redop_t op,
	       double scale, int root, ncl_call_t call);
int ncl_broadcast(ncl_comm_t *c, void *buf, size_t count, ncl_dtype_t dt, int root, ncl_call_t call);
/* recvs[p] (nranks buffers of count elements) receives rank p's send. */
int ncl_all_gather(ncl_comm_t *c, const void *send, void *const *recvs, size_t count, ncl_dtype_t dt,
		   ncl_call_t call);
/* As ncl_all_gather, but only root's recvs are written (NULL elsewhere). */
int ncl_gather(ncl_comm_t *c, const void *send, void *const *recvs, size_t count, ncl_dtype_t dt, int root,
	       ncl_call_t call);
/* recv = op over p of rank p's sends[me] (sends: nranks buffers of count elements). */
int ncl_reduce_scatter(ncl_comm_t *c, const void *const *sends, void *recv, size_t count, ncl_dtype_t dt,
		       ncl_redop_t op, double scale, ncl_call_t call);
/* recv on rank q = root's sends[q]; sends is ignored (may be NULL) except on root. */
int ncl_scatter(ncl_comm_t *c, const void *const *sends, void *recv, size_t count, ncl_dtype_t dt, int root,
		ncl_call_t call);
/* recvs[p] (recv_counts[p] elements) receives rank p's sends[me] (its send_counts[me] elements); the
 * counts must agree pairwise. */
int ncl_all_to_all(ncl_comm_t *c, const void *const *sends, const size_t *send_counts, void *const *recvs,
		   const size_t *recv_counts, ncl_dtype_t dt, ncl_call_t call);
int ncl_barrier(ncl_comm_t *c, ncl_call_t call);

/* ---- point to point ----------------------------------------------------------------------------- */
/* Messages between two ranks arrive in the order sent; the receiver's count, dtype and tag must match
 * the sender's (NCL_ERR_MISMATCH otherwise).  send returns once the data is staged or received. */
int ncl_send(ncl_comm_t *c, const void *buf, size_t count, ncl_dtype_t dt, int peer, int tag,
	     int64_t timeout_ms);
int ncl_recv(ncl_comm_t *c, void *buf, size_t count, ncl_dtype_t dt, int peer, int tag, int64_t timeout_ms);
/* recv from whichever rank first has a message with this tag waiting; *src receives that rank. */
int ncl_recv_any(ncl_comm_t *c, void *buf, size_t count, ncl_dtype_t dt, int tag, int64_t timeout_ms, int *src);

#ifdef __cplusplus
}
#endif
#endif /* NCL_H */
