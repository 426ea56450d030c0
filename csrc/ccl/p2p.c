/* p2p.c - send and recv: the channel src->dst carries a message as numbered chunks through two halves
 * (ncl_impl.h).  The sender stages chunk k in half k % 2 once the receiver has acknowledged chunk k - 2;
 * each chunk's descriptor carries the message number, count, dtype and tag, which the receiver checks
 * against its own call.  Messages between two ranks arrive in the order sent; concurrent sends to the
 * same peer (and concurrent receives from the same peer) take turns.
 */
#include <string.h>

#include "ncl_impl.h"

static int p2p_check(struct ncl_comm *c, int kind, const void *buf, size_t count, ncl_dtype_t dt, int peer,
		     int64_t timeout_ms)
{
	if (!c)
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: null communicator", ncl_kind_name(kind));
	if (!ncl_dtype_size(dt))
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: unsupported dtype %d", ncl_kind_name(kind), (int)dt);
	if (peer < 0 || peer >= c->nranks || peer == c->rank)
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: peer rank %d is invalid (group of %d ranks, this is "
				     "rank %d)", ncl_kind_name(kind), peer, c->nranks, c->rank);
	if (count && !buf)
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: null buffer", ncl_kind_name(kind));
	if (timeout_ms <= 0)
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: timeout of %lld ms (expected > 0)",
				     ncl_kind_name(kind), (long long)timeout_ms);
	return ncl_check_usable(c, kind, 0);
}

static size_t nchunks(size_t bytes, size_t per)
{
	return bytes == 0 ? 1 : (bytes + per - 1) / per;
}

int ncl_send(ncl_comm_t *c, const void *buf, size_t count, ncl_dtype_t dt, int peer, int tag, int64_t timeout_ms)
{
	struct ncl_p2p_ctl *ch;
	struct ncl_desc d = { 0 };
	size_t bytes, esz;
	int64_t deadline;
	int rc = p2p_check(c, NCL_K_SEND, buf, count, dt, peer, timeout_ms);

	if (rc)
		return rc;
	esz = ncl_dtype_size(dt);
	bytes = count * esz;
	deadline = ncl_now_ms() + timeout_ms;
	ch = &c->p2p[(size_t)c->rank * c->nranks + peer];
	pthread_mutex_lock(&c->p2p_send_lock[peer]);
	d.seq = ++c->p2p_msg_sent[peer];
	d.count = count;
	d.kind = NCL_K_SEND;
	d.dtype = (uint8_t)dt;
	d.root = tag;
	for (size_t i = 0, n_c = nchunks(bytes, c->p2p_chunk); i < n_c; i++) {
		size_t off = i * c->p2p_chunk, n = bytes - off < c->p2p_chunk ? bytes - off : c->p2p_chunk;
		uint32_t k = ++c->p2p_sent_n[peer];
		unsigned char *half = ncl_p2p_half(c, c->rank, peer, k);

		if (bytes == 0)
			n = 0;
		if (k > 2) {
			rc = ncl_wait_word(c, peer, &ch->acked, k - 2, deadline, NCL_K_SEND, d.seq,
					   "receive (post the matching recv)");
			if (rc)
				break;
		}
		d.round = (uint32_t)i;
		d.aux = off;
		memcpy(half, &d, sizeof d);
		memcpy(half + NCL_DESC_BYTES, (const char *)buf + off, n);
		atomic_store(&ch->sent, k);
		ncl_ring(c);
	}
	pthread_mutex_unlock(&c->p2p_send_lock[peer]);
	return rc ? ncl_fail(c, rc) : NCL_OK;
}

int ncl_recv(ncl_comm_t *c, void *buf, size_t count, ncl_dtype_t dt, int peer, int tag, int64_t timeout_ms)
{
	struct ncl_p2p_ctl *ch;
	size_t bytes, esz;
	uint64_t msg;
	int64_t deadline;
	int rc = p2p_check(c, NCL_K_RECV, buf, count, dt, peer, timeout_ms);

	if (rc)
		return rc;
	esz = ncl_dtype_size(dt);
	bytes = count * esz;
	deadline = ncl_now_ms() + timeout_ms;
	ch = &c->p2p[(size_t)peer * c->nranks + c->rank];
	pthread_mutex_lock(&c->p2p_recv_lock[peer]);
	msg = ++c->p2p_msg_recv[peer];
	for (size_t i = 0, n_c = nchunks(bytes, c->p2p_chunk); i < n_c; i++) {
		size_t off = i * c->p2p_chunk, n = bytes - off < c->p2p_chunk ? bytes - off : c->p2p_chunk;
		uint32_t k = ++c->p2p_recv_n[peer];
		const unsigned char *half = ncl_p2p_half(c, peer, c->rank, k);
		const struct ncl_desc *d = (const struct ncl_desc *)half;

		if (bytes == 0)
			n = 0;
		rc = ncl_wait_word(c, peer, &ch->sent, k, deadline, NCL_K_RECV, msg, "send (post the matching send)");
		if (rc)
			break;
		if (d->seq != msg || d->count != count || d->dtype != dt || d->root != tag || d->round != i) {
			rc = ncl_set_error(NCL_ERR_MISMATCH, "ncl recv (message %llu from rank %d): rank %d sent %llu %s "
					   "elements with tag %d, this rank expects %zu %s elements with tag %d",
					   (unsigned long long)msg, peer, peer, (unsigned long long)d->count,
					   ncl_dtype_name(d->dtype), d->root, count, ncl_dtype_name(dt), tag);
			break;
		}
		memcpy((char *)buf + off, half + NCL_DESC_BYTES, n);
		atomic_store(&ch->acked, k);
		ncl_ring(c);
	}
	pthread_mutex_unlock(&c->p2p_recv_lock[peer]);
	return rc ? ncl_fail(c, rc) : NCL_OK;
}
