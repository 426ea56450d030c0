/* coll.c - the collectives, as rounds over the ranks' staging halves (the protocol is described in
 * ncl_impl.h).  Each round moves at most one chunk per rank: the caller's data is cut into pieces of
 * chunk bytes (or, where a rank sends a different block to each peer, into nranks sub-blocks of a chunk),
 * staged by its owner, and read (reduced or copied) by the others straight from the owner's half.
 */
#include <string.h>

#include "ncl_impl.h"

struct round {
	struct ncl_comm *c;
	struct ncl_desc d; /* this rank's descriptor for the current round */
	int64_t deadline;
	uint32_t k;        /* the round's global number (this rank's step) */
};

/* Waits until the half this round uses is free on every rank, then writes the descriptor; returns the
 * half's data area in *mine. */
static int round_acquire(struct round *r, unsigned char **mine)
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

static int desc_mismatch(struct round *r, int p, const struct ncl_desc *o)
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
static int round_exchange(struct round *r)
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

static void round_release(struct round *r)
{
	atomic_store(&r->c->ctl[r->c->rank].consumed, r->k);
	ncl_ring(r->c);
}

static const unsigned char *peer_data(struct round *r, int p)
{
	return ncl_half(r->c, p, r->k) + NCL_DESC_BYTES;
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
static int begin(struct ncl_comm *c, struct round *r, int kind, ncl_call_t *call, ncl_dtype_t dt, size_t count,
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
	r->d.seq = call->seq;
	r->d.count = count;
	r->d.kind = (uint16_t)kind;
	r->d.dtype = (uint8_t)dt;
	r->d.redop = (uint8_t)redop;
	r->d.root = root;
	return NCL_OK;
}

static size_t nrounds(size_t count, size_t per)
{
	return count == 0 ? 1 : (count + per - 1) / per;
}

/* all_reduce, and reduce (root >= 0: only root reduces into recv). */
static int reduce_common(int kind, struct ncl_comm *c, const void *send, void *recv, size_t count,
			 ncl_dtype_t dt, ncl_redop_t op, double scale, int root, ncl_call_t call)
{
	struct round r;
	const void *srcs[NCL_MAX_RANKS];
	size_t esz = ncl_dtype_size(dt), per;
	int rc;

	if (c && kind == NCL_K_REDUCE && (rc = check_root(c, kind, root)))
		return rc;
	if (!ncl_redop_supported(op, dt))
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: reduce op %s is not supported for %s",
				     ncl_kind_name(kind), ncl_redop_name(op), ncl_dtype_name(dt));
	if (count && (!send || (!recv && (kind == NCL_K_ALL_REDUCE || (c && c->rank == root)))))
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: null buffer", ncl_kind_name(kind));
	rc = begin(c, &r, kind, &call, dt, count, op, root);
	if (rc)
		return rc;
	per = c->chunk / esz;
	for (size_t i = 0, n_r = nrounds(count, per); i < n_r && !rc; i++) {
		size_t off = i * per, n = count - off < per ? count - off : per;
		unsigned char *mine;

		if (count == 0)
			n = 0;
		r.d.round = (uint32_t)i;
		rc = round_acquire(&r, &mine);
		if (rc)
			break;
		memcpy(mine, (const char *)send + off * esz, n * esz);
		rc = round_exchange(&r);
		if (rc)
			break;
		if (n && (kind == NCL_K_ALL_REDUCE || c->rank == root)) {
			for (int p = 0; p < c->nranks; p++)
				srcs[p] = p == c->rank ? (const char *)send + off * esz : (const void *)peer_data(&r, p);
			rc = ncl_reduce_buffers((char *)recv + off * esz, srcs, c->nranks, n, dt, op, scale);
		}
		round_release(&r);
	}
	return ncl_coll_end(c, r.d.seq, rc);
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

int ncl_broadcast(ncl_comm_t *c, void *buf, size_t count, ncl_dtype_t dt, int root, ncl_call_t call)
{
	struct round r;
	size_t esz = ncl_dtype_size(dt), per;
	int rc;

	if (c && (rc = check_root(c, NCL_K_BROADCAST, root)))
		return rc;
	if (count && !buf)
		return ncl_set_error(NCL_ERR_INVALID, "ncl broadcast: null buffer");
	rc = begin(c, &r, NCL_K_BROADCAST, &call, dt, count, 0, root);
	if (rc)
		return rc;
	per = c->chunk / esz;
	for (size_t i = 0, n_r = nrounds(count, per); i < n_r && !rc; i++) {
		size_t off = i * per, n = count == 0 ? 0 : count - off < per ? count - off : per;
		unsigned char *mine;

		r.d.round = (uint32_t)i;
		rc = round_acquire(&r, &mine);
		if (rc)
			break;
		if (c->rank == root)
			memcpy(mine, (const char *)buf + off * esz, n * esz);
		rc = round_exchange(&r);
		if (rc)
			break;
		if (c->rank != root)
			memcpy((char *)buf + off * esz, peer_data(&r, root), n * esz);
		round_release(&r);
	}
	return ncl_coll_end(c, r.d.seq, rc);
}

/* all_gather, and gather (root >= 0: only root's recvs are written). */
static int gather_common(int kind, struct ncl_comm *c, const void *send, void *const *recvs, size_t count,
			 ncl_dtype_t dt, int root, ncl_call_t call)
{
	struct round r;
	size_t esz = ncl_dtype_size(dt), per;
	bool receives;
	int rc;

	if (c && kind == NCL_K_GATHER && (rc = check_root(c, kind, root)))
		return rc;
	receives = c && (kind == NCL_K_ALL_GATHER || c->rank == root);
	if (count && (!send || (receives && !recvs)))
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: null buffer", ncl_kind_name(kind));
	if (count && receives)
		for (int p = 0; p < c->nranks; p++)
			if (!recvs[p])
				return ncl_set_error(NCL_ERR_INVALID, "ncl %s: output %d is null", ncl_kind_name(kind), p);
	rc = begin(c, &r, kind, &call, dt, count, 0, root);
	if (rc)
		return rc;
	per = c->chunk / esz;
	for (size_t i = 0, n_r = nrounds(count, per); i < n_r && !rc; i++) {
		size_t off = i * per, n = count == 0 ? 0 : count - off < per ? count - off : per;
		unsigned char *mine;

		r.d.round = (uint32_t)i;
		rc = round_acquire(&r, &mine);
		if (rc)
			break;
		memcpy(mine, (const char *)send + off * esz, n * esz);
		rc = round_exchange(&r);
		if (rc)
			break;
		if (receives)
			for (int p = 0; p < c->nranks; p++) {
				const void *src = p == c->rank ? (const char *)send + off * esz : (const void *)peer_data(&r, p);
				char *dst = (char *)recvs[p] + off * esz;

				if (dst != src)
					memmove(dst, src, n * esz);
			}
		round_release(&r);
	}
	return ncl_coll_end(c, r.d.seq, rc);
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

int ncl_reduce_scatter(ncl_comm_t *c, const void *const *sends, void *recv, size_t count, ncl_dtype_t dt,
		       ncl_redop_t op, double scale, ncl_call_t call)
{
	struct round r;
	const void *srcs[NCL_MAX_RANKS];
	size_t esz = ncl_dtype_size(dt), per;
	int rc;

	if (!ncl_redop_supported(op, dt))
		return ncl_set_error(NCL_ERR_INVALID, "ncl reduce_scatter: reduce op %s is not supported for %s",
				     ncl_redop_name(op), ncl_dtype_name(dt));
	if (count && (!sends || !recv))
		return ncl_set_error(NCL_ERR_INVALID, "ncl reduce_scatter: null buffer");
	if (count && c)
		for (int p = 0; p < c->nranks; p++)
			if (!sends[p])
				return ncl_set_error(NCL_ERR_INVALID, "ncl reduce_scatter: input %d is null", p);
	rc = begin(c, &r, NCL_K_REDUCE_SCATTER, &call, dt, count, op, -1);
	if (rc)
		return rc;
	per = c->chunk / ((size_t)c->nranks * esz);
	for (size_t i = 0, n_r = nrounds(count, per); i < n_r && !rc; i++) {
		size_t off = i * per, n = count == 0 ? 0 : count - off < per ? count - off : per;
		unsigned char *mine;

		r.d.round = (uint32_t)i;
		rc = round_acquire(&r, &mine);
		if (rc)
			break;
		for (int q = 0; q < c->nranks; q++)
			if (q != c->rank)
				memcpy(mine + (size_t)q * per * esz, (const char *)sends[q] + off * esz, n * esz);
		rc = round_exchange(&r);
		if (rc)
			break;
		if (n) {
			for (int p = 0; p < c->nranks; p++)
				srcs[p] = p == c->rank ? (const void *)((const char *)sends[p] + off * esz)
						       : (const void *)(peer_data(&r, p) + (size_t)c->rank * per * esz);
			rc = ncl_reduce_buffers((char *)recv + off * esz, srcs, c->nranks, n, dt, op, scale);
		}
		round_release(&r);
	}
	return ncl_coll_end(c, r.d.seq, rc);
}

int ncl_scatter(ncl_comm_t *c, const void *const *sends, void *recv, size_t count, ncl_dtype_t dt, int root,
		ncl_call_t call)
{
	struct round r;
	size_t esz = ncl_dtype_size(dt), per;
	int rc;

	if (c && (rc = check_root(c, NCL_K_SCATTER, root)))
		return rc;
	if (count && (!recv || (c && c->rank == root && !sends)))
		return ncl_set_error(NCL_ERR_INVALID, "ncl scatter: null buffer");
	if (count && c && c->rank == root)
		for (int p = 0; p < c->nranks; p++)
			if (!sends[p])
				return ncl_set_error(NCL_ERR_INVALID, "ncl scatter: input %d is null", p);
	rc = begin(c, &r, NCL_K_SCATTER, &call, dt, count, 0, root);
	if (rc)
		return rc;
	per = c->chunk / ((size_t)c->nranks * esz);
	for (size_t i = 0, n_r = nrounds(count, per); i < n_r && !rc; i++) {
		size_t off = i * per, n = count == 0 ? 0 : count - off < per ? count - off : per;
		unsigned char *mine;

		r.d.round = (uint32_t)i;
		rc = round_acquire(&r, &mine);
		if (rc)
			break;
		if (c->rank == root)
			for (int q = 0; q < c->nranks; q++)
				if (q != root)
					memcpy(mine + (size_t)q * per * esz, (const char *)sends[q] + off * esz, n * esz);
		rc = round_exchange(&r);
		if (rc)
			break;
		if (c->rank == root)
			memmove((char *)recv + off * esz, (const char *)sends[root] + off * esz, n * esz);
		else
			memcpy((char *)recv + off * esz, peer_data(&r, root) + (size_t)c->rank * per * esz, n * esz);
		round_release(&r);
	}
	return ncl_coll_end(c, r.d.seq, rc);
}

/* Each round's half: a table of the nranks send counts (round 0 only is checked), then nranks blocks of
 * `per` elements, block q for rank q. */
int ncl_all_to_all(ncl_comm_t *c, const void *const *sends, const size_t *send_counts, void *const *recvs,
		   const size_t *recv_counts, ncl_dtype_t dt, ncl_call_t call)
{
	struct round r;
	size_t esz = ncl_dtype_size(dt), per, table, most = 0, n_r = 1;
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
	table = ((size_t)c->nranks * 8 + 63) & ~(size_t)63;
	per = (c->chunk - table) / ((size_t)c->nranks * esz);
	r.d.aux = most;
	for (size_t i = 0; i < n_r && !rc; i++) {
		size_t off = i * per;
		unsigned char *mine;

		r.d.round = (uint32_t)i;
		rc = round_acquire(&r, &mine);
		if (rc)
			break;
		for (int q = 0; q < c->nranks; q++) {
			size_t n = send_counts[q] > off ? send_counts[q] - off : 0;

			n = n < per ? n : per;
			((uint64_t *)mine)[q] = send_counts[q];
			if (q != c->rank)
				memcpy(mine + table + (size_t)q * per * esz, (const char *)sends[q] + off * esz, n * esz);
		}
		rc = round_exchange(&r);
		if (rc)
			break;
		if (i == 0) { /* agree on the number of rounds, check the counts pairwise */
			size_t all = most;

			for (int p = 0; p < c->nranks; p++) {
				const struct ncl_desc *o = (const struct ncl_desc *)ncl_half(c, p, r.k);
				uint64_t sent = p == c->rank ? send_counts[p] : ((const uint64_t *)peer_data(&r, p))[c->rank];

				all = o->aux > all ? o->aux : all;
				if (sent != recv_counts[p]) {
					rc = ncl_set_error(NCL_ERR_MISMATCH, "ncl all_to_all (seq %llu): rank %d sends %llu "
							   "elements to rank %d, which expects %zu", (unsigned long long)r.d.seq,
							   p, (unsigned long long)sent, c->rank, recv_counts[p]);
					break;
				}
			}
			n_r = nrounds(all, per);
		}
		for (int p = 0; p < c->nranks && !rc; p++) {
			size_t n = recv_counts[p] > off ? recv_counts[p] - off : 0;
			const void *src;

			n = n < per ? n : per;
			src = p == c->rank ? (const void *)((const char *)sends[p] + off * esz)
					   : (const void *)(peer_data(&r, p) + table + (size_t)c->rank * per * esz);
			if (n && (char *)recvs[p] + off * esz != src)
				memmove((char *)recvs[p] + off * esz, src, n * esz);
		}
		round_release(&r);
	}
	return ncl_coll_end(c, r.d.seq, rc);
}

int ncl_barrier(ncl_comm_t *c, ncl_call_t call)
{
	struct round r;
	unsigned char *mine;
	int rc = begin(c, &r, NCL_K_BARRIER, &call, NCL_U8, 0, 0, -1);

	if (rc)
		return rc;
	rc = round_acquire(&r, &mine);
	if (!rc)
		rc = round_exchange(&r);
	if (!rc)
		round_release(&r);
	return ncl_coll_end(c, r.d.seq, rc);
}
