/* ncl_impl.h - layout of a communicator's shared segment and its process-local state.  Only csrc/ccl
 * includes this.
 *
 * Segment: [ncl_hdr][nranks x ncl_rank_ctl][nranks^2 x ncl_p2p_ctl][nranks x 2 collective halves]
 * [nranks^2 x 2 p2p halves].  Each half is a 64-byte descriptor followed by chunk (or p2p_chunk) bytes.
 *
 * Collective rounds: rank r's k-th round (k = 1, 2, ...) uses its half k % 2.  Before writing it, r
 * waits until every rank has consumed round k - 2 (the last user of that half); it writes the
 * descriptor and its data, publishes posted = k and waits until every rank has posted k, checks their
 * descriptors against its own, reads what it needs from their halves and publishes consumed = k.
 * Point to point: the channel src->dst carries chunks numbered 1, 2, ... in halves n % 2 the same way
 * (sent / acked).  Every counter is a 32-bit word compared modulo 2^32.  A rank bumps its `bell` after
 * each publication and wakes the futex waiters counted in `waiters`; waiters sleep on the bell of the
 * rank they wait for, in slices, checking between slices whether that rank died (its robust `life`
 * mutex), departed or failed, and the deadline.
 */
#ifndef NCL_IMPL_H
#define NCL_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "ncl.h"

#define NCL_MAGIC 0x4e434c31u /* "NCL1" */
#define NCL_DESC_BYTES 64
#define NCL_ERRMSG 512
#define NCL_NAME_MAX 200
#define NCL_MAX_RANKS 64

struct ncl_hdr {
	atomic_uint magic; /* written last by the creator */
	uint32_t nranks;
	uint64_t chunk, p2p_chunk, size;
	uint64_t direct_min; /* creator's NEURON_CCL_DIRECT_MIN: bytes from which calls go direct; 0 never */
	_Alignas(64) atomic_uint attached; /* futex word: ranks attached and alive-marked */
	atomic_uint attach_waiters;
};

struct ncl_rank_ctl {
	_Alignas(64) atomic_uint bell; /* futex word, bumped after every publication */
	atomic_uint waiters;
	atomic_uint posted, consumed;
	atomic_int live;     /* life mutex held */
	atomic_int departed; /* ncl_comm_destroy ran */
	atomic_int failed;   /* NCL_ERR_* of the rank's failed call, 0 if none */
	int32_t pid;
	atomic_uint_fast64_t cur_seq; /* collective the rank is in (or last entered) */
	atomic_int cur_kind;
	uint64_t probe_addr; /* address of the rank's ncl_comm.probe word (direct.c reads it at ready) */
	/* direct.c: pieces of this rank's work queues claimed so far in the current direct call, by any
	 * rank ([0]: the reductions' slice or block of this rank; [p]: copies from rank p to this rank);
	 * reset by this rank before it publishes the agreement round */
	_Alignas(64) atomic_uint_fast64_t claim[NCL_MAX_RANKS];
	char errmsg[NCL_ERRMSG]; /* written before failed is set */
	pthread_mutex_t life;    /* robust, process-shared: locked by the rank's life thread */
};

struct ncl_p2p_ctl {
	_Alignas(64) atomic_uint sent; /* chunks the sender published */
	atomic_uint acked;             /* chunks the receiver consumed */
};

/* The descriptor at the head of each half. */
struct ncl_desc {
	uint64_t seq;   /* collective sequence number, or p2p message number */
	uint64_t count; /* elements of the whole call (0 where counts may differ) */
	uint64_t aux;   /* per kind: all_to_all the largest block count; p2p the chunk's element offset */
	uint32_t round;
	int32_t root;   /* root rank, or p2p tag */
	uint16_t kind;
	uint8_t dtype, redop;
};

enum ncl_kind {
	NCL_K_NONE, NCL_K_ALL_REDUCE, NCL_K_REDUCE, NCL_K_BROADCAST, NCL_K_ALL_GATHER, NCL_K_GATHER,
	NCL_K_REDUCE_SCATTER, NCL_K_SCATTER, NCL_K_ALL_TO_ALL, NCL_K_BARRIER, NCL_K_SEND, NCL_K_RECV,
	NCL_K_COUNT
};

