/* comm.c - communicators: the shared segment (create, attach, unlink, destroy), rank liveness (a robust
 * mutex per rank, held by a small life thread), the futex waits every collective is built on, errors,
 * and the sequence tickets that order collectives within a process.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ncl_impl.h"

#define NCL_SPIN_NS 30000        /* spin this long before sleeping on a futex */
#define NCL_SLICE_NS 5000000     /* futex sleeps are cut into slices: liveness is checked between */
#define NCL_CHUNK_MIN 4096
#define NCL_CHUNK_MAX ((size_t)1 << 30)

static _Thread_local char last_error[2048];

const char *ncl_last_error(void)
{
	return last_error;
}

int ncl_set_error(int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof last_error, fmt, ap);
	va_end(ap);
	return status;
}

const char *ncl_status_string(int status)
{
	switch (status) {
	case NCL_OK: return "success";
	case NCL_ERR_INVALID: return "invalid argument";
	case NCL_ERR_HOST: return "host resources exhausted";
	case NCL_ERR_TIMEOUT: return "timed out";
	case NCL_ERR_PEER: return "peer failed";
	case NCL_ERR_MISMATCH: return "mismatched calls";
	case NCL_ERR_ABORTED: return "aborted";
	default: return "unknown error";
	}
}

const char *ncl_kind_name(int kind)
{
	static const char *const names[NCL_K_COUNT] = {
		"none", "all_reduce", "reduce", "broadcast", "all_gather", "gather", "reduce_scatter",
		"scatter", "all_to_all", "barrier", "send", "recv",
	};
	return kind >= 0 && kind < NCL_K_COUNT ? names[kind] : "unknown";
}

int64_t ncl_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Shared (not FUTEX_PRIVATE) futex operations: the words live in a segment mapped by several processes. */
static void futex_wait(atomic_uint *word, unsigned val, int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };

	syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(atomic_uint *word)
{
	syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

int ncl_parse_chunk_bytes(const char *s, size_t *bytes)
{
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return NCL_ERR_INVALID;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return NCL_ERR_INVALID;
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	if (*end == 'i')
		end++;
	if (*end == 'B')
		end++;
	if (*end || v < NCL_CHUNK_MIN || v > NCL_CHUNK_MAX)
		return NCL_ERR_INVALID;
	*bytes = (size_t)v & ~(size_t)63;
	return NCL_OK;
}

/* ---- segment layout --------------------------------------------------------------------------- */
static size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) & ~(a - 1);
}

struct layout {
	size_t ctl, p2p, halves, p2p_halves, size, p2p_chunk;
};

static void layout_of(int n, size_t chunk, struct layout *l)
{
	size_t nn = (size_t)n * (size_t)n;

	l->p2p_chunk = align_up(chunk / 4 < 65536 ? 65536 : chunk / 4, 64);
	l->ctl = align_up(sizeof(struct ncl_hdr), 64);
	l->p2p = align_up(l->ctl + (size_t)n * sizeof(struct ncl_rank_ctl), 64);
	l->halves = align_up(l->p2p + nn * sizeof(struct ncl_p2p_ctl), 4096);
	l->p2p_halves = l->halves + (size_t)n * 2 * (NCL_DESC_BYTES + chunk);
	l->size = align_up(l->p2p_halves + nn * 2 * (NCL_DESC_BYTES + l->p2p_chunk), 4096);
}

static void comm_free(struct ncl_comm *c)
{
	if (!c)
		return;
	if (c->base)
		munmap(c->base, c->size);
	free(c->p2p_sent_n);
	free(c->p2p_recv_n);
	free(c->p2p_msg_sent);
	free(c->p2p_msg_recv);
	if (c->p2p_send_lock)
		for (int i = 0; i < c->nranks; i++) {
			pthread_mutex_destroy(&c->p2p_send_lock[i]);
			pthread_mutex_destroy(&c->p2p_recv_lock[i]);
		}
	free(c->p2p_send_lock);
	free(c->p2p_recv_lock);
	free((void *)c->dead);
	free(c->scratch);
	free(c);
}

