/* fuse.c - queue-level loop fusion of multi-tensor elementwise records (the contract is in nrt_fuse.h).
 *
 * nrt_fuse_exec runs on the thread that holds the queue's exec claim.  It gathers the fusable records
 * queued from head on, sorts their items by (list position, record) to check that items at one
 * position agree on their element count, sorts the operand ranges by address to find overlaps that are
 * not the same tensor at the same position, and cuts the run before the first record involved in a
 * violation.  The run then executes as units of (position, tile) over the kernel thread pool: a unit
 * applies every record of the run that has an item at that position, in queue order, to one tile.
 *
 * The scratch arrays (about 0.8 MiB) are allocated per executing thread on first use and freed when
 * the thread exits; without them nothing fuses.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrt_fuse.h"
#include "nrt_impl.h"

#define FUSE_MAX_KERNELS 16
#define FUSE_PAIR_BUDGET 65536 /* overlapping range pairs examined before giving up on a run */
#define FUSE_RING_MASK (NRT_RING_SLOTS - 1)

static struct {
	nrt_kernel_fn fn;
	const nrt_fuse_kernel_t *k;
} fuse_kernels[FUSE_MAX_KERNELS];
static atomic_int fuse_nkernels;
static pthread_mutex_t fuse_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool fuse_on = true;
static atomic_int_fast64_t fuse_tile_elems = NRT_FUSE_TILE_DEFAULT;
static atomic_bool fuse_dead_on = true;
static atomic_uint_fast64_t fuse_stat_runs, fuse_stat_records, fuse_stat_dead;

/* ---- registry and settings ------------------------------------------------------------------------ */
int nrt_fuse_register(nrt_kernel_fn fn, const nrt_fuse_kernel_t *k)
{
	int n, rc = NRT_OK;

	if (!fn || !k || !k->describe || !k->range)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_fuse_register: null kernel or callbacks");
	pthread_mutex_lock(&fuse_reg_lock);
	n = atomic_load(&fuse_nkernels);
	for (int i = 0; i < n; i++)
		if (fuse_kernels[i].fn == fn)
			goto out;
	if (n == FUSE_MAX_KERNELS) {
		rc = nrt_set_error(NRT_ERR_INVALID, "nrt_fuse_register: table full (%d kernels)", FUSE_MAX_KERNELS);
		goto out;
	}
	fuse_kernels[n].fn = fn;
	fuse_kernels[n].k = k;
	atomic_store(&fuse_nkernels, n + 1); /* publishes the entry */
out:
	pthread_mutex_unlock(&fuse_reg_lock);
	return rc;
}

static const nrt_fuse_kernel_t *fuse_lookup(nrt_kernel_fn fn)
{
	int n = atomic_load_explicit(&fuse_nkernels, memory_order_acquire);

	for (int i = 0; i < n; i++)
		if (fuse_kernels[i].fn == fn)
			return fuse_kernels[i].k;
	return NULL;
}

void nrt_fuse_enable(bool on)
{
	atomic_store(&fuse_on, on);
}

bool nrt_fuse_enabled(void)
{
	return atomic_load(&fuse_on);
}

void nrt_fuse_set_dead_buffers(bool on)
{
	atomic_store(&fuse_dead_on, on);
}

bool nrt_fuse_dead_buffers(void)
{
	return atomic_load(&fuse_dead_on);
}

void nrt_fuse_set_tile(int64_t elements)
{
	if (elements < 64)
		elements = 64;
	if (elements > ((int64_t)1 << 24))
		elements = (int64_t)1 << 24;
	atomic_store(&fuse_tile_elems, elements);
}

int64_t nrt_fuse_tile(void)
{
	return atomic_load(&fuse_tile_elems);
}

void nrt_fuse_get_stats(nrt_fuse_stats_t *out)
{
	if (!out)
		return;
	out->runs = atomic_load(&fuse_stat_runs);
	out->records = atomic_load(&fuse_stat_records);
	out->dead = atomic_load(&fuse_stat_dead);
}

