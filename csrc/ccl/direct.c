/* direct.c - single-copy collectives between the ranks of one host.  Instead of staging every byte in
 * the segment (the owner copies it in, the readers copy it out), each rank reads its peers' buffers in
 * place, and all_reduce writes its result straight into their outputs, through cross-memory attach
 * (process_vm_readv / process_vm_writev: one copy by the kernel, from the peer's pages to ours).  The
 * device arenas are host memory, so this reads the device tensors themselves.
 *
 * A direct call is three steps inside the begun collective: an agreement round (round 0) in which every
 * rank publishes its buffers' addresses and whether it can go direct (its probe at ready succeeded, the
 * scratch exists, its buffers do not overlap in a way the single pass cannot handle); the data
 * movement, pieces claimed from per-rank work queues by whichever rank gets to them first (the
 * reductions below reduce each piece in rank order through ncl_reduce_buffers, so that the result is
 * bitwise the staged one; the copies below push or pull each piece); and
 * a completion round (round 1) that keeps every rank's buffers alive until the peers are done with
 * them and carries each rank's status.  If any rank cannot go direct, every rank returns
 * NCL_DIRECT_STAGED after the agreement round and the caller runs the staged rounds.
 *
 * Traffic per rank for an all_reduce of S bytes on n ranks: S read (its slice of every input) and S
 * written (its slice of every output), as for one memcpy of S; the staged path moves about 5 S.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ncl_impl.h"

#define NCL_DIRECT_MIN_DEFAULT ((size_t)64 << 10)
#define PROBE_TAG 0x4e434c50u /* "NCLP" */
#define CHECK_EVERY (16 * NCL_DIRECT_PIECE) /* bytes copied between checks of the peers' state */

/* What each rank publishes in the agreement round. */
struct direct_info {
	uint64_t ok;                  /* this rank can go direct for this call */
	uint64_t send, recv;          /* its input and output (broadcast: its buffer in both) */
	uint64_t bufs[NCL_MAX_RANKS]; /* reduce_scatter, all_to_all: its per-rank inputs; all_gather: outputs */
	uint64_t recvs[NCL_MAX_RANKS];  /* all_to_all: its per-rank outputs */
	uint64_t scounts[NCL_MAX_RANKS], rcounts[NCL_MAX_RANKS]; /* all_to_all: elements to / from rank q */
};

_Static_assert(sizeof(struct direct_info) <= 4096, "the agreement fits the smallest half");

int ncl_direct_parse_min(const char *s, size_t *bytes)
{
	char *end;
	unsigned long long v;

	if (!s || !*s) {
		*bytes = NCL_DIRECT_MIN_DEFAULT;
		return NCL_OK;
	}
	if (!strcmp(s, "off") || !strcmp(s, "never")) {
		*bytes = 0;
		return NCL_OK;
	}
	if (*s < '0' || *s > '9')
		return NCL_ERR_INVALID;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || v > ((unsigned long long)1 << 40))
		return NCL_ERR_INVALID;
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	if (*end == 'i')
		end++;
	if (*end == 'B')
		end++;
	if (*end)
		return NCL_ERR_INVALID;
	*bytes = (size_t)v;
	return NCL_OK;
}

static uint64_t probe_value(int rank)
{
	return ((uint64_t)PROBE_TAG << 32) | (uint32_t)rank;
}

/* Peer p's memory is gone (ESRCH): its main thread has exited, and its life thread (whose robust
 * mutex tells the peers) follows within moments; wait for that, boundedly, to name the death as the
 * rounds do. */
static int peer_gone(struct ncl_comm *c, int kind, uint64_t seq, int p)
{
	for (int i = 0; i < 500; i++) {
		if (ncl_peer_check(c, p, kind, seq))
			return NCL_ERR_PEER;
		usleep(2000);
	}
	return ncl_set_error(NCL_ERR_PEER, "ncl %s (seq %llu): rank %d (pid %d) died (its memory is gone)",
			     ncl_kind_name(kind), (unsigned long long)seq, p, (int)c->ctl[p].pid);
}

