/* order.c - process-local ticket order: the collectives of one group run in the order they were issued
 * (ticket numbers from 1) whichever thread runs them.  A communicator embeds one (ncl_coll_begin/end);
 * the glue's Gloo transport uses a standalone one.  Waits sleep on a condition variable in slices of at
 * most 5 ms, asking the caller's check (a broken communicator) and the abort flag between slices.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ncl_impl.h"

void ncl_order_init(struct ncl_order *o)
{
	atomic_store(&o->next, 0);
	atomic_store(&o->done, 0);
	atomic_store(&o->aborted, 0);
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->cv, NULL);
}

void ncl_order_fini(struct ncl_order *o)
{
	pthread_mutex_destroy(&o->lock);
	pthread_cond_destroy(&o->cv);
}

int ncl_order_create(ncl_order_t **out)
{
	struct ncl_order *o = calloc(1, sizeof *o);

	if (!o)
		return ncl_set_error(NCL_ERR_HOST, "ncl: out of host memory");
	ncl_order_init(o);
	*out = o;
	return NCL_OK;
}

void ncl_order_destroy(ncl_order_t *o)
{
	if (!o)
		return;
	ncl_order_fini(o);
	free(o);
}

uint64_t ncl_order_take(ncl_order_t *o)
{
	return atomic_fetch_add(&o->next, 1) + 1;
}

uint64_t ncl_order_last(const ncl_order_t *o)
{
	return atomic_load(&((ncl_order_t *)o)->next);
}

int ncl_order_turn(struct ncl_order *o, uint64_t seq, int64_t deadline, int (*check)(void *), void *ctx,
		   const char *what)
{
	int rc = NCL_OK;

	pthread_mutex_lock(&o->lock);
	while (atomic_load(&o->done) + 1 < seq) {
		struct timespec ts;
		int64_t left = deadline - ncl_now_ms();

		if (check && (rc = check(ctx)))
			break;
		if (atomic_load(&o->aborted)) {
			rc = ncl_set_error(NCL_ERR_ABORTED, "%s (seq %llu): the process group was aborted", what,
					   (unsigned long long)seq);
			break;
		}
		if (left <= 0) {
			rc = ncl_set_error(NCL_ERR_TIMEOUT, "%s (seq %llu): timed out waiting for collective seq %llu "
					   "of this process to run first", what, (unsigned long long)seq,
					   (unsigned long long)atomic_load(&o->done) + 1);
			break;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		left = left > 5 ? 5 : left;
		ts.tv_nsec += (long)(left * 1000000);
		ts.tv_sec += ts.tv_nsec / 1000000000;
		ts.tv_nsec %= 1000000000;
		pthread_cond_timedwait(&o->cv, &o->lock, &ts);
	}
	pthread_mutex_unlock(&o->lock);
	return rc;
}

int ncl_order_wait(ncl_order_t *o, uint64_t seq, int64_t timeout_ms, const char *what)
{
	if (!o || timeout_ms <= 0)
		return ncl_set_error(NCL_ERR_INVALID, "%s: %s", what, o ? "timeout must be > 0" : "no order");
	return ncl_order_turn(o, seq, ncl_now_ms() + timeout_ms, NULL, NULL, what);
}

void ncl_order_done(ncl_order_t *o, uint64_t seq)
{
	pthread_mutex_lock(&o->lock);
	if (seq > atomic_load(&o->done))
		atomic_store(&o->done, seq);
	pthread_cond_broadcast(&o->cv);
	pthread_mutex_unlock(&o->lock);
}

void ncl_order_abort(ncl_order_t *o)
{
	if (!o)
		return;
	atomic_store(&o->aborted, 1);
	pthread_mutex_lock(&o->lock);
	pthread_cond_broadcast(&o->cv);
	pthread_mutex_unlock(&o->lock);
}

/* ---- a worker thread running jobs in submission order (the glue's sends) ------------------------- */
struct job {
	void (*fn)(void *);
	void *arg;
	struct job *next;
};

struct ncl_worker {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct job *head, *tail;
	bool started, stop;
	pthread_t thread;
};

static void *worker_main(void *p)
{
	struct ncl_worker *w = p;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct job *j;

		while (!w->head && !w->stop)
			pthread_cond_wait(&w->cv, &w->lock);
		if (!w->head)
			break;
		j = w->head;
		w->head = j->next;
		if (!w->head)
			w->tail = NULL;
		pthread_mutex_unlock(&w->lock);
		j->fn(j->arg);
		free(j);
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int ncl_worker_create(ncl_worker_t **out)
{
	struct ncl_worker *w = calloc(1, sizeof *w);

	if (!w)
		return ncl_set_error(NCL_ERR_HOST, "ncl: out of host memory");
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cv, NULL);
	*out = w;
	return NCL_OK;
}

int ncl_worker_submit(ncl_worker_t *w, void (*fn)(void *), void *arg)
{
	struct job *j = malloc(sizeof *j);
	int rc = NCL_OK;

	if (!j)
		return ncl_set_error(NCL_ERR_HOST, "ncl: out of host memory");
	*j = (struct job){ fn, arg, NULL };
	pthread_mutex_lock(&w->lock);
	if (w->stop) {
		rc = ncl_set_error(NCL_ERR_ABORTED, "ncl: the worker is stopping");
	} else if (!w->started && pthread_create(&w->thread, NULL, worker_main, w)) {
		rc = ncl_set_error(NCL_ERR_HOST, "ncl: cannot start the sender thread");
	} else {
		w->started = true;
		if (w->tail)
			w->tail->next = j;
		else
			w->head = j;
		w->tail = j;
		j = NULL;
	}
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->lock);
	free(j);
	return rc;
}

void ncl_worker_destroy(ncl_worker_t *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->lock);
	if (w->started)
		pthread_join(w->thread, NULL);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cv);
	free(w);
}