/* ---- scratch ---------------------------------------------------------------------------------------- */
struct fuse_rec {
	void *args;
	const nrt_fuse_kernel_t *k;
	const char *name;
	int item0, nitems;
	uint64_t bytes; /* bytes its operands cover (trace apportioning) */
};

struct fuse_ent { /* one item of one record */
	int64_t pos, n;
	int rec, item; /* item: index inside the record */
	int8_t dead[NRT_FUSE_MAX_OPERANDS]; /* scratch slot of each operand whose range is dead, or -1 */
	bool any_dead;
};

struct fuse_span { /* one operand range */
	uintptr_t s, e;
	int64_t pos, stride;
	int32_t size;
	int rec;  /* the (first) record using it */
	int wrec; /* the first record writing it, INT_MAX if none */
	int slot; /* dead ranges: scratch slot (see fuse_find_dead), else -1 */
	bool read_first; /* the first record using it also reads it */
};

struct fuse_grp { /* one list position of the run: entries [first, first + count) of ent */
	int64_t n, unit0, tiles;
	int first, count;
};

struct fuse_scratch {
	struct fuse_rec rec[NRT_FUSE_MAX_RECORDS];
	nrt_fuse_item_t item[NRT_FUSE_MAX_ITEMS];
	struct fuse_ent ent[NRT_FUSE_MAX_ITEMS];
	struct fuse_span span[NRT_FUSE_MAX_ITEMS * NRT_FUSE_MAX_OPERANDS];
	struct fuse_grp grp[NRT_FUSE_MAX_ITEMS];
	int nspan; /* merged ranges in span[] (fuse_check_memory) */
};

static pthread_key_t fuse_key;
static pthread_once_t fuse_key_once = PTHREAD_ONCE_INIT;
static bool fuse_key_ok;

static void fuse_key_init(void)
{
	fuse_key_ok = pthread_key_create(&fuse_key, free) == 0;
}

static struct fuse_scratch *fuse_scratch(void)
{
	struct fuse_scratch *s;

	pthread_once(&fuse_key_once, fuse_key_init);
	if (!fuse_key_ok)
		return NULL;
	s = pthread_getspecific(fuse_key);
	if (!s) {
		s = malloc(sizeof *s);
		if (s && pthread_setspecific(fuse_key, s)) {
			free(s);
			s = NULL;
		}
	}
	return s;
}

/* The tile buffers of dead ranges: per executing thread, grown on demand, freed at thread exit. */
static pthread_key_t tilebuf_key;
static pthread_once_t tilebuf_once = PTHREAD_ONCE_INIT;
static bool tilebuf_ok;
static _Thread_local size_t tilebuf_cap;

static void tilebuf_init(void)
{
	tilebuf_ok = pthread_key_create(&tilebuf_key, free) == 0;
}

static char *fuse_tilebuf(size_t bytes)
{
	void *p;

	pthread_once(&tilebuf_once, tilebuf_init);
	if (!tilebuf_ok)
		return NULL;
	p = pthread_getspecific(tilebuf_key);
	if (p && tilebuf_cap >= bytes)
		return p;
	free(p);
	pthread_setspecific(tilebuf_key, NULL);
	tilebuf_cap = 0;
	if (posix_memalign(&p, 64, bytes))
		return NULL;
	if (pthread_setspecific(tilebuf_key, p)) {
		free(p);
		return NULL;
	}
	tilebuf_cap = bytes;
	return p;
}