/* One transfer between this process and peer p's memory, in as many syscalls as the kernel needs. */
static int xfer(struct ncl_comm *c, int kind, uint64_t seq, int p, void *local, uint64_t remote, size_t n,
		bool write)
{
	pid_t pid = c->ctl[p].pid;
	char *l = local;

	while (n) {
		struct iovec lv = { l, n }, rv = { (void *)(uintptr_t)remote, n };
		ssize_t k = write ? process_vm_writev(pid, &lv, 1, &rv, 1, 0) : process_vm_readv(pid, &lv, 1, &rv, 1, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0 && kind != NCL_K_NONE && ncl_peer_check(c, p, kind, seq)) /* it died: say so */
			return NCL_ERR_PEER;
		if (k < 0 && errno == ESRCH && kind != NCL_K_NONE)
			return peer_gone(c, kind, seq, p);
		if (k <= 0)
			return ncl_set_error(NCL_ERR_PEER, "ncl %s (seq %llu): %s rank %d's memory (pid %d) failed: %s",
					     ncl_kind_name(kind), (unsigned long long)seq, write ? "writing" : "reading", p,
					     (int)pid, k < 0 ? strerror(errno) : "no progress");
		l += k;
		remote += (uint64_t)k;
		n -= (size_t)k;
	}
	return NCL_OK;
}

void ncl_direct_probe(struct ncl_comm *c)
{
	c->direct_ok = c->direct_min != 0;
	for (int p = 0; p < c->nranks && c->direct_ok; p++) {
		uint64_t v = 0;

		if (p == c->rank)
			continue;
		if (xfer(c, NCL_K_NONE, 0, p, &v, c->ctl[p].probe_addr, sizeof v, false) || v != probe_value(p))
			c->direct_ok = false;
	}
	ncl_set_error(NCL_OK, "%s", "");
}

/* Called by ncl_comm_ready before the rank counts itself attached. */
void ncl_direct_publish(struct ncl_comm *c)
{
	c->probe = probe_value(c->rank);
	c->ctl[c->rank].probe_addr = (uint64_t)(uintptr_t)&c->probe;
}

static bool overlap(const void *a, size_t an, const void *b, size_t bn)
{
	const char *x = a, *y = b;

	return an && bn && x < y + bn && y < x + an;
}

/* Same buffer, or disjoint: the single pass reads each element before it writes it only then. */
static bool same_or_apart(const void *a, const void *b, size_t n)
{
	return a == b || !overlap(a, n, b, n);
}

static struct direct_info *peer_infos(struct ncl_comm *c)
{
	return (struct direct_info *)(c->scratch + (size_t)c->nranks * NCL_DIRECT_PIECE);
}

static unsigned char *scratch_of(struct ncl_comm *c, int p)
{
	return c->scratch + (size_t)p * NCL_DIRECT_PIECE;
}

/* Round 0: publishes info (ok is ANDed with this rank's capability) and gathers the peers'. */
static int agree(struct ncl_round *r, struct direct_info *info, bool ok)
{
	struct ncl_comm *c = r->c;
	unsigned char *mine;
	bool all = true;
	int rc;

	if (ok && c->direct_ok && !c->scratch)
		c->scratch = malloc((size_t)c->nranks * (NCL_DIRECT_PIECE + sizeof(struct direct_info)));
	info->ok = ok && c->direct_ok && c->scratch;
	/* Every rank finished claiming from this rank's queues in the previous direct call (it posted that
	 * call's completion round, which this rank saw), and none claims in this one before this post. */
	for (int p = 0; p < c->nranks; p++)
		atomic_store(&c->ctl[c->rank].claim[p], 0);
	r->d.round = 0;
	rc = ncl_round_acquire(r, &mine);
	if (rc)
		return rc;
	memcpy(mine, info, sizeof *info);
	rc = ncl_round_exchange(r);
	if (rc)
		return rc;
	for (int p = 0; p < c->nranks; p++) {
		const struct direct_info *o = p == c->rank ? info : (const struct direct_info *)ncl_round_data(r, p);

		all = all && o->ok;
		if (all)
			memcpy(&peer_infos(c)[p], o, sizeof *o);
	}
	ncl_round_release(r);
	if (!all)
		return NCL_DIRECT_STAGED;
	c->direct_calls++;
	return NCL_OK;
}