/* The process-local part, and the pointers into the mapping. */
static int comm_alloc(const char *name, int rank, int n, struct ncl_comm **out)
{
	struct ncl_comm *c;

	if (!name || name[0] != '/' || strlen(name) >= NCL_NAME_MAX || strchr(name + 1, '/'))
		return ncl_set_error(NCL_ERR_INVALID, "ncl: bad segment name '%s'", name ? name : "(null)");
	if (n < 1 || n > NCL_MAX_RANKS || rank < 0 || rank >= n)
		return ncl_set_error(NCL_ERR_INVALID, "ncl: rank %d of %d out of range (1 to %d ranks)", rank, n,
				     NCL_MAX_RANKS);
	c = calloc(1, sizeof *c);
	if (!c)
		return ncl_set_error(NCL_ERR_HOST, "ncl: out of host memory");
	snprintf(c->name, sizeof c->name, "%s", name);
	c->rank = rank;
	c->nranks = n;
	c->claim_cap = UINT64_MAX;
	c->p2p_sent_n = calloc((size_t)n, sizeof(uint32_t));
	c->p2p_recv_n = calloc((size_t)n, sizeof(uint32_t));
	c->p2p_msg_sent = calloc((size_t)n, sizeof(uint64_t));
	c->p2p_msg_recv = calloc((size_t)n, sizeof(uint64_t));
	c->dead = calloc((size_t)n, sizeof(atomic_int));
	c->p2p_send_lock = calloc((size_t)n, sizeof(pthread_mutex_t));
	c->p2p_recv_lock = calloc((size_t)n, sizeof(pthread_mutex_t));
	if (!c->p2p_sent_n || !c->p2p_recv_n || !c->p2p_msg_sent || !c->p2p_msg_recv || !c->dead ||
	    !c->p2p_send_lock || !c->p2p_recv_lock) {
		free(c->p2p_send_lock);
		free(c->p2p_recv_lock);
		c->p2p_send_lock = c->p2p_recv_lock = NULL;
		comm_free(c);
		return ncl_set_error(NCL_ERR_HOST, "ncl: out of host memory");
	}
	for (int i = 0; i < n; i++) {
		pthread_mutex_init(&c->p2p_send_lock[i], NULL);
		pthread_mutex_init(&c->p2p_recv_lock[i], NULL);
	}
	ncl_order_init(&c->order);
	pthread_mutex_init(&c->broken_lock, NULL);
	pthread_mutex_init(&c->life_lock, NULL);
	pthread_cond_init(&c->life_cv, NULL);
	*out = c;
	return NCL_OK;
}

static void comm_point(struct ncl_comm *c, const struct layout *l)
{
	unsigned char *b = c->base;

	c->hdr = (struct ncl_hdr *)b;
	c->ctl = (struct ncl_rank_ctl *)(b + l->ctl);
	c->p2p = (struct ncl_p2p_ctl *)(b + l->p2p);
	c->halves = b + l->halves;
	c->p2p_halves = b + l->p2p_halves;
	c->p2p_chunk = l->p2p_chunk;
}