/* ---- planning --------------------------------------------------------------------------------------- */
static bool fuse_item_valid(const nrt_fuse_item_t *it)
{
	if (it->n < 0 || it->nops < 1 || it->nops > NRT_FUSE_MAX_OPERANDS)
		return false;
	for (int k = 0; k < it->nops; k++) {
		const nrt_fuse_operand_t *o = &it->op[k];
		if (it->n && !o->ptr)
			return false;
		if (o->size <= 0 || o->stride < 0 || (o->stride && it->n > INT64_MAX / o->stride))
			return false;
		if (o->write && !o->stride && it->n > 1)
			return false; /* every element written to one place: not elementwise */
		if (o->stride && (uintptr_t)o->ptr > UINTPTR_MAX - (uintptr_t)(it->n * o->stride))
			return false;
	}
	return true;
}

/* Gathers the fusable records from head on into S; returns their count. */
static int fuse_gather(struct fuse_scratch *S, struct nrt_queue *q, uint64_t head, uint64_t tail)
{
	int nrec = 0, nitems = 0;

	while (nrec < NRT_FUSE_MAX_RECORDS && head + (uint64_t)nrec < tail) {
		struct nrt_launch_rec *r = &q->ring[(head + (uint64_t)nrec) & FUSE_RING_MASK];
		const nrt_fuse_kernel_t *k;
		uint64_t bytes = 0;
		int cnt;

		if (r->kind != NRT_REC_KERNEL || !(k = fuse_lookup(r->fn)))
			break;
		cnt = k->describe(r->args, S->item + nitems, NRT_FUSE_MAX_ITEMS - nitems);
		if (cnt < 0 || cnt > NRT_FUSE_MAX_ITEMS - nitems)
			break;
		for (int i = 0; i < cnt; i++) {
			const nrt_fuse_item_t *it = &S->item[nitems + i];
			if (!fuse_item_valid(it))
				return nrec;
			for (int o = 0; o < it->nops; o++)
				bytes += (uint64_t)(it->op[o].stride ? it->n * it->op[o].stride : it->op[o].size);
		}
		S->rec[nrec] = (struct fuse_rec){ r->args, k, r->name, nitems, cnt, bytes };
		nitems += cnt;
		nrec++;
	}
	return nrec;
}

static int ent_cmp(const void *pa, const void *pb)
{
	const struct fuse_ent *a = pa, *b = pb;

	if (a->pos != b->pos)
		return a->pos < b->pos ? -1 : 1;
	if (a->rec != b->rec)
		return a->rec < b->rec ? -1 : 1;
	return a->item < b->item ? -1 : a->item > b->item;
}

static int span_cmp(const void *pa, const void *pb)
{
	const struct fuse_span *a = pa, *b = pb;

	if (a->s != b->s)
		return a->s < b->s ? -1 : 1;
	if (a->e != b->e)
		return a->e < b->e ? -1 : 1;
	if (a->pos != b->pos)
		return a->pos < b->pos ? -1 : 1;
	if (a->stride != b->stride)
		return a->stride < b->stride ? -1 : 1;
	return a->size < b->size ? -1 : a->size > b->size;
}

/* Fills S->ent sorted by (position, record, item); returns the number of records whose items agree on
 * the element count of every position they share with earlier records. */
static int fuse_check_positions(struct fuse_scratch *S, int nrec, int *nent)
{
	int n = 0, cut = nrec;

	for (int r = 0; r < nrec; r++)
		for (int i = 0; i < S->rec[r].nitems; i++) {
			const nrt_fuse_item_t *it = &S->item[S->rec[r].item0 + i];
			S->ent[n++] = (struct fuse_ent){ it->pos, it->n, r, i, { -1, -1, -1, -1 }, false };
		}
	qsort(S->ent, (size_t)n, sizeof S->ent[0], ent_cmp);
	for (int i = 0, g = 0; i < n; i++) {
		if (S->ent[i].pos != S->ent[g].pos)
			g = i;
		else if (S->ent[i].n != S->ent[g].n && S->ent[i].rec < cut)
			cut = S->ent[i].rec;
	}
	*nent = n;
	return cut;
}