/* Between pieces: stop early when the communicator broke or a peer failed, left or died. */
static int peers_check(struct ncl_round *r)
{
	struct ncl_comm *c = r->c;
	int rc = ncl_check_usable(c, r->d.kind, r->d.seq);

	for (int p = 0; p < c->nranks && !rc; p++)
		if (p != c->rank)
			rc = ncl_peer_check(c, p, r->d.kind, r->d.seq);
	return rc;
}

/* Round 1: every rank's part is done (or failed: its status travels in the round). */
static int finish(struct ncl_round *r, int status)
{
	struct ncl_comm *c = r->c;
	unsigned char *mine;
	char msg[512] = "";
	int32_t st = status;
	int rc;

	if (status)
		memcpy(msg, ncl_last_error(), sizeof msg - 1);
	r->d.round = 1;
	rc = ncl_round_acquire(r, &mine);
	if (!rc) {
		memcpy(mine, &st, sizeof st);
		rc = ncl_round_exchange(r);
		for (int p = 0; p < c->nranks && !rc; p++) {
			int32_t ps;

			memcpy(&ps, ncl_round_data(r, p), sizeof ps);
			if (p != c->rank && ps)
				rc = ncl_set_error(NCL_ERR_PEER, "ncl %s (seq %llu): rank %d failed its part of the call "
						   "(%s)", ncl_kind_name(r->d.kind), (unsigned long long)r->d.seq, p,
						   ncl_status_string(ps));
		}
		if (!rc)
			ncl_round_release(r);
	}
	if (status)
		return ncl_set_error(status, "%s", msg);
	return rc;
}

/* ---- the reductions: work queues that any rank may drain ------------------------------------------
 * The array is cut into pieces of NCL_DIRECT_PIECE bytes, grouped in one queue per rank (all_reduce:
 * rank q's slice of count / n elements, the remainder spread over the first ranks; reduce_scatter:
 * rank q's block).  Each rank claims the pieces of its own queue first, then those left in its peers'
 * queues (an atomic counter per queue in the owner's control block), so a rank that the scheduler
 * keeps off the CPU does not hold the call up: whoever runs does the work.  A piece is reduced in rank
 * order through ncl_reduce_buffers by whichever rank claims it, so the result does not depend on who
 * did it and stays bitwise the staged path's. */
struct red_job {
	ncl_dtype_t dt;
	ncl_redop_t op;
	double scale;
	size_t esz, per;           /* element size; elements per piece */
	int kind;                  /* NCL_K_ALL_REDUCE or NCL_K_REDUCE_SCATTER */
	const void *own_send;      /* all_reduce: this rank's input */
	void *own_recv;            /* this rank's output */
	const void *const *own_sends; /* reduce_scatter: this rank's per-rank inputs */
	size_t count;              /* all_reduce: elements of the array; reduce_scatter: of each block */
	uint64_t checked;          /* bytes reduced since the last peers_check */
};

/* Queue q's elements: [*lo, *lo + *len) of the array (all_reduce) or of block q (reduce_scatter). */
static void queue_range(const struct red_job *j, int nranks, int q, size_t *lo, size_t *len)
{
	size_t n = (size_t)nranks, base = j->count / n, rem = j->count % n, uq = (size_t)q;

	if (j->kind == NCL_K_ALL_REDUCE) {
		*lo = uq * base + (uq < rem ? uq : rem);
		*len = base + (uq < rem);
	} else {
		*lo = 0;
		*len = j->count;
	}
}

