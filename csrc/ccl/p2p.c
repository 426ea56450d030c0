/* p2p.c - send and recv: the channel src->dst carries a message as numbered chunks through two halves
 * (ncl_impl.h).  The sender stages chunk k in half k % 2 once the receiver has acknowledged chunk k - 2;
 * each chunk's descriptor carries the message number, count, dtype and tag, which the receiver checks
 * against its own call.  Messages between two ranks arrive in the order sent; concurrent sends to the
 * same peer (and concurrent receives from the same peer) take turns.
 */
#include <string.h>
#include <unistd.h>

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

/* The receiver's check of chunk i of message msg against its own call. */
static int check_chunk(const struct ncl_desc *d, uint64_t msg, size_t i, size_t count, ncl_dtype_t dt, int peer,
		       int tag)
{
	if (d->seq == msg && d->count == count && d->dtype == dt && d->root == tag && d->round == i)
		return NCL_OK;
	return ncl_set_error(NCL_ERR_MISMATCH, "ncl recv (message %llu from rank %d): rank %d sent %llu %s elements "
			     "with tag %d, this rank expects %zu %s elements with tag %d", (unsigned long long)msg, peer,
			     peer, (unsigned long long)d->count, ncl_dtype_name(d->dtype), d->root, count,
			     ncl_dtype_name(dt), tag);
}

/* One message over the channel this rank -> peer (send) or peer -> this rank (recv), chunk by chunk: the
 * sender waits until the receiver acknowledged chunk k - 2, stages chunk k (descriptor + data) and
 * publishes sent = k; the receiver waits for sent = k, checks the descriptor, copies and publishes
 * acked = k. */
static int p2p_move(struct ncl_comm *c, int kind, void *buf, size_t count, ncl_dtype_t dt, int peer, int tag,
		    int64_t timeout_ms)
{
	bool send = kind == NCL_K_SEND;
	int src = send ? c->rank : peer, dst = send ? peer : c->rank;
	struct ncl_p2p_ctl *ch = &c->p2p[(size_t)src * c->nranks + dst];
	pthread_mutex_t *lock = send ? &c->p2p_send_lock[peer] : &c->p2p_recv_lock[peer];
	uint32_t *chunks = send ? &c->p2p_sent_n[peer] : &c->p2p_recv_n[peer];
	size_t bytes = count * ncl_dtype_size(dt);
	int64_t deadline = ncl_now_ms() + timeout_ms;
	struct ncl_desc d = { .count = count, .kind = NCL_K_SEND, .dtype = (uint8_t)dt, .root = tag };
	int rc = NCL_OK;

	pthread_mutex_lock(lock);
	d.seq = send ? ++c->p2p_msg_sent[peer] : ++c->p2p_msg_recv[peer];
	for (size_t i = 0, n_c = nchunks(bytes, c->p2p_chunk); i < n_c && !rc; i++) {
		size_t off = i * c->p2p_chunk, n = bytes == 0 ? 0 : bytes - off < c->p2p_chunk ? bytes - off : c->p2p_chunk;
		uint32_t k = ++*chunks;
		unsigned char *half = ncl_p2p_half(c, src, dst, k);

		if (send) {
			if (k > 2 && (rc = ncl_wait_word(c, peer, &ch->acked, k - 2, deadline, kind, d.seq,
							 "receive (post the matching recv)")))
				break;
			d.round = (uint32_t)i;
			d.aux = off;
			memcpy(half, &d, sizeof d);
			memcpy(half + NCL_DESC_BYTES, (const char *)buf + off, n);
			atomic_store(&ch->sent, k);
		} else {
			rc = ncl_wait_word(c, peer, &ch->sent, k, deadline, kind, d.seq, "send (post the matching send)");
			if (!rc)
				rc = check_chunk((const struct ncl_desc *)half, d.seq, i, count, dt, peer, tag);
			if (rc)
				break;
			memcpy((char *)buf + off, half + NCL_DESC_BYTES, n);
			atomic_store(&ch->acked, k);
		}
		ncl_ring(c);
	}
	pthread_mutex_unlock(lock);
	return rc ? ncl_fail(c, rc) : NCL_OK;
}

int ncl_send(ncl_comm_t *c, const void *buf, size_t count, ncl_dtype_t dt, int peer, int tag, int64_t timeout_ms)
{
	int rc = p2p_check(c, NCL_K_SEND, buf, count, dt, peer, timeout_ms);

	return rc ? rc : p2p_move(c, NCL_K_SEND, (void *)buf, count, dt, peer, tag, timeout_ms);
}

int ncl_recv(ncl_comm_t *c, void *buf, size_t count, ncl_dtype_t dt, int peer, int tag, int64_t timeout_ms)
{
	int rc = p2p_check(c, NCL_K_RECV, buf, count, dt, peer, timeout_ms);

	return rc ? rc : p2p_move(c, NCL_K_RECV, buf, count, dt, peer, tag, timeout_ms);
}

/* Whether peer has published the first chunk of a message with this tag that this rank has not read. */
static bool pending_from(struct ncl_comm *c, int peer, int tag)
{
	struct ncl_p2p_ctl *ch = &c->p2p[(size_t)peer * c->nranks + c->rank];
	uint32_t k;
	bool yes;

	pthread_mutex_lock(&c->p2p_recv_lock[peer]);
	k = c->p2p_recv_n[peer] + 1;
	yes = (int32_t)(atomic_load(&ch->sent) - k) >= 0;
	if (yes) {
		const struct ncl_desc *d = (const struct ncl_desc *)ncl_p2p_half(c, peer, c->rank, k);

		yes = d->round == 0 && d->root == tag;
	}
	pthread_mutex_unlock(&c->p2p_recv_lock[peer]);
	return yes;
}

int ncl_recv_any(ncl_comm_t *c, void *buf, size_t count, ncl_dtype_t dt, int tag, int64_t timeout_ms, int *src)
{
	int64_t deadline;
	int rc;

	if (!c || !src)
		return ncl_set_error(NCL_ERR_INVALID, "ncl recv (any source): null argument");
	if (c->nranks < 2)
		return ncl_set_error(NCL_ERR_INVALID, "ncl recv (any source): no other rank in the group");
	rc = p2p_check(c, NCL_K_RECV, buf, count, dt, c->rank == 0 ? 1 : 0, timeout_ms);
	if (rc)
		return rc;
	deadline = ncl_now_ms() + timeout_ms;
	for (;;) { /* poll every peer's channel, 0.2 ms apart */
		for (int p = 0; p < c->nranks; p++)
			if (p != c->rank && pending_from(c, p, tag)) {
				*src = p;
				return p2p_move(c, NCL_K_RECV, buf, count, dt, p, tag, deadline - ncl_now_ms() > 0 ?
						deadline - ncl_now_ms() : 1);
			}
		if ((rc = ncl_check_usable(c, NCL_K_RECV, 0)))
			return rc;
		if (ncl_now_ms() >= deadline)
			return ncl_fail(c, ncl_set_error(NCL_ERR_TIMEOUT, "ncl recv (any source): timed out after %lld "
							 "ms: no rank sent a message with tag %d", (long long)timeout_ms, tag));
		usleep(200);
	}
}