/* order.c: tickets, and which ran last */
struct ncl_order {
	atomic_uint_fast64_t next; /* last ticket taken */
	atomic_uint_fast64_t done; /* highest ticket that ran (or failed) */
	atomic_int aborted;
	pthread_mutex_t lock;      /* cv */
	pthread_cond_t cv;
};
void ncl_order_init(struct ncl_order *o);
void ncl_order_fini(struct ncl_order *o);
/* Waits until every ticket below seq is done, or check(ctx) fails, or abort, or the deadline (ms). */
int ncl_order_turn(struct ncl_order *o, uint64_t seq, int64_t deadline, int (*check)(void *), void *ctx,
		   const char *what);

/* A record of one collective of this rank (Flight Recorder style): the last NCL_RECS are kept, and a
 * timeout, dead peer or mismatch lists them in the error. */
#define NCL_RECS 8
struct ncl_rec {
	uint64_t seq, count;
	int64_t start_ms, end_ms;
	int kind, status;
	int dtype;
	bool done;
};

struct ncl_comm {
	char name[NCL_NAME_MAX];
	int rank, nranks;
	bool linked; /* rank 0: the name still exists */
	void *base;
	size_t size, chunk, p2p_chunk;
	struct ncl_hdr *hdr;
	struct ncl_rank_ctl *ctl;
	struct ncl_p2p_ctl *p2p;
	unsigned char *halves, *p2p_halves;

	uint32_t step;              /* rounds this rank posted */
	uint32_t *p2p_sent_n;       /* per peer: chunks sent to it */
	uint32_t *p2p_recv_n;       /* per peer: chunks received from it */
	uint64_t *p2p_msg_sent;     /* per peer: messages sent (for the descriptor) */
	uint64_t *p2p_msg_recv;
	pthread_mutex_t *p2p_send_lock, *p2p_recv_lock; /* per peer: one message at a time */
	bool *dead;                 /* per peer: seen dead (we then hold its life mutex) */

	struct ncl_order order;        /* collectives run in ticket order within the process */
	struct ncl_rec recs[NCL_RECS]; /* the last collectives (written by the one running at a time) */
	uint64_t nrecs;
	pthread_mutex_t call_lock;     /* one collective at a time (the ticket holder) */

	/* direct.c: single-copy collectives through the peers' memory */
	uint64_t probe;          /* a known value the peers read to test that they can reach this process */
	bool direct_ok;          /* every peer's memory is readable and writable from here */
	size_t direct_min;       /* bytes from which a call goes direct (hdr->direct_min; 0 never) */
	unsigned char *scratch;  /* nranks x NCL_DIRECT_PIECE, allocated at the first direct call */
	uint64_t direct_calls;   /* calls that went direct (test hook) */
	uint64_t direct_pieces;  /* pieces this rank reduced or copied in them (test hook) */
	uint64_t claim_cap;      /* test hook: pieces this rank may claim per direct call (UINT64_MAX) */

	atomic_int aborted;
	atomic_int broken; /* first error status, 0 if none */
	char broken_msg[768];
	pthread_mutex_t broken_lock;

	pthread_t life_thread;
	pthread_mutex_t life_lock;
	pthread_cond_t life_cv;
	int life_state; /* 0 not started, 1 holding, 2 stop requested, 3 stopped, -1 failed */
};

/* comm.c */
int ncl_set_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int64_t ncl_now_ms(void);
const char *ncl_kind_name(int kind);
/* Waits until *word - target >= 0 (mod 2^32), where word belongs to rank peer; fails on peer death,
 * departure or failure, abort, or deadline (ms since ncl_now_ms's epoch).  what names the wait. */
int ncl_wait_word(struct ncl_comm *c, int peer, const atomic_uint *word, uint32_t target, int64_t deadline,
		  int kind, uint64_t seq, const char *what);
/* Fails when rank p failed, departed or died (its robust life mutex), naming it; else NCL_OK. */
int ncl_peer_check(struct ncl_comm *c, int p, int kind, uint64_t seq);
/* Publishes a change of this rank's words: bumps its bell and wakes its waiters. */
void ncl_ring(struct ncl_comm *c);
/* Records a failure of this rank's call: breaks the communicator, tells the peers (failed + errmsg). */
int ncl_fail(struct ncl_comm *c, int status);
/* Fails fast when the communicator is aborted or broken. */
int ncl_check_usable(struct ncl_comm *c, int kind, uint64_t seq);
/* Begins collective `kind` with ticket call->seq (taking one if 0): waits for its turn; on success the
 * caller holds call_lock and must call ncl_coll_end. */