static bool span_same(const struct fuse_span *a, const struct fuse_span *b)
{
	return a->s == b->s && a->e == b->e && a->pos == b->pos && a->stride == b->stride && a->size == b->size;
}

static int imax(int a, int b)
{
	return a > b ? a : b;
}

static int imin(int a, int b)
{
	return a < b ? a : b;
}

/* Returns how many records (<= cut) have no overlap conflict with each other, or -1 when the check
 * would cost too much.  The operand ranges are sorted and identical ones (one tensor at one position,
 * used by several records) merged first, keeping the first record that uses the range (rec) and the
 * first that writes it (wrec, INT_MAX if none).  Two distinct overlapping ranges of which one is
 * written conflict: the run stops at the later of the two records involved. */
static int fuse_check_memory(struct fuse_scratch *S, int cut)
{
	int n = 0, m = 0, budget = FUSE_PAIR_BUDGET;

	for (int r = 0; r < cut; r++)
		for (int i = 0; i < S->rec[r].nitems; i++) {
			const nrt_fuse_item_t *it = &S->item[S->rec[r].item0 + i];
			if (!it->n)
				continue; /* touches nothing */
			for (int o = 0; o < it->nops; o++) {
				const nrt_fuse_operand_t *op = &it->op[o];
				uintptr_t s = (uintptr_t)op->ptr;
				uintptr_t e = s + (uintptr_t)(op->stride ? it->n * op->stride : op->size);
				S->span[n++] = (struct fuse_span){ s, e, it->pos, op->stride, op->size, r,
								   op->write ? r : INT_MAX, -1, !op->write };
			}
		}
	qsort(S->span, (size_t)n, sizeof S->span[0], span_cmp);
	for (int i = 0; i < n; i++) { /* merge identical ranges */
		if (m && span_same(&S->span[m - 1], &S->span[i])) {
			struct fuse_span *d = &S->span[m - 1];
			if (S->span[i].rec < d->rec)
				d->read_first = S->span[i].read_first;
			else if (S->span[i].rec == d->rec)
				d->read_first |= S->span[i].read_first;
			d->rec = imin(d->rec, S->span[i].rec);
			d->wrec = imin(d->wrec, S->span[i].wrec);
			continue;
		}
		S->span[m++] = S->span[i];
	}
	S->nspan = m;
	for (int i = 0; i < m; i++) {
		const struct fuse_span *a = &S->span[i];
		for (int j = i + 1; j < m && S->span[j].s < a->e; j++) {
			const struct fuse_span *b = &S->span[j];
			if (--budget < 0)
				return -1;
			cut = imin(cut, imin(imax(a->wrec, b->rec), imax(a->rec, b->wrec)));
		}
	}
	return cut;
}

/* ---- dead ranges ------------------------------------------------------------------------------------ */
#define FUSE_DEAD_SLOTS 4   /* dead ranges per list position held in tile buffers */
#define FUSE_DEAD_CHECKS 64 /* allocator look-ups per run */