/* Claims the next piece of queue (owner, sub): its index, or npieces when every piece is taken. */
static size_t claim(struct ncl_comm *c, int owner, int sub, size_t npieces)
{
	uint64_t t = atomic_fetch_add(&c->ctl[owner].claim[sub], 1);

	return t < npieces ? (size_t)t : npieces;
}

/* Reduces elements [i, i + m) of queue q (rank p's input at ins[p], this rank's own locally) and writes
 * the result where it belongs: all_reduce into this rank's output and every peer's; reduce_scatter
 * into rank q's output (through the scratch when q is a peer). */
static int reduce_piece(struct ncl_round *r, struct red_job *j, int q, size_t i, size_t m)
{
	struct ncl_comm *c = r->c;
	const struct direct_info *pi = peer_infos(c);
	const void *srcs[NCL_MAX_RANKS];
	size_t b = i * j->esz, bytes = m * j->esz;
	bool ar = j->kind == NCL_K_ALL_REDUCE;
	const char *own = ar ? j->own_send : j->own_sends[q];
	char *dst = ar || q == c->rank ? (char *)j->own_recv + b : (char *)scratch_of(c, c->rank);
	int rc = NCL_OK;

	if ((j->checked += bytes) >= CHECK_EVERY) {
		j->checked = 0;
		rc = peers_check(r);
	}
	for (int p = 0; p < c->nranks && !rc; p++) {
		srcs[p] = p == c->rank ? own + b : (const void *)scratch_of(c, p);
		if (p != c->rank)
			rc = xfer(c, r->d.kind, r->d.seq, p, scratch_of(c, p), (ar ? pi[p].send : pi[p].bufs[q]) + b,
				  bytes, false);
	}
	if (!rc)
		rc = ncl_reduce_buffers(dst, srcs, c->nranks, m, j->dt, j->op, j->scale);
	if (ar)
		for (int p = 0; p < c->nranks && !rc; p++) {
			if (p != c->rank)
				rc = xfer(c, r->d.kind, r->d.seq, p, dst, pi[p].recv + b, bytes, true);
		}
	else if (!rc && q != c->rank)
		rc = xfer(c, r->d.kind, r->d.seq, q, dst, pi[q].recv + b, bytes, true);
	return rc;
}

/* Drains this rank's queue, then what is left of its peers'. */
static int reduce_queues(struct ncl_round *r, struct red_job *j)
{
	struct ncl_comm *c = r->c;
	uint64_t done = 0;
	int rc = NCL_OK;

	for (int k = 0; k < c->nranks && !rc && done < c->claim_cap; k++) {
		int q = (c->rank + k) % c->nranks;
		size_t lo, len, np, t;

		queue_range(j, c->nranks, q, &lo, &len);
		np = (len + j->per - 1) / j->per;
		while (!rc && done < c->claim_cap && (t = claim(c, q, 0, np)) < np) {
			size_t i = lo + t * j->per, m = lo + len - i < j->per ? lo + len - i : j->per;

			rc = reduce_piece(r, j, q, i, m);
			done++;
		}
	}
	c->direct_pieces += done;
	return rc;
}

int ncl_direct_all_reduce(struct ncl_round *r, const void *send, void *recv, size_t count, ncl_dtype_t dt,
			  ncl_redop_t op, double scale)
{
	struct direct_info info = { .send = (uintptr_t)send, .recv = (uintptr_t)recv };
	size_t esz = ncl_dtype_size(dt);
	struct red_job j = { .dt = dt, .op = op, .scale = scale, .esz = esz, .per = NCL_DIRECT_PIECE / esz,
			     .kind = NCL_K_ALL_REDUCE, .own_send = send, .own_recv = recv, .count = count };
	int rc = agree(r, &info, same_or_apart(send, recv, count * esz));

	if (rc)
		return rc;
	return finish(r, reduce_queues(r, &j));
}