int ncl_comm_create(const char *name, int nranks, size_t chunk, ncl_comm_t **out)
{
	struct ncl_comm *c = NULL;
	struct layout l;
	pthread_mutexattr_t ma;
	int fd, rc;

	if (!out)
		return ncl_set_error(NCL_ERR_INVALID, "ncl_comm_create: null output");
	*out = NULL;
	if (chunk == 0)
		chunk = NCL_CHUNK_BYTES_DEFAULT;
	if (chunk < NCL_CHUNK_MIN || chunk > NCL_CHUNK_MAX || chunk % 64)
		return ncl_set_error(NCL_ERR_INVALID, "ncl_comm_create: chunk of %zu bytes (expected a multiple of "
				     "64 from %d to %zu)", chunk, NCL_CHUNK_MIN, NCL_CHUNK_MAX);
	rc = comm_alloc(name, 0, nranks, &c);
	if (rc)
		return rc;
	if (ncl_direct_parse_min(getenv("NEURON_CCL_DIRECT_MIN"), &c->direct_min)) {
		rc = ncl_set_error(NCL_ERR_INVALID, "ncl_comm_create: NEURON_CCL_DIRECT_MIN='%s' is not a byte "
				   "count (K/M suffixes) or 'off'", getenv("NEURON_CCL_DIRECT_MIN"));
		goto free_comm;
	}
	layout_of(nranks, chunk, &l);
	c->chunk = chunk;
	c->size = l.size;
	fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
	if (fd < 0) {
		rc = ncl_set_error(NCL_ERR_HOST, "ncl: shm_open(%s) failed: %s", name, strerror(errno));
		goto free_comm;
	}
	c->linked = true;
	if (ftruncate(fd, (off_t)l.size)) {
		rc = ncl_set_error(NCL_ERR_HOST, "ncl: sizing the %zu-byte segment %s failed: %s", l.size, name,
				   strerror(errno));
		goto close_fd;
	}
	c->base = mmap(NULL, l.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c->base == MAP_FAILED) {
		c->base = NULL;
		rc = ncl_set_error(NCL_ERR_HOST, "ncl: mapping the %zu-byte segment %s failed: %s", l.size, name,
				   strerror(errno));
		goto close_fd;
	}
	close(fd);
	comm_point(c, &l);
	c->hdr->nranks = (uint32_t)nranks;
	c->hdr->chunk = chunk;
	c->hdr->p2p_chunk = l.p2p_chunk;
	c->hdr->size = l.size;
	c->hdr->direct_min = c->direct_min;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	for (int r = 0; r < nranks; r++)
		if (pthread_mutex_init(&c->ctl[r].life, &ma)) {
			pthread_mutexattr_destroy(&ma);
			rc = ncl_set_error(NCL_ERR_HOST, "ncl: initializing a process-shared mutex failed");
			goto unlink;
		}
	pthread_mutexattr_destroy(&ma);
	atomic_store(&c->hdr->magic, NCL_MAGIC);
	*out = c;
	return NCL_OK;

close_fd:
	close(fd);
unlink:
	shm_unlink(name);
	c->linked = false;
free_comm:
	comm_free(c);
	return rc;
}

int ncl_comm_attach(const char *name, int rank, int nranks, ncl_comm_t **out)
{
	struct ncl_comm *c = NULL;
	struct layout l;
	struct stat st;
	int fd, rc;

	if (!out)
		return ncl_set_error(NCL_ERR_INVALID, "ncl_comm_attach: null output");
	*out = NULL;
	if (rank == 0)
		return ncl_set_error(NCL_ERR_INVALID, "ncl_comm_attach: rank 0 creates the segment");
	rc = comm_alloc(name, rank, nranks, &c);
	if (rc)
		return rc;
	fd = shm_open(name, O_RDWR, 0600);
	if (fd < 0) {
		rc = ncl_set_error(NCL_ERR_HOST, "ncl: rank %d cannot open segment %s: %s (rank 0 and this rank "
				   "must run on the same host)", rank, name, strerror(errno));
		goto free_comm;
	}
	if (fstat(fd, &st) || st.st_size < (off_t)sizeof(struct ncl_hdr)) {
		rc = ncl_set_error(NCL_ERR_HOST, "ncl: segment %s is missing or truncated", name);
		goto close_fd;
	}
	c->size = (size_t)st.st_size;
	c->base = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c->base == MAP_FAILED) {
		c->base = NULL;
		rc = ncl_set_error(NCL_ERR_HOST, "ncl: mapping segment %s failed: %s", name, strerror(errno));
		goto close_fd;
	}
	close(fd);
	c->hdr = c->base;
	if (atomic_load(&c->hdr->magic) != NCL_MAGIC || c->hdr->nranks != (uint32_t)nranks) {
		rc = ncl_set_error(NCL_ERR_INVALID, "ncl: segment %s is not a %d-rank communicator", name, nranks);
		goto free_comm;
	}
	c->chunk = c->hdr->chunk;
	c->direct_min = c->hdr->direct_min;
	layout_of(nranks, c->chunk, &l);
	if (l.size != c->size || l.p2p_chunk != c->hdr->p2p_chunk) {
		rc = ncl_set_error(NCL_ERR_INVALID, "ncl: segment %s has an unexpected layout", name);
		goto free_comm;
	}
	comm_point(c, &l);
	*out = c;
	return NCL_OK;