int ncl_coll_begin(struct ncl_comm *c, int kind, ncl_call_t *call, int64_t *deadline);
int ncl_coll_end(struct ncl_comm *c, uint64_t seq, int status);
/* Records the start of collective seq (after ncl_coll_begin); ncl_coll_end records how it ended. */
void ncl_rec_begin(struct ncl_comm *c, int kind, uint64_t seq, uint64_t count, int dtype);
/* coll.c: one round of a collective (the protocol above). */
struct ncl_round {
	struct ncl_comm *c;
	struct ncl_desc d; /* this rank's descriptor for the current round */
	int64_t deadline;
	uint32_t k;        /* the round's global number (this rank's step) */
};
/* Waits until the half of the next round is free on every rank and writes the descriptor; *mine is
 * the half's data area. */
int ncl_round_acquire(struct ncl_round *r, unsigned char **mine);
/* Publishes this rank's half, waits for every rank's and compares their descriptors with this one. */
int ncl_round_exchange(struct ncl_round *r);
/* Tells the peers this rank has read their halves of the round. */
void ncl_round_release(struct ncl_round *r);

/* direct.c.  ncl_direct_probe (at ready) sets direct_ok.  The ncl_direct_* collectives run inside a
 * begun collective: an agreement round in which every rank publishes its buffers' addresses and
 * whether it can go direct, the data movement through the peers' memory, and a completion round; they
 * return NCL_DIRECT_STAGED (having used only the agreement round) when some rank cannot, and the
 * caller then runs the staged rounds. */
#define NCL_DIRECT_STAGED 1
#define NCL_DIRECT_PIECE ((size_t)64 << 10) /* bytes per cross-memory call and reduction block */
void ncl_direct_publish(struct ncl_comm *c); /* before attaching: where the peers find the probe */
void ncl_direct_probe(struct ncl_comm *c);   /* after every rank attached */
int ncl_direct_parse_min(const char *s, size_t *bytes);
int ncl_direct_all_reduce(struct ncl_round *r, const void *send, void *recv, size_t count, ncl_dtype_t dt,
			  ncl_redop_t op, double scale);
int ncl_direct_reduce_scatter(struct ncl_round *r, const void *const *sends, void *recv, size_t count,
			      ncl_dtype_t dt, ncl_redop_t op, double scale);
int ncl_direct_all_gather(struct ncl_round *r, const void *send, void *const *recvs, size_t count,
			  ncl_dtype_t dt);
int ncl_direct_broadcast(struct ncl_round *r, void *buf, size_t count, ncl_dtype_t dt, int root);
/* Every all_to_all runs the agreement round when direct calls are on (the ranks' sizes may differ, so
 * none can decide alone); it goes direct when every rank moves at least direct_min bytes. */
int ncl_direct_all_to_all(struct ncl_round *r, const void *const *sends, const size_t *send_counts,
			  void *const *recvs, const size_t *recv_counts, ncl_dtype_t dt);
/* Whether a call of count elements of esz bytes (per rank) tries the direct path. */
static inline bool ncl_direct_wanted(const struct ncl_comm *c, size_t count, size_t esz)
{
	return c->direct_min && count >= (c->direct_min + esz - 1) / esz;
}

static inline unsigned char *ncl_half(struct ncl_comm *c, int r, uint32_t round)
{
	return c->halves + ((size_t)r * 2 + (round & 1)) * (NCL_DESC_BYTES + c->chunk);
}
static inline unsigned char *ncl_p2p_half(struct ncl_comm *c, int src, int dst, uint32_t n)
{
	return c->p2p_halves + (((size_t)src * c->nranks + dst) * 2 + (n & 1)) * (NCL_DESC_BYTES + c->p2p_chunk);
}

static inline const unsigned char *ncl_round_data(struct ncl_round *r, int p)
{
	return ncl_half(r->c, p, r->k) + NCL_DESC_BYTES;
}

#endif /* NCL_IMPL_H */