int ncl_direct_reduce_scatter(struct ncl_round *r, const void *const *sends, void *recv, size_t count,
			      ncl_dtype_t dt, ncl_redop_t op, double scale)
{
	struct ncl_comm *c = r->c;
	struct direct_info info = { .recv = (uintptr_t)recv };
	size_t esz = ncl_dtype_size(dt), bytes = count * esz;
	struct red_job j = { .dt = dt, .op = op, .scale = scale, .esz = esz, .per = NCL_DIRECT_PIECE / esz,
			     .kind = NCL_K_REDUCE_SCATTER, .own_recv = recv, .own_sends = sends, .count = count };
	bool ok = same_or_apart(sends[c->rank], recv, bytes);
	int rc;

	for (int q = 0; q < c->nranks; q++) {
		info.bufs[q] = (uintptr_t)sends[q];
		if (q != c->rank && overlap(sends[q], bytes, recv, bytes))
			ok = false; /* a peer may read it while some rank writes recv */
	}
	rc = agree(r, &info, ok);
	if (rc)
		return rc;
	return finish(r, reduce_queues(r, &j));
}

/* ---- the copies: all_gather and broadcast ----------------------------------------------------------
 * Queue (q, p) holds the pieces of rank p's block that go to rank q's output.  Rank p pushes them
 * (process_vm_writev from its own input) or rank q pulls them (process_vm_readv into its own output),
 * whichever claims a piece first; a rank drains its incoming queues, then its outgoing ones, so that
 * with two ranks a broadcast's root copies half of the buffer instead of waiting. */
#define COPY_PIECE ((size_t)256 << 10)

struct copy_job {
	uint64_t done, checked; /* pieces copied; bytes since the last peers_check */
};

/* Drains queue (q, p): this rank is p (push: local is its input, remote rank q's output) or q (pull:
 * local is its output, remote rank p's input). */
static int copy_queue(struct ncl_round *r, struct copy_job *j, int q, int p, void *local, uint64_t remote,
		      size_t bytes)
{
	struct ncl_comm *c = r->c;
	bool push = p == c->rank;
	size_t np = (bytes + COPY_PIECE - 1) / COPY_PIECE, t;
	int rc = NCL_OK;

	while (!rc && j->done < c->claim_cap && (t = claim(c, q, p, np)) < np) {
		size_t off = t * COPY_PIECE, m = bytes - off < COPY_PIECE ? bytes - off : COPY_PIECE;

		if ((j->checked += m) >= CHECK_EVERY) {
			j->checked = 0;
			rc = peers_check(r);
		}
		if (!rc)
			rc = xfer(c, r->d.kind, r->d.seq, push ? q : p, (char *)local + off, remote + off, m, push);
		j->done++;
	}
	return rc;
}

int ncl_direct_all_gather(struct ncl_round *r, const void *send, void *const *recvs, size_t count,
			  ncl_dtype_t dt)
{
	struct ncl_comm *c = r->c;
	struct direct_info info = { .send = (uintptr_t)send };
	size_t bytes = count * ncl_dtype_size(dt);
	struct copy_job j = { 0 };
	bool ok = true;
	int rc;

	for (int q = 0; q < c->nranks; q++) {
		info.bufs[q] = (uintptr_t)recvs[q];
		if (q != c->rank && overlap(recvs[q], bytes, send, bytes))
			ok = false; /* the peers read send while some rank writes recvs[q] */
	}
	rc = agree(r, &info, ok);
	if (rc)
		return rc;
	if (recvs[c->rank] != send)
		memmove(recvs[c->rank], send, bytes);
	for (int k = 1; k < c->nranks && !rc; k++) { /* pull: start at a different peer on every rank */
		int p = (c->rank + k) % c->nranks;

		rc = copy_queue(r, &j, c->rank, p, recvs[p], peer_infos(c)[p].send, bytes);
	}
	for (int k = 1; k < c->nranks && !rc; k++) { /* push what the peers have not pulled yet */
		int q = (c->rank + k) % c->nranks;

		rc = copy_queue(r, &j, q, c->rank, (void *)send, peer_infos(c)[q].bufs[c->rank], bytes);
	}
	c->direct_pieces += j.done;
	return finish(r, rc);
}