close_fd:
	close(fd);
free_comm:
	comm_free(c);
	return rc;
}

/* ---- liveness ----------------------------------------------------------------------------------- */
static void *life_main(void *arg)
{
	struct ncl_comm *c = arg;
	int rc = pthread_mutex_lock(&c->ctl[c->rank].life);

	if (rc == EOWNERDEAD) /* cannot happen for a fresh segment; recover anyway */
		pthread_mutex_consistent(&c->ctl[c->rank].life), rc = 0;
	pthread_mutex_lock(&c->life_lock);
	c->life_state = rc ? -1 : 1;
	pthread_cond_broadcast(&c->life_cv);
	while (c->life_state == 1)
		pthread_cond_wait(&c->life_cv, &c->life_lock);
	if (rc == 0)
		pthread_mutex_unlock(&c->ctl[c->rank].life);
	c->life_state = 3;
	pthread_cond_broadcast(&c->life_cv);
	pthread_mutex_unlock(&c->life_lock);
	return NULL;
}

static int life_start(struct ncl_comm *c)
{
	pthread_attr_t attr;
	int rc;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	rc = pthread_create(&c->life_thread, &attr, life_main, c);
	pthread_attr_destroy(&attr);
	if (rc)
		return ncl_set_error(NCL_ERR_HOST, "ncl: cannot start the liveness thread: %s", strerror(rc));
	pthread_mutex_lock(&c->life_lock);
	while (c->life_state == 0)
		pthread_cond_wait(&c->life_cv, &c->life_lock);
	rc = c->life_state;
	pthread_mutex_unlock(&c->life_lock);
	if (rc != 1)
		return ncl_set_error(NCL_ERR_HOST, "ncl: the liveness mutex of rank %d could not be taken", c->rank);
	return NCL_OK;
}

static void life_stop(struct ncl_comm *c)
{
	pthread_mutex_lock(&c->life_lock);
	if (c->life_state == 0) {
		pthread_mutex_unlock(&c->life_lock);
		return;
	}
	if (c->life_state == 1)
		c->life_state = 2;
	pthread_cond_broadcast(&c->life_cv);
	pthread_mutex_unlock(&c->life_lock);
	pthread_join(c->life_thread, NULL);
}

/* 0 if rank p looks alive; NCL_ERR_PEER (message set) if it died or departed. */
int ncl_peer_check(struct ncl_comm *c, int p, int kind, uint64_t seq)
{
	struct ncl_rank_ctl *pc = &c->ctl[p];
	atomic_int *dead = (atomic_int *)c->dead;
	int rc;

	if (atomic_load(&pc->failed))
		return ncl_set_error(NCL_ERR_PEER, "ncl %s (seq %llu): rank %d failed: %s", ncl_kind_name(kind),
				     (unsigned long long)seq, p, pc->errmsg);
	if (atomic_load(&pc->departed))
		return ncl_set_error(NCL_ERR_PEER, "ncl %s (seq %llu): rank %d left the process group "
				     "(destroy_process_group) before taking part", ncl_kind_name(kind),
				     (unsigned long long)seq, p);
	if (!atomic_load(&dead[p]) && atomic_load(&pc->live)) {
		rc = pthread_mutex_trylock(&pc->life);
		if (rc == 0)
			pthread_mutex_unlock(&pc->life); /* its life thread is stopping: departed comes next */
		else if (rc == EOWNERDEAD || rc == ENOTRECOVERABLE)
			atomic_store(&dead[p], 1);
	}
	if (atomic_load(&dead[p]))
		return ncl_set_error(NCL_ERR_PEER, "ncl %s (seq %llu): rank %d (pid %d) died (killed or exited "
				     "without destroy_process_group); its last collective was seq %llu",
				     ncl_kind_name(kind), (unsigned long long)seq, p, (int)pc->pid,
				     (unsigned long long)atomic_load(&pc->cur_seq));
	return NCL_OK;
}

