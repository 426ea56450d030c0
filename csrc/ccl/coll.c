/* coll.c - the collectives, as rounds over the ranks' staging halves (the protocol is described in
 * ncl_impl.h); large all_reduce, reduce_scatter, all_gather, broadcast and all_to_all calls go direct (direct.c).  Each round moves at most one chunk per rank: the caller's data is cut into pieces of
 * chunk bytes (or, where a rank sends a different block to each peer, into nranks sub-blocks of a chunk),
 * staged by its owner, and read (reduced or copied) by the others straight from the owner's half.
 */
#include <string.h>

#include "ncl_impl.h"

/* Waits until the half this round uses is free on every rank, then writes the descriptor; returns the
 * half's data area in *mine. */
int ncl_round_acquire(struct ncl_round *r, unsigned char **mine)
{
	struct ncl_comm *c = r->c;
	int rc;

	r->k = c->step + 1;
	if (r->k > 2)
		for (int p = 0; p < c->nranks; p++) {
			if (p == c->rank)
				continue;
			rc = ncl_wait_word(c, p, &c->ctl[p].consumed, r->k - 2, r->deadline, r->d.kind, r->d.seq,
					   "finish reading the previous round");
			if (rc)
				return rc;
		}
	memcpy(ncl_half(c, c->rank, r->k), &r->d, sizeof r->d);
	*mine = ncl_half(c, c->rank, r->k) + NCL_DESC_BYTES;
	return NCL_OK;
}

static int desc_mismatch(struct ncl_round *r, int p, const struct ncl_desc *o)
{
	const struct ncl_desc *d = &r->d;

	return ncl_set_error(NCL_ERR_MISMATCH, "ncl %s (seq %llu): rank %d issued a different call: this rank "
			     "(%d) runs %s seq %llu of %llu %s elements (op %s, root %d, round %u), rank %d runs %s "
			     "seq %llu of %llu %s elements (op %s, root %d, round %u)", ncl_kind_name(d->kind),
			     (unsigned long long)d->seq, p, r->c->rank, ncl_kind_name(d->kind),
			     (unsigned long long)d->seq, (unsigned long long)d->count, ncl_dtype_name(d->dtype),
			     ncl_redop_name(d->redop), d->root, d->round, p, ncl_kind_name(o->kind),
			     (unsigned long long)o->seq, (unsigned long long)o->count, ncl_dtype_name(o->dtype),
			     ncl_redop_name(o->redop), o->root, o->round);
}

/* Publishes this rank's half, waits for every rank's, and checks their descriptors. */
int ncl_round_exchange(struct ncl_round *r)
{
	struct ncl_comm *c = r->c;
	int rc;

	c->step = r->k;
	atomic_store(&c->ctl[c->rank].posted, r->k);
	ncl_ring(c);
	for (int p = 0; p < c->nranks; p++) {
		const struct ncl_desc *o;

		if (p == c->rank)
			continue;
		rc = ncl_wait_word(c, p, &c->ctl[p].posted, r->k, r->deadline, r->d.kind, r->d.seq,
				   "reach this collective");
		if (rc)
			return rc;
		o = (const struct ncl_desc *)ncl_half(c, p, r->k);
		if (o->seq != r->d.seq || o->kind != r->d.kind || o->count != r->d.count || o->dtype != r->d.dtype ||
		    o->redop != r->d.redop || o->root != r->d.root || o->round != r->d.round)
			return desc_mismatch(r, p, o);
		if (atomic_load(&c->ctl[p].failed)) /* it gave up on this call after posting (its timeout) */
			return ncl_set_error(NCL_ERR_PEER, "ncl %s (seq %llu): rank %d failed: %s",
					     ncl_kind_name(r->d.kind), (unsigned long long)r->d.seq, p, c->ctl[p].errmsg);
	}
	return NCL_OK;
}

void ncl_round_release(struct ncl_round *r)
{
	atomic_store(&r->c->ctl[r->c->rank].consumed, r->k);
	ncl_ring(r->c);
}

static int check_dtype(int kind, ncl_dtype_t dt)
{
	if (!ncl_dtype_size(dt))
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: unsupported dtype %d", ncl_kind_name(kind), (int)dt);
	return NCL_OK;
}