static const struct fuse_span *fuse_span_find(const struct fuse_scratch *S, const struct fuse_span *key)
{
	int lo = 0, hi = S->nspan - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2, c = span_cmp(&S->span[mid], key);
		if (!c)
			return &S->span[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

static const struct fuse_span *fuse_operand_span(const struct fuse_scratch *S, const nrt_fuse_item_t *it, int o)
{
	const nrt_fuse_operand_t *op = &it->op[o];
	struct fuse_span key = { (uintptr_t)op->ptr,
				 (uintptr_t)op->ptr + (uintptr_t)(op->stride ? it->n * op->stride : op->size),
				 it->pos, op->stride, op->size, 0, 0, -1, false };

	return fuse_span_find(S, &key);
}

/* Numbers the dead ranges of the run of records [0, nrec) (S->span from fuse_check_memory): written by
 * the first record that uses them without being read by it, contiguous, and free in the allocator.  The
 * allocator look-up comes after the host's nrt_free (same lock), so the queue tail read after it counts
 * every record queued before the free: they must all be in the run, or the range stays in memory.
 * Returns the number of dead ranges. */
static int fuse_find_dead(struct fuse_scratch *S, struct nrt_queue *q, uint64_t head, int nrec)
{
	int ndead = 0, checks = 0;

	for (int i = 0; i < S->nspan; i++) {
		struct fuse_span *sp = &S->span[i];
		int slot = 0;

		sp->slot = -1;
		if (sp->rec >= nrec || sp->wrec != sp->rec || sp->read_first || sp->stride != sp->size ||
		    sp->size > 8 || checks >= FUSE_DEAD_CHECKS)
			continue;
		checks++;
		if (!nrt_alloc_range_free(q->dev, (const void *)sp->s, (size_t)(sp->e - sp->s)))
			continue;
		for (int j = 0; j < i; j++)
			slot += S->span[j].slot >= 0 && S->span[j].pos == sp->pos;
		if (slot < FUSE_DEAD_SLOTS) {
			sp->slot = slot;
			ndead++;
		}
	}
	if (ndead && nrt_queue_tail_now(q) - head != (uint64_t)nrec) {
		for (int i = 0; i < S->nspan; i++)
			S->span[i].slot = -1;
		ndead = 0;
	}
	return ndead;
}

/* Gives each entry of the planned groups the tile-buffer slot of its dead operands.  A range used by a
 * record whose kernel cannot take buffers (no range_ptrs) stays in memory for all. */
static void fuse_mark_entries(struct fuse_scratch *S, int ngrp)
{
	for (int pass = 0; pass < 2; pass++)
		for (int g = 0; g < ngrp; g++)
			for (int i = S->grp[g].first; i < S->grp[g].first + S->grp[g].count; i++) {
				struct fuse_ent *E = &S->ent[i];
				const struct fuse_rec *rec = &S->rec[E->rec];
				const nrt_fuse_item_t *it = &S->item[rec->item0 + E->item];

				for (int o = 0; o < it->nops; o++) {
					struct fuse_span *sp = (struct fuse_span *)fuse_operand_span(S, it, o);
					if (!sp || sp->slot < 0)
						continue;
					if (!rec->k->range_ptrs) {
						sp->slot = -1;
					} else if (pass == 1) {
						E->dead[o] = (int8_t)sp->slot;
						E->any_dead = true;
					}
				}
			}
}

/* Groups the entries of records [0, nrec) by position (dropping the others) and numbers the units. */
static int64_t fuse_plan_units(struct fuse_scratch *S, int nent, int nrec, int64_t tile, int *ngrp_out)
{
	int m = 0, ngrp = 0;
	int64_t units = 0;

	for (int i = 0; i < nent; i++)
		if (S->ent[i].rec < nrec)
			S->ent[m++] = S->ent[i];
	for (int i = 0; i < m; i++) {
		if (ngrp && S->grp[ngrp - 1].first + S->grp[ngrp - 1].count == i &&
		    S->ent[S->grp[ngrp - 1].first].pos == S->ent[i].pos) {
			S->grp[ngrp - 1].count++;
			continue;
		}
		S->grp[ngrp++] = (struct fuse_grp){ S->ent[i].n, 0, 0, i, 1 };
	}
	for (int g = 0; g < ngrp; g++) {
		S->grp[g].unit0 = units;
		S->grp[g].tiles = (S->grp[g].n + tile - 1) / tile;
		units += S->grp[g].tiles;
	}
	*ngrp_out = ngrp;
	return units;
}

/* ---- execution -------------------------------------------------------------------------------------- */
struct fuse_run {
	struct fuse_scratch *S;
	int ngrp;
	int64_t tile;
	atomic_int failed;      /* 0, or 1 + the failing record */
	int fail_rc;
	char msg[NRT_ERRMSG_MAX];
};

static void fuse_task(void *ctx, int64_t begin, int64_t end)
{
	struct fuse_run *R = ctx;
	struct fuse_scratch *S = R->S;
	int lo = 0, hi = R->ngrp - 1;
	char *buf = NULL;

	nrt_kernel_fail_clear();
	while (lo < hi) { /* the group holding unit `begin` */
		int mid = (lo + hi + 1) / 2;
		if (S->grp[mid].unit0 <= begin)
			lo = mid;
		else
			hi = mid - 1;
	}
	for (int64_t u = begin, g = lo; u < end; u++) {
		while (u >= S->grp[g].unit0 + S->grp[g].tiles)
			g++;
		const struct fuse_grp *G = &S->grp[g];
		int64_t b = (u - G->unit0) * R->tile;
		int64_t e = G->n - b > R->tile ? b + R->tile : G->n;
		for (int i = 0; i < G->count; i++) {
			const struct fuse_ent *E = &S->ent[G->first + i];
			const struct fuse_rec *rec = &S->rec[E->rec];
			int rc;
			if (atomic_load_explicit(&R->failed, memory_order_relaxed))
				return;
			if (E->any_dead && (buf || (buf = fuse_tilebuf((size_t)R->tile * 8 * FUSE_DEAD_SLOTS)))) {
				void *ptrs[NRT_FUSE_MAX_OPERANDS] = { NULL, NULL, NULL, NULL };
				for (int o = 0; o < NRT_FUSE_MAX_OPERANDS; o++)
					if (E->dead[o] >= 0)
						ptrs[o] = buf + (size_t)E->dead[o] * (size_t)R->tile * 8;
				rc = rec->k->range_ptrs(rec->args, E->item, b, e, ptrs);
			} else {
				/* no buffer: a dead range may as well be written to memory */
				rc = rec->k->range(rec->args, E->item, b, e);
			}
			if (rc) {
				int none = 0;
				if (atomic_compare_exchange_strong(&R->failed, &none, 1 + E->rec)) {
					R->fail_rc = rc;
					snprintf(R->msg, sizeof R->msg, "%s", nrt_kernel_fail_message());
				}
				return;
			}
		}
	}
}

/* The queue worker lets a run of large fusable records grow while the host is still queueing them: the
 * host queues an optimizer step's foreach ops one Python call apart (tens of microseconds), so the
 * worker, being faster to start than the host is to queue, would otherwise run the first one or two
 * ops of a step alone and the rest as a second run, an extra pass over memory.  It waits while the
 * newest queued record is fusable and arrived less than FUSE_WAIT_GAP_NS ago, at most FUSE_WAIT_MAX_NS
 * in all, and only when the record at head covers FUSE_WAIT_MIN_BYTES or more (it runs for
 * milliseconds: the wait costs a few per cent at most).  Only the worker waits: a launching or
 * synchronizing thread running records is the producer itself; and it stops waiting as soon as a
 * thread waits for the queue (synchronize, an event), which queues nothing more meanwhile (an
 * optimizer step followed by a synchronize would otherwise idle FUSE_WAIT_GAP_NS before its run).
 * Returns the tail to use. */
#define FUSE_WAIT_GAP_NS 200000
#define FUSE_WAIT_MAX_NS 1000000
#define FUSE_WAIT_MIN_BYTES ((uint64_t)4 << 20)

static uint64_t fuse_wait_more(struct fuse_scratch *S, struct nrt_queue *q, uint64_t head, uint64_t tail)
{
	int64_t now, last, end;

	if (!nrt_queue_on_worker() || fuse_gather(S, q, head, head + 1) != 1 || S->rec[0].bytes < FUSE_WAIT_MIN_BYTES)
		return tail;
	now = last = nrt_mono_ns();
	end = now + FUSE_WAIT_MAX_NS;
	while (tail - head < NRT_FUSE_MAX_RECORDS) {
		struct nrt_launch_rec *r = &q->ring[(tail - 1) & FUSE_RING_MASK];
		uint64_t t;

		if (r->kind != NRT_REC_KERNEL || !fuse_lookup(r->fn))
			break; /* the run ends before the newest record anyway */
		if (atomic_load_explicit(&q->draining, memory_order_relaxed))
			break; /* the producer waits for the queue */
		for (int i = 0; i < 64; i++)
			nrt_cpu_relax();
		t = nrt_queue_tail_now(q);
		now = nrt_mono_ns();
		if (t != tail) {
			tail = t;
			last = now;
		} else if (now - last > FUSE_WAIT_GAP_NS) {
			break;
		}
		if (now > end)
			break;
	}
	return tail;
}

int nrt_fuse_exec(struct nrt_queue *q, uint64_t head, uint64_t tail)
{
	struct nrt_launch_rec *r0 = &q->ring[head & FUSE_RING_MASK];
	struct fuse_scratch *S;
	struct fuse_run R;
	int nrec, nent, failed, ndead;
	int64_t units, t0 = 0, t1;
	bool traced;

	if (!atomic_load_explicit(&fuse_on, memory_order_relaxed) || r0->kind != NRT_REC_KERNEL ||
	    !fuse_lookup(r0->fn) || atomic_load(&q->err_flag))
		return 0;
	if (!(S = fuse_scratch()))
		return 0;
	tail = fuse_wait_more(S, q, head, tail);
	if (tail - head < 2)
		return 0;
	nrec = fuse_gather(S, q, head, tail);
	if (nrec < 2)
		return 0;
	nrec = fuse_check_positions(S, nrec, &nent);
	if (nrec < 2)
		return 0;
	nrec = fuse_check_memory(S, nrec);
	if (nrec < 2)
		return 0;

	R.S = S;
	R.tile = atomic_load(&fuse_tile_elems);
	units = fuse_plan_units(S, nent, nrec, R.tile, &R.ngrp);
	if (atomic_load_explicit(&fuse_dead_on, memory_order_relaxed) && (ndead = fuse_find_dead(S, q, head, nrec))) {
		fuse_mark_entries(S, R.ngrp);
		atomic_fetch_add(&fuse_stat_dead, (uint64_t)ndead);
	}
	atomic_init(&R.failed, 0);
	R.fail_rc = 0;
	R.msg[0] = 0;
	traced = nrt_queue_trace_on();
	if (traced)
		t0 = nrt_mono_ns();
	if (units > 0)
		nrt_parallel_for(units, 1, fuse_task, &R);
	failed = atomic_load(&R.failed);
	if (failed) {
		if (R.msg[0])
			nrt_kernel_fail("%s", R.msg);
		else
			nrt_kernel_fail_clear();
		/* the records of a run execute tile by tile together: none of their outputs is whole */
		nrt_queue_fail_record(q, S->rec[failed - 1].name, R.fail_rc, head, head + (uint64_t)nrec - 1);
	}
	if (traced) {
		uint64_t total = 0, done = 0;
		t1 = nrt_mono_ns();
		for (int i = 0; i < nrec; i++)
			total += S->rec[i].bytes;
		for (int i = 0; i < nrec; i++) {
			int64_t a = t0 + (int64_t)(total ? (double)(t1 - t0) * (double)done / (double)total : 0);
			done += S->rec[i].bytes;
			int64_t b = total ? t0 + (int64_t)((double)(t1 - t0) * (double)done / (double)total) : t1;
			nrt_queue_trace_record(q, head + (uint64_t)i, a, b);
		}
	}
	atomic_fetch_add(&fuse_stat_runs, 1);
	atomic_fetch_add(&fuse_stat_records, (uint64_t)nrec);
	return nrec;
}

void nrt_fuse_fork_locks(bool lock)
{
	if (lock)
		pthread_mutex_lock(&fuse_reg_lock);
	else
		pthread_mutex_unlock(&fuse_reg_lock);
}