int ncl_check_usable(struct ncl_comm *c, int kind, uint64_t seq)
{
	int st = atomic_load(&c->broken);

	if (atomic_load(&c->aborted))
		return ncl_set_error(NCL_ERR_ABORTED, "ncl %s (seq %llu): the process group was aborted",
				     ncl_kind_name(kind), (unsigned long long)seq);
	if (st) {
		pthread_mutex_lock(&c->broken_lock);
		ncl_set_error(st, "ncl %s (seq %llu): the process group is unusable after an earlier error: %s",
			      ncl_kind_name(kind), (unsigned long long)seq, c->broken_msg);
		pthread_mutex_unlock(&c->broken_lock);
		return st;
	}
	return NCL_OK;
}

static bool reached(const atomic_uint *word, uint32_t target)
{
	return (int32_t)(atomic_load_explicit(word, memory_order_acquire) - target) >= 0;
}

int ncl_wait_word(struct ncl_comm *c, int peer, const atomic_uint *word, uint32_t target, int64_t deadline,
		  int kind, uint64_t seq, const char *what)
{
	struct ncl_rank_ctl *pc = &c->ctl[peer];
	int64_t spin_end;
	int rc;

	if (reached(word, target))
		return NCL_OK;
	spin_end = now_ns() + NCL_SPIN_NS;
	do {
		for (int i = 0; i < 64; i++) {
			if (reached(word, target))
				return NCL_OK;
			cpu_relax();
		}
	} while (now_ns() < spin_end);
	for (;;) {
		int64_t left = deadline - ncl_now_ms();
		unsigned bell;

		atomic_fetch_add(&pc->waiters, 1);
		bell = atomic_load(&pc->bell);
		if (reached(word, target)) {
			atomic_fetch_sub(&pc->waiters, 1);
			return NCL_OK;
		}
		if (left > 0)
			futex_wait(&pc->bell, bell, left * 1000000 < NCL_SLICE_NS ? left * 1000000 : NCL_SLICE_NS);
		atomic_fetch_sub(&pc->waiters, 1);
		if (reached(word, target))
			return NCL_OK;
		rc = ncl_check_usable(c, kind, seq);
		if (rc == NCL_ERR_ABORTED)
			return rc;
		rc = ncl_peer_check(c, peer, kind, seq);
		if (rc)
			return rc;
		if (ncl_now_ms() >= deadline) {
			uint64_t ps = atomic_load(&pc->cur_seq);

			return ncl_set_error(NCL_ERR_TIMEOUT, "ncl %s (seq %llu): timed out waiting for rank %d to %s; "
					     "rank %d is alive and its last collective is %s (seq %llu)",
					     ncl_kind_name(kind), (unsigned long long)seq, peer, what, peer,
					     ncl_kind_name(atomic_load(&pc->cur_kind)), (unsigned long long)ps);
		}
	}
}

void ncl_ring(struct ncl_comm *c)
{
	struct ncl_rank_ctl *me = &c->ctl[c->rank];

	atomic_fetch_add(&me->bell, 1);
	if (atomic_load(&me->waiters))
		futex_wake(&me->bell);
}

/* Copies src into dst[cap], truncating. */
static void copy_str(char *dst, size_t cap, const char *src)
{
	size_t n = strnlen(src, cap - 1);

	memcpy(dst, src, n);
	dst[n] = 0;
}