static int check_root(struct ncl_comm *c, int kind, int root)
{
	if (root < 0 || root >= c->nranks)
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: root rank %d is out of range (group of %d ranks)",
				     ncl_kind_name(kind), root, c->nranks);
	return NCL_OK;
}

/* Common head of every collective: argument checks, then the ticket. */
static int begin(struct ncl_comm *c, struct ncl_round *r, int kind, ncl_call_t *call, ncl_dtype_t dt, size_t count,
		 int redop, int root)
{
	int rc;

	if (!c)
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: null communicator", ncl_kind_name(kind));
	rc = check_dtype(kind, dt);
	if (rc)
		return rc;
	memset(r, 0, sizeof *r);
	r->c = c;
	rc = ncl_coll_begin(c, kind, call, &r->deadline);
	if (rc)
		return rc;
	ncl_rec_begin(c, kind, call->seq, count, dt);
	r->d.seq = call->seq;
	r->d.count = count;
	r->d.kind = (uint16_t)kind;
	r->d.dtype = (uint8_t)dt;
	r->d.redop = (uint8_t)redop;
	r->d.root = root;
	return NCL_OK;
}

/* ---- the round loop ---------------------------------------------------------------------------- */
/* What a collective moves: its buffers and parameters, read by its stage and consume steps. */
struct coll {
	const void *send;            /* this rank's single input (all_reduce, reduce, all_gather, gather) */
	void *recv;                  /* its single output (all_reduce, reduce, reduce_scatter, scatter) */
	const void *const *sends;    /* one input per rank (reduce_scatter, scatter, all_to_all) */
	void *const *recvs;          /* one output per rank (all_gather, gather, all_to_all) */
	const size_t *send_counts, *recv_counts; /* all_to_all */
	void *buf;                   /* broadcast, in place */
	ncl_dtype_t dt;
	ncl_redop_t op;
	double scale;
	int root;
	size_t esz, per;             /* element size; elements per round (per block where blocks are per rank) */
	size_t table;                /* all_to_all: bytes of the counts table at the head of each half */
	bool receives;               /* this rank writes output */
};

/* stage: writes this rank's piece of the round (elements off..off+n of the call) into its half.
 * consume: reads the peers' halves; may raise *nrounds (all_to_all learns it in round 0). */
typedef void (*stage_fn)(struct ncl_round *r, const struct coll *a, unsigned char *mine, size_t off, size_t n);
typedef int (*consume_fn)(struct ncl_round *r, const struct coll *a, size_t off, size_t n, size_t *nrounds);

static size_t nrounds(size_t count, size_t per)
{
	return count == 0 ? 1 : (count + per - 1) / per;
}

/* Runs the rounds of a begun collective (r) over count elements, a->per at a time, and ends it. */
static int run_rounds(struct ncl_round *r, const struct coll *a, size_t count, stage_fn stage, consume_fn consume)
{
	size_t n_r = nrounds(count, a->per);
	int rc = NCL_OK;

	for (size_t i = 0; i < n_r && !rc; i++) {
		size_t off = i * a->per, n = count == 0 ? 0 : count - off < a->per ? count - off : a->per;
		unsigned char *mine;

		r->d.round = (uint32_t)i;
		rc = ncl_round_acquire(r, &mine);
		if (rc)
			break;
		if (stage)
			stage(r, a, mine, off, n);
		rc = ncl_round_exchange(r);
		if (rc)
			break;
		if (consume)
			rc = consume(r, a, off, n, &n_r);
		ncl_round_release(r);
	}
	return ncl_coll_end(r->c, r->d.seq, rc);
}

static const char *at(const void *p, size_t off, size_t esz)
{
	return (const char *)p + off * esz;
}

/* This rank's own piece of rank p's data in round r, or the peer's half (+ byte offset). */
static const void *piece(struct ncl_round *r, int p, const void *own, size_t half_off)
{
	return p == r->c->rank ? own : (const void *)(ncl_round_data(r, p) + half_off);
}

/* ---- the collectives -------------------------------------------------------------------------------- */
static void stage_send(struct ncl_round *r, const struct coll *a, unsigned char *mine, size_t off, size_t n)
{
	memcpy(mine, at(a->send, off, a->esz), n * a->esz);
}

