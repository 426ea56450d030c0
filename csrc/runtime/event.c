/* event.c - events: a position in a queue, optionally with the time the queue reached it.
 *
 * A plain event records the queue's submitted count: it is complete once the worker's head reaches it,
 * which needs no launch.  A timing event launches an internal marker record that stores the time when
 * the worker gets there.  Waits (nrt_queue_wait_event) copy (queue, seq) into a wait record, so they do
 * not keep a pointer to the event.
 */
#include <stdlib.h>

#include "nrt_impl.h"

int nrt_event_create(int dev, unsigned flags, nrt_event_t **out)
{
	struct nrt_event *e;
	int rc;

	if (!out)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_create: null output");
	*out = NULL;
	if ((rc = nrt_init()))
		return rc;
	if (!nrt_device_valid(dev))
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_create: no device neuron:%d", dev);
	if (flags & ~(unsigned)(NRT_EVENT_TIMING | NRT_EVENT_BLOCKING))
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_create: unknown flags 0x%x", flags);
	e = calloc(1, sizeof *e);
	if (!e)
		return nrt_set_error(NRT_ERR_HOST, "nrt_event_create: out of host memory");
	e->dev = dev;
	e->flags = flags;
	pthread_mutex_init(&e->lock, NULL);
	*out = e;
	return NRT_OK;
}

/* Snapshot of the last record. */
static bool event_position(struct nrt_event *e, struct nrt_queue **q, uint64_t *seq, uint64_t *gen)
{
	bool recorded;

	pthread_mutex_lock(&e->lock);
	recorded = e->recorded;
	*q = e->q;
	*seq = e->seq;
	if (gen)
		*gen = e->gen;
	pthread_mutex_unlock(&e->lock);
	return recorded;
}

void nrt_event_destroy(nrt_event_t *e)
{
	struct nrt_queue *q;
	uint64_t seq;

	if (nrt_bad_fork())
		return; /* a forked child leaves its copy alone */

	if (!e)
		return;
	/* a pending timing marker still points at e */
	if (event_position(e, &q, &seq, NULL) && (e->flags & NRT_EVENT_TIMING))
		nrt_queue_wait_seq(q, seq);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

struct marker_args {
	struct nrt_event *e;
	uint64_t gen;
};

static int marker_kernel(void *p)
{
	struct marker_args *a = p;

	atomic_store_explicit(&a->e->ts, nrt_mono_ns(), memory_order_relaxed);
	atomic_store_explicit(&a->e->ts_gen, a->gen, memory_order_release);
	return 0;
}

int nrt_event_record(nrt_event_t *e, nrt_queue_t *q)
{
	struct marker_args a;
	uint64_t seq;
	int rc = NRT_OK;

	if (nrt_bad_fork())
		return nrt_fork_error();

	if (!e || !q || !q->live)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_record: %s", e ? "invalid queue" : "null event");
	if (q->dev != e->dev)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_record: event of neuron:%d recorded on a queue "
				     "of neuron:%d", e->dev, q->dev);
	pthread_mutex_lock(&e->lock);
	if (e->flags & NRT_EVENT_TIMING) {
		a.e = e;
		a.gen = e->gen + 1;
		rc = nrt_queue_push(q, marker_kernel, &a, sizeof a, "nrt::event_record", NRT_REC_INTERNAL, &seq, true);
	} else {
		seq = nrt_queue_submitted(q);
	}
	if (!rc) {
		const nrt_target_t *t = atomic_load_explicit(&q->target, memory_order_relaxed);

		if (t->iface.event_record)
			rc = t->iface.event_record(t->context, q->dev, q->id, seq);
	}
	if (!rc) {
		e->gen++;
		e->q = q;
		e->seq = seq;
		e->recorded = true;
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int nrt_event_query(nrt_event_t *e)
{
	struct nrt_queue *q;
	uint64_t seq;

	if (nrt_bad_fork())
		return nrt_fork_error();

	if (!e)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_query: null event");
	if (!event_position(e, &q, &seq, NULL) || nrt_queue_reached(q, seq))
		return NRT_OK;
	return NRT_ERR_NOT_READY;
}

/* Waits for the event; reports (and clears) a sticky error of its queue. */
int nrt_event_synchronize(nrt_event_t *e)
{
	struct nrt_queue *q;
	uint64_t seq;
	int rc;

	if (nrt_bad_fork())
		return nrt_fork_error();

	if (!e)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_synchronize: null event");
	if (!event_position(e, &q, &seq, NULL))
		return NRT_OK;
	if (q == nrt_current_queue() && !nrt_queue_reached(q, seq))
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_synchronize: waits on its own queue");
	nrt_queue_wait_seq(q, seq);
	rc = nrt_queue_take_error(q);
	nrt_alloc_process_pending(q->dev);
	return rc;
}

static int timing_of(struct nrt_event *e, const char *which, int64_t *ts)
{
	struct nrt_queue *q;
	uint64_t seq, gen;

	if (!e)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_elapsed_ms: null %s event", which);
	if (!(e->flags & NRT_EVENT_TIMING))
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_elapsed_ms: %s event was created without "
				     "NRT_EVENT_TIMING", which);
	if (!event_position(e, &q, &seq, &gen))
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_elapsed_ms: %s event was never recorded", which);
	if (!nrt_queue_reached(q, seq) || atomic_load_explicit(&e->ts_gen, memory_order_acquire) != gen)
		return nrt_set_error(NRT_ERR_NOT_READY, "nrt_event_elapsed_ms: %s event has not completed",
				     which);
	*ts = atomic_load_explicit(&e->ts, memory_order_relaxed);
	return NRT_OK;
}

int nrt_event_elapsed_ms(nrt_event_t *start, nrt_event_t *end, double *ms)
{
	int64_t t0, t1;
	int rc;

	if (nrt_bad_fork())
		return nrt_fork_error();

	if (!ms)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_event_elapsed_ms: null output");
	if ((rc = timing_of(start, "start", &t0)) || (rc = timing_of(end, "end", &t1)))
		return rc;
	*ms = (double)(t1 - t0) / 1e6;
	return NRT_OK;
}

int nrt_queue_wait_event(nrt_queue_t *q, nrt_event_t *e)
{
	struct nrt_queue *src;
	uint64_t seq;
	const nrt_target_t *t;
	int rc;

	if (nrt_bad_fork())
		return nrt_fork_error();

	if (!q || !q->live || !e)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_wait_event: %s", e ? "invalid queue" : "null event");
	if (!event_position(e, &src, &seq, NULL))
		return NRT_OK; /* never recorded: nothing to wait for */
	t = atomic_load_explicit(&q->target, memory_order_relaxed);
	if (t->iface.event_wait && (rc = t->iface.event_wait(t->context, q->dev, q->id, src->id, seq)))
		return rc;
	return nrt_queue_wait_for(q, src, seq);
}