/* Appends this rank's last collectives to the thread's error message (after the peers got it). */
static void append_history(struct ncl_comm *c)
{
	size_t len = strlen(last_error), first = c->nrecs > NCL_RECS ? c->nrecs - NCL_RECS : 0;
	int64_t now = ncl_now_ms();

	if (!c->nrecs)
		return;
	len += (size_t)snprintf(last_error + len, sizeof last_error - len,
				" [last collectives of rank %d, oldest first:", c->rank);
	for (uint64_t i = first; i < c->nrecs && len < sizeof last_error; i++) {
		const struct ncl_rec *r = &c->recs[i % NCL_RECS];
		int64_t took = (r->done ? r->end_ms : now) - r->start_ms;
		char state[64];

		if (!r->done)
			snprintf(state, sizeof state, "started, not completed after");
		else if (r->status)
			snprintf(state, sizeof state, "failed (%s) after", ncl_status_string(r->status));
		else
			snprintf(state, sizeof state, "completed in");
		len += (size_t)snprintf(last_error + len, sizeof last_error - len, "%s seq %llu %s %llu x %s %s %lld ms",
					i == first ? "" : ";", (unsigned long long)r->seq, ncl_kind_name(r->kind),
					(unsigned long long)r->count, ncl_dtype_name((ncl_dtype_t)r->dtype), state,
					(long long)took);
	}
	if (len < sizeof last_error)
		snprintf(last_error + len, sizeof last_error - len, "]");
}

void ncl_rec_begin(struct ncl_comm *c, int kind, uint64_t seq, uint64_t count, int dtype)
{
	c->recs[c->nrecs++ % NCL_RECS] = (struct ncl_rec){ .seq = seq, .count = count, .start_ms = ncl_now_ms(),
							   .kind = kind, .dtype = dtype };
}

static void rec_end(struct ncl_comm *c, uint64_t seq, int status)
{
	struct ncl_rec *r = c->nrecs ? &c->recs[(c->nrecs - 1) % NCL_RECS] : NULL;

	if (r && r->seq == seq && !r->done) {
		r->done = true;
		r->status = status;
		r->end_ms = ncl_now_ms();
	}
}

int ncl_fail(struct ncl_comm *c, int status)
{
	struct ncl_rank_ctl *me = &c->ctl[c->rank];
	int zero = 0;

	pthread_mutex_lock(&c->broken_lock);
	if (atomic_compare_exchange_strong(&c->broken, &zero, status))
		copy_str(c->broken_msg, sizeof c->broken_msg, last_error);
	pthread_mutex_unlock(&c->broken_lock);
	if (!atomic_load(&me->failed)) {
		copy_str(me->errmsg, sizeof me->errmsg, last_error);
		atomic_store(&me->failed, status);
		ncl_ring(c);
	}
	return status;
}

/* ncl_fail on the thread running the collectives (the records are its own), plus the records in the
 * message where they help: a timeout, a dead peer, a mismatch. */
static int fail_with_history(struct ncl_comm *c, int status)
{
	ncl_fail(c, status);
	if (status == NCL_ERR_TIMEOUT || status == NCL_ERR_PEER || status == NCL_ERR_MISMATCH)
		append_history(c);
	return status;
}

/* ---- lifecycle ---------------------------------------------------------------------------------- */
int ncl_comm_ready(ncl_comm_t *c, int64_t timeout_ms)
{
	int64_t deadline;
	int rc = NCL_OK;

	if (!c)
		return ncl_set_error(NCL_ERR_INVALID, "ncl_comm_ready: null communicator");
	deadline = ncl_now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
	rc = life_start(c);
	if (rc)
		goto out;
	c->ctl[c->rank].pid = (int32_t)getpid();
	ncl_direct_publish(c);
	atomic_store(&c->ctl[c->rank].live, 1);
	atomic_fetch_add(&c->hdr->attached, 1);
	futex_wake(&c->hdr->attached);
	for (;;) {
		unsigned a = atomic_load(&c->hdr->attached);
		int64_t left = deadline - ncl_now_ms();

		if (a >= (unsigned)c->nranks)
			break;
		if (left <= 0) {
			rc = ncl_set_error(NCL_ERR_TIMEOUT, "ncl: timed out after %lld ms waiting for the other ranks "
					   "to attach to %s (%u of %d attached)", (long long)timeout_ms, c->name, a,
					   c->nranks);
			break;
		}
		futex_wait(&c->hdr->attached, a, left * 1000000 < NCL_SLICE_NS ? left * 1000000 : NCL_SLICE_NS);
	}
	if (!rc)
		ncl_direct_probe(c);
out:
	if (c->rank == 0 && c->linked) {
		shm_unlink(c->name);
		c->linked = false;
	}
	return rc;
}