/* Copies block q of every rank's sends (or root's, for scatter) into sub-block q of this rank's half. */
static void stage_blocks(struct ncl_round *r, const struct coll *a, unsigned char *mine, size_t off, size_t n)
{
	if (a->root >= 0 && r->c->rank != a->root)
		return;
	for (int q = 0; q < r->c->nranks; q++)
		if (q != r->c->rank)
			memcpy(mine + (size_t)q * a->per * a->esz, at(a->sends[q], off, a->esz), n * a->esz);
}

static int consume_reduce(struct ncl_round *r, const struct coll *a, size_t off, size_t n, size_t *nrounds_)
{
	const void *srcs[NCL_MAX_RANKS];

	if (!n || !a->receives)
		return NCL_OK;
	for (int p = 0; p < r->c->nranks; p++)
		srcs[p] = piece(r, p, at(a->send, off, a->esz), 0);
	return ncl_reduce_buffers((char *)a->recv + off * a->esz, srcs, r->c->nranks, n, a->dt, a->op, a->scale);
}

/* all_reduce, and reduce (root >= 0: only root reduces into recv). */
static int reduce_common(int kind, struct ncl_comm *c, const void *send, void *recv, size_t count,
			 ncl_dtype_t dt, ncl_redop_t op, double scale, int root, ncl_call_t call)
{
	struct ncl_round r;
	struct coll a = { .send = send, .recv = recv, .dt = dt, .op = op, .scale = scale, .root = root };
	int rc;

	if (c && kind == NCL_K_REDUCE && (rc = check_root(c, kind, root)))
		return rc;
	if (!ncl_redop_supported(op, dt))
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: reduce op %s is not supported for %s",
				     ncl_kind_name(kind), ncl_redop_name(op), ncl_dtype_name(dt));
	a.receives = c && (kind == NCL_K_ALL_REDUCE || c->rank == root);
	if (count && (!send || (a.receives && !recv)))
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: null buffer", ncl_kind_name(kind));
	rc = begin(c, &r, kind, &call, dt, count, op, root);
	if (rc)
		return rc;
	a.esz = ncl_dtype_size(dt);
	a.per = c->chunk / a.esz;
	if (kind == NCL_K_ALL_REDUCE && ncl_direct_wanted(c, count, a.esz) &&
	    (rc = ncl_direct_all_reduce(&r, send, recv, count, dt, op, scale)) != NCL_DIRECT_STAGED)
		return ncl_coll_end(c, r.d.seq, rc);
	return run_rounds(&r, &a, count, stage_send, consume_reduce);
}

int ncl_all_reduce(ncl_comm_t *c, const void *send, void *recv, size_t count, ncl_dtype_t dt, ncl_redop_t op,
		   double scale, ncl_call_t call)
{
	return reduce_common(NCL_K_ALL_REDUCE, c, send, recv, count, dt, op, scale, -1, call);
}

int ncl_reduce(ncl_comm_t *c, const void *send, void *recv, size_t count, ncl_dtype_t dt, ncl_redop_t op,
	       double scale, int root, ncl_call_t call)
{
	return reduce_common(NCL_K_REDUCE, c, send, recv, count, dt, op, scale, root, call);
}

static void stage_root(struct ncl_round *r, const struct coll *a, unsigned char *mine, size_t off, size_t n)
{
	if (r->c->rank == a->root)
		memcpy(mine, at(a->buf, off, a->esz), n * a->esz);
}

static int consume_root(struct ncl_round *r, const struct coll *a, size_t off, size_t n, size_t *nrounds_)
{
	if (r->c->rank != a->root)
		memcpy((char *)a->buf + off * a->esz, ncl_round_data(r, a->root), n * a->esz);
	return NCL_OK;
}

int ncl_broadcast(ncl_comm_t *c, void *buf, size_t count, ncl_dtype_t dt, int root, ncl_call_t call)
{
	struct ncl_round r;
	struct coll a = { .buf = buf, .dt = dt, .root = root };
	int rc;

	if (c && (rc = check_root(c, NCL_K_BROADCAST, root)))
		return rc;
	if (count && !buf)
		return ncl_set_error(NCL_ERR_INVALID, "ncl broadcast: null buffer");
	rc = begin(c, &r, NCL_K_BROADCAST, &call, dt, count, 0, root);
	if (rc)
		return rc;
	a.esz = ncl_dtype_size(dt);
	a.per = c->chunk / a.esz;
	if (ncl_direct_wanted(c, count, a.esz) &&
	    (rc = ncl_direct_broadcast(&r, buf, count, dt, root)) != NCL_DIRECT_STAGED)
		return ncl_coll_end(c, r.d.seq, rc);
	return run_rounds(&r, &a, count, stage_root, consume_root);
}