int ncl_direct_broadcast(struct ncl_round *r, void *buf, size_t count, ncl_dtype_t dt, int root)
{
	struct ncl_comm *c = r->c;
	struct direct_info info = { .send = (uintptr_t)buf, .recv = (uintptr_t)buf };
	size_t bytes = count * ncl_dtype_size(dt);
	struct copy_job j = { 0 };
	int rc = agree(r, &info, true);

	if (rc)
		return rc;
	if (c->rank != root)
		rc = copy_queue(r, &j, c->rank, root, buf, peer_infos(c)[root].send, bytes);
	for (int k = 1; k < c->nranks && !rc && c->rank == root; k++) {
		int q = (root + k) % c->nranks;

		rc = copy_queue(r, &j, q, root, buf, peer_infos(c)[q].recv, bytes);
	}
	c->direct_pieces += j.done;
	return finish(r, rc);
}

/* all_to_all: queue (q, p) is rank p's block for rank q.  Every rank checks every pair's counts (all
 * ranks see the same tables, so a mismatch fails on all of them before anyone copies). */
int ncl_direct_all_to_all(struct ncl_round *r, const void *const *sends, const size_t *send_counts,
			  void *const *recvs, const size_t *recv_counts, ncl_dtype_t dt)
{
	struct ncl_comm *c = r->c;
	struct direct_info info = { 0 };
	const struct direct_info *pi;
	size_t esz = ncl_dtype_size(dt), sent = 0, got = 0;
	struct copy_job j = { 0 };
	bool ok = true;
	int rc, me = c->rank;

	for (int q = 0; q < c->nranks; q++) {
		info.bufs[q] = (uintptr_t)sends[q];
		info.recvs[q] = (uintptr_t)recvs[q];
		info.scounts[q] = send_counts[q];
		info.rcounts[q] = recv_counts[q];
		sent += send_counts[q] * esz;
		got += recv_counts[q] * esz;
		/* no output may overlap an input that some rank still reads (its own block in place is
		 * copied by this rank alone) */
		for (int y = 0; y < c->nranks; y++)
			if (!(q == me && y == me && recvs[q] == sends[y] && recv_counts[q] == send_counts[y]) &&
			    overlap(recvs[q], recv_counts[q] * esz, sends[y], send_counts[y] * esz))
				ok = false;
	}
	rc = agree(r, &info, ok && (sent > got ? sent : got) >= c->direct_min);
	if (rc)
		return rc;
	pi = peer_infos(c);
	for (int p = 0; p < c->nranks; p++)
		for (int q = 0; q < c->nranks; q++)
			if (pi[p].scounts[q] != pi[q].rcounts[p])
				return ncl_set_error(NCL_ERR_MISMATCH, "ncl all_to_all (seq %llu): rank %d sends %llu "
						     "elements to rank %d, which expects %llu", (unsigned long long)r->d.seq, p,
						     (unsigned long long)pi[p].scounts[q], q,
						     (unsigned long long)pi[q].rcounts[p]);
	if (recv_counts[me] && recvs[me] != sends[me])
		memmove(recvs[me], sends[me], recv_counts[me] * esz);
	for (int k = 1; k < c->nranks && !rc; k++) { /* pull */
		int p = (me + k) % c->nranks;

		rc = copy_queue(r, &j, me, p, recvs[p], pi[p].bufs[me], recv_counts[p] * esz);
	}
	for (int k = 1; k < c->nranks && !rc; k++) { /* push what the peers have not pulled yet */
		int q = (me + k) % c->nranks;

		rc = copy_queue(r, &j, q, me, (void *)sends[q], pi[q].recvs[me], send_counts[q] * esz);
	}
	c->direct_pieces += j.done;
	return finish(r, rc);
}