void ncl_comm_destroy(ncl_comm_t *c)
{
	if (!c)
		return;
	if (c->base) {
		atomic_store(&c->ctl[c->rank].departed, 1);
		ncl_ring(c);
	}
	life_stop(c);
	if (c->linked)
		shm_unlink(c->name);
	ncl_order_fini(&c->order);
	pthread_mutex_destroy(&c->broken_lock);
	pthread_mutex_destroy(&c->life_lock);
	pthread_cond_destroy(&c->life_cv);
	comm_free(c);
}

void ncl_comm_abort(ncl_comm_t *c)
{
	if (!c)
		return;
	atomic_store(&c->aborted, 1);
	ncl_order_abort(&c->order);
}

int ncl_comm_rank(const ncl_comm_t *c)
{
	return c ? c->rank : -1;
}

int ncl_comm_size(const ncl_comm_t *c)
{
	return c ? c->nranks : 0;
}

bool ncl_comm_direct(const ncl_comm_t *c)
{
	return c && c->direct_ok;
}

uint64_t ncl_comm_direct_calls(const ncl_comm_t *c)
{
	return c ? c->direct_calls : 0;
}

uint64_t ncl_comm_direct_pieces(const ncl_comm_t *c)
{
	return c ? c->direct_pieces : 0;
}

void ncl_comm_test_claim_cap(ncl_comm_t *c, uint64_t cap)
{
	if (c)
		c->claim_cap = cap;
}

int ncl_comm_peer_pid(const ncl_comm_t *c, int r)
{
	return c && r >= 0 && r < c->nranks ? c->ctl[r].pid : -1;
}

/* ---- sequence tickets --------------------------------------------------------------------------- */
uint64_t ncl_comm_take_seq(ncl_comm_t *c)
{
	return ncl_order_take(&c->order);
}

uint64_t ncl_comm_last_seq(const ncl_comm_t *c)
{
	return ncl_order_last(&c->order);
}

struct turn_ctx {
	struct ncl_comm *c;
	int kind;
	uint64_t seq;
};

static int turn_check(void *p)
{
	struct turn_ctx *t = p;

	return ncl_check_usable(t->c, t->kind, t->seq);
}

int ncl_coll_begin(struct ncl_comm *c, int kind, ncl_call_t *call, int64_t *deadline)
{
	char what[64];
	struct turn_ctx t;
	int rc;

	if (!c)
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: null communicator", ncl_kind_name(kind));
	if (call->timeout_ms <= 0)
		return ncl_set_error(NCL_ERR_INVALID, "ncl %s: timeout of %lld ms (expected > 0)",
				     ncl_kind_name(kind), (long long)call->timeout_ms);
	if (call->seq == 0)
		call->seq = ncl_comm_take_seq(c);
	*deadline = ncl_now_ms() + call->timeout_ms;
	t = (struct turn_ctx){ c, kind, call->seq };
	snprintf(what, sizeof what, "ncl %s", ncl_kind_name(kind));
	rc = ncl_order_turn(&c->order, call->seq, *deadline, turn_check, &t, what);
	if (rc)
		return fail_with_history(c, rc);
	rc = ncl_check_usable(c, kind, call->seq);
	if (rc) {
		ncl_coll_end(c, call->seq, 0);
		return rc;
	}
	atomic_store(&c->ctl[c->rank].cur_seq, call->seq);
	atomic_store(&c->ctl[c->rank].cur_kind, kind);
	return NCL_OK;
}

int ncl_coll_end(struct ncl_comm *c, uint64_t seq, int status)
{
	rec_end(c, seq, status);
	if (status)
		fail_with_history(c, status);
	ncl_order_done(&c->order, seq);
	return status;
}