static int consume_gather(struct ncl_round *r, const struct coll *a, size_t off, size_t n, size_t *nrounds_)
{
	if (!a->receives)
		return NCL_OK;
	for (int p = 0; p < r->c->nranks; p++) {
		const void *src = piece(r, p, at(a->send, off, a->esz), 0);
		char *dst = (char *)a->recvs[p] + off * a->esz;

		if (dst != src)
			memmove(dst, src, n * a->esz);
	}
	return NCL_OK;
}

/* all_gather, and gather (root >= 0: only root's recvs are written). */
static int gather_common(int kind, struct ncl_comm *c, const void *send, void *const *recvs, size_t count,
			 ncl_dtype_t dt, int root, ncl_call_t call)
{
	struct ncl_round r;
	struct coll a = { .send = send, .recvs = recvs, .dt = dt, .root = root };
	int rc;

	if (c && kind == NCL_K_GATHER && (rc = check_root(c, kind, root)))
		return rc;
	a.receives = c && (kind == NCL_K_ALL_GATHER || c->rank == root);
	if (count && (!send || (a.receives && !recvs)))
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: null buffer", ncl_kind_name(kind));
	if (count && a.receives)
		for (int p = 0; p < c->nranks; p++)
			if (!recvs[p])
				return ncl_set_error(NCL_ERR_INVALID, "ncl %s: output %d is null", ncl_kind_name(kind), p);
	rc = begin(c, &r, kind, &call, dt, count, 0, root);
	if (rc)
		return rc;
	a.esz = ncl_dtype_size(dt);
	a.per = c->chunk / a.esz;
	if (kind == NCL_K_ALL_GATHER && ncl_direct_wanted(c, count, a.esz) &&
	    (rc = ncl_direct_all_gather(&r, send, recvs, count, dt)) != NCL_DIRECT_STAGED)
		return ncl_coll_end(c, r.d.seq, rc);
	return run_rounds(&r, &a, count, stage_send, consume_gather);
}

int ncl_all_gather(ncl_comm_t *c, const void *send, void *const *recvs, size_t count, ncl_dtype_t dt,
		   ncl_call_t call)
{
	return gather_common(NCL_K_ALL_GATHER, c, send, recvs, count, dt, -1, call);
}

int ncl_gather(ncl_comm_t *c, const void *send, void *const *recvs, size_t count, ncl_dtype_t dt, int root,
	       ncl_call_t call)
{
	return gather_common(NCL_K_GATHER, c, send, recvs, count, dt, root, call);
}

static int consume_reduce_block(struct ncl_round *r, const struct coll *a, size_t off, size_t n, size_t *nrounds_)
{
	const void *srcs[NCL_MAX_RANKS];
	int me = r->c->rank;

	if (!n)
		return NCL_OK;
	for (int p = 0; p < r->c->nranks; p++)
		srcs[p] = piece(r, p, at(a->sends[p], off, a->esz), (size_t)me * a->per * a->esz);
	return ncl_reduce_buffers((char *)a->recv + off * a->esz, srcs, r->c->nranks, n, a->dt, a->op, a->scale);
}

/* Checks that the n per-rank buffers of a call are non-null. */
static int check_bufs(int kind, const void *const *bufs, int n, const char *what)
{
	for (int p = 0; p < n; p++)
		if (!bufs[p])
			return ncl_set_error(NCL_ERR_INVALID, "ncl %s: %s %d is null", ncl_kind_name(kind), what, p);
	return NCL_OK;
}

int ncl_reduce_scatter(ncl_comm_t *c, const void *const *sends, void *recv, size_t count, ncl_dtype_t dt,
		       ncl_redop_t op, double scale, ncl_call_t call)
{
	struct ncl_round r;
	struct coll a = { .sends = sends, .recv = recv, .dt = dt, .op = op, .scale = scale, .root = -1 };
	int rc;

	if (!ncl_redop_supported(op, dt))
		return ncl_set_error(NCL_ERR_INVALID, "ncl reduce_scatter: reduce op %s is not supported for %s",
				     ncl_redop_name(op), ncl_dtype_name(dt));
	if (count && (!sends || !recv))
		return ncl_set_error(NCL_ERR_INVALID, "ncl reduce_scatter: null buffer");
	if (count && c && (rc = check_bufs(NCL_K_REDUCE_SCATTER, sends, c->nranks, "input")))
		return rc;
	rc = begin(c, &r, NCL_K_REDUCE_SCATTER, &call, dt, count, op, -1);
	if (rc)
		return rc;
	a.esz = ncl_dtype_size(dt);
	a.per = c->chunk / ((size_t)c->nranks * a.esz);
	if (ncl_direct_wanted(c, count, a.esz) &&
	    (rc = ncl_direct_reduce_scatter(&r, sends, recv, count, dt, op, scale)) != NCL_DIRECT_STAGED)
		return ncl_coll_end(c, r.d.seq, rc);
	return run_rounds(&r, &a, count, stage_blocks, consume_reduce_block);
}

static int consume_scatter(struct ncl_round *r, const struct coll *a, size_t off, size_t n, size_t *nrounds_)
{
	char *dst = (char *)a->recv + off * a->esz;

	if (r->c->rank == a->root)
		memmove(dst, at(a->sends[a->root], off, a->esz), n * a->esz);
	else
		memcpy(dst, ncl_round_data(r, a->root) + (size_t)r->c->rank * a->per * a->esz, n * a->esz);
	return NCL_OK;
}

int ncl_scatter(ncl_comm_t *c, const void *const *sends, void *recv, size_t count, ncl_dtype_t dt, int root,
		ncl_call_t call)
{
	struct ncl_round r;
	struct coll a = { .sends = sends, .recv = recv, .dt = dt, .root = root };
	int rc;

	if (c && (rc = check_root(c, NCL_K_SCATTER, root)))
		return rc;
	if (count && (!recv || (c && c->rank == root && !sends)))
		return ncl_set_error(NCL_ERR_INVALID, "ncl scatter: null buffer");
	if (count && c && c->rank == root && (rc = check_bufs(NCL_K_SCATTER, sends, c->nranks, "input")))
		return rc;
	rc = begin(c, &r, NCL_K_SCATTER, &call, dt, count, 0, root);
	if (rc)
		return rc;
	a.esz = ncl_dtype_size(dt);
	a.per = c->chunk / ((size_t)c->nranks * a.esz);
	return run_rounds(&r, &a, count, stage_blocks, consume_scatter);
}

/* all_to_all: each round's half is a table of the nranks send counts (checked in round 0), then nranks
 * blocks of `per` elements, block q for rank q. */
static size_t block_n(size_t total, size_t off, size_t per)
{
	size_t n = total > off ? total - off : 0;

	return n < per ? n : per;
}

static void stage_a2a(struct ncl_round *r, const struct coll *a, unsigned char *mine, size_t off, size_t n_)
{
	for (int q = 0; q < r->c->nranks; q++) {
		((uint64_t *)mine)[q] = a->send_counts[q];
		if (q != r->c->rank)
			memcpy(mine + a->table + (size_t)q * a->per * a->esz, at(a->sends[q], off, a->esz),
			       block_n(a->send_counts[q], off, a->per) * a->esz);
	}
}

/* Round 0 agrees on the number of rounds (the largest block of any rank) and checks the counts pairwise. */
static int a2a_agree(struct ncl_round *r, const struct coll *a, size_t *nrounds_)
{
	struct ncl_comm *c = r->c;
	size_t all = r->d.aux;

	for (int p = 0; p < c->nranks; p++) {
		const struct ncl_desc *o = (const struct ncl_desc *)ncl_half(c, p, r->k);
		uint64_t sent = p == c->rank ? a->send_counts[p] : ((const uint64_t *)ncl_round_data(r, p))[c->rank];

		all = o->aux > all ? o->aux : all;
		if (sent != a->recv_counts[p])
			return ncl_set_error(NCL_ERR_MISMATCH, "ncl all_to_all (seq %llu): rank %d sends %llu elements "
					     "to rank %d, which expects %zu", (unsigned long long)r->d.seq, p,
					     (unsigned long long)sent, c->rank, a->recv_counts[p]);
	}
	*nrounds_ = nrounds(all, a->per);
	return NCL_OK;
}

static int consume_a2a(struct ncl_round *r, const struct coll *a, size_t off, size_t n_, size_t *nrounds_)
{
	int rc = r->d.round == 0 ? a2a_agree(r, a, nrounds_) : NCL_OK;

	for (int p = 0; p < r->c->nranks && !rc; p++) {
		size_t n = block_n(a->recv_counts[p], off, a->per);
		const void *src = piece(r, p, at(a->sends[p], off, a->esz), a->table + (size_t)r->c->rank * a->per * a->esz);

		if (n && (char *)a->recvs[p] + off * a->esz != src)
			memmove((char *)a->recvs[p] + off * a->esz, src, n * a->esz);
	}
	return rc;
}

int ncl_all_to_all(ncl_comm_t *c, const void *const *sends, const size_t *send_counts, void *const *recvs,
		   const size_t *recv_counts, ncl_dtype_t dt, ncl_call_t call)
{
	struct ncl_round r;
	struct coll a = { .sends = sends, .recvs = recvs, .send_counts = send_counts, .recv_counts = recv_counts,
			  .dt = dt, .root = -1 };
	size_t most = 0;
	int rc;

	if (!c || !sends || !send_counts || !recvs || !recv_counts)
		return ncl_set_error(NCL_ERR_INVALID, "ncl all_to_all: null argument");
	for (int q = 0; q < c->nranks; q++) {
		if ((send_counts[q] && !sends[q]) || (recv_counts[q] && !recvs[q]))
			return ncl_set_error(NCL_ERR_INVALID, "ncl all_to_all: buffer %d is null", q);
		most = send_counts[q] > most ? send_counts[q] : most;
		most = recv_counts[q] > most ? recv_counts[q] : most;
	}
	rc = begin(c, &r, NCL_K_ALL_TO_ALL, &call, dt, 0, 0, -1);
	if (rc)
		return rc;
	a.esz = ncl_dtype_size(dt);
	a.table = ((size_t)c->nranks * 8 + 63) & ~(size_t)63;
	a.per = (c->chunk - a.table) / ((size_t)c->nranks * a.esz);
	r.d.aux = most;
	if (c->direct_min && (rc = ncl_direct_all_to_all(&r, sends, send_counts, recvs, recv_counts, dt)) !=
	    NCL_DIRECT_STAGED)
		return ncl_coll_end(c, r.d.seq, rc);
	return run_rounds(&r, &a, 0, stage_a2a, consume_a2a); /* 1 round until round 0 tells */
}

int ncl_barrier(ncl_comm_t *c, ncl_call_t call)
{
	struct ncl_round r;
	struct coll a = { .esz = 1, .per = 1, .root = -1 };
	int rc = begin(c, &r, NCL_K_BARRIER, &call, NCL_U8, 0, 0, -1);

	return rc ? rc : run_rounds(&r, &a, 0, NULL, NULL);
}

int ncl_split_counts(const int64_t *splits, size_t nsplits, int64_t dim0, int64_t row, int nranks,
		     const char *which, size_t *counts)
{
	int64_t sum = 0;

	if (nranks < 1 || !counts || (nsplits && !splits))
		return ncl_set_error(NCL_ERR_INVALID, "ncl all_to_all: null argument");
	if (nsplits == 0) {
		if (dim0 < 0 || dim0 % nranks)
			return ncl_set_error(NCL_ERR_INVALID, "ncl all_to_all: %s dim 0 (%lld) is not divisible by the "
					     "group size %d", which, (long long)dim0, nranks);
		for (int p = 0; p < nranks; p++)
			counts[p] = (size_t)(dim0 / nranks * row);
		return NCL_OK;
	}
	if (nsplits != (size_t)nranks)
		return ncl_set_error(NCL_ERR_INVALID, "ncl all_to_all: %s split sizes need %d entries, got %zu", which,
				     nranks, nsplits);
	for (int p = 0; p < nranks; p++) {
		if (splits[p] < 0 || splits[p] > dim0)
			return ncl_set_error(NCL_ERR_INVALID, "ncl all_to_all: %s split size %lld is out of range",
					     which, (long long)splits[p]);
		counts[p] = (size_t)(splits[p] * row);
		sum += splits[p];
	}
	if (sum != dim0)
		return ncl_set_error(NCL_ERR_INVALID, "ncl all_to_all: %s split sizes sum to %lld, dim 0 is %lld", which,
				     (long long)sum, (long long)dim0);
	return NCL_OK;
}
