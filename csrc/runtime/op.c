/* op.c - op brackets (nrt.h): which records, outputs and in-place writes make up one op of the layer
 * above, so that a failed or skipped record poisons exactly the op's blocks.
 *
 * The bracket is thread-local: nrt_queue_push notes the records the thread queues inside it (on the
 * queue of the first one), nrt_malloc and nrt_op_write note its blocks, nrt_op_read notes the pending
 * bad ranges of what it reads.  At the outermost nrt_op_end alloc.c makes the op's records (and the bad
 * ranges it read) producers of each of its blocks (nrt_alloc_op_end).  The outputs of an op that
 * queued nothing (empty) wait as orphans: the thread's next record outside any bracket produces them
 * (a compiled program launched through the C API into tensors allocated for it), its next bracketed
 * record frees them of that (an op of its own).  The block list grows on the heap
 * (an op over a list of tensors writes them all) and is kept for the thread's next ops; a thread-exit
 * destructor frees it.
 */
#include <stdlib.h>
#include <string.h>

#include "nrt_impl.h"

_Thread_local struct nrt_op_state nrt_op;

static pthread_key_t list_key;
static pthread_once_t list_once = PTHREAD_ONCE_INIT;

static void list_free(void *p)
{
	free(p);
}

static void list_key_create(void)
{
	(void)pthread_key_create(&list_key, list_free);
}

bool nrt_op_note_block(void *ptr, uint64_t id, int dev, bool fresh)
{
	struct nrt_op_state *o = &nrt_op;

	if (o->nblk == o->cap) {
		int cap = o->cap ? o->cap * 2 : 16;
		struct nrt_op_block *b = realloc(o->blk, (size_t)cap * sizeof *b);

		if (!b)
			return false;
		pthread_once(&list_once, list_key_create);
		(void)pthread_setspecific(list_key, b);
		o->blk = b;
		o->cap = cap;
	}
	o->blk[o->nblk].ptr = ptr;
	o->blk[o->nblk].id = id;
	o->blk[o->nblk].dev = dev;
	o->blk[o->nblk].fresh = fresh;
	o->nblk++;
	return true;
}

bool nrt_op_begin(void)
{
	if (!nrt_op.depth++) {
		nrt_op.nrec = 0;
		nrt_op.nblk = 0;
		nrt_op.ninh = 0;
	}
	return atomic_load_explicit(&nrt_poison_seen, memory_order_relaxed);
}

void nrt_op_write(void *ptr)
{
	if (ptr && nrt_op.depth)
		(void)nrt_op_note_block(ptr, 0, -1, false); /* without room the write is not tracked */
}

int nrt_op_read(const void *ptr)
{
	struct nrt_queue *open = NULL;
	struct nrt_writer bad;
	int rc;

	if (!ptr || !atomic_load_explicit(&nrt_poison_seen, memory_order_relaxed))
		return NRT_OK;
	rc = nrt_alloc_poison(ptr, &open, &bad);
	if (rc != NRT_ERR_KERNEL || !open)
		return rc; /* clean, or an error already reported: the op must not run on it */
	/* pending: the op's records queue behind it and are skipped, and its outputs inherit the poison
	 * in case another thread reports the error before they run */
	for (int i = 0; i < nrt_op.ninh; i++)
		if (nrt_op.inh[i].q == bad.q && nrt_op.inh[i].first == bad.first)
			return NRT_OK;
	if (nrt_op.depth && nrt_op.ninh < NRT_BLOCK_WRITERS)
		nrt_op.inh[nrt_op.ninh++] = bad;
	return NRT_OK;
}

void nrt_op_end(void)
{
	struct nrt_writer w[1 + NRT_BLOCK_WRITERS];
	int nw = 0;

	if (nrt_op.depth <= 0 || --nrt_op.depth)
		return;
	if (nrt_op.nrec)
		w[nw++] = (struct nrt_writer){ nrt_op.q, nrt_op.first, nrt_op.last };
	for (int i = 0; i < nrt_op.ninh; i++)
		w[nw++] = nrt_op.inh[i];
	if (nw && nrt_op.nblk) /* else: fresh blocks stay without producer, written ones as they were */
		nrt_alloc_op_end(nrt_op.blk, nrt_op.nblk, w, nw);
	if (!nrt_op.nrec) {
		for (int i = 0; i < nrt_op.nblk; i++) {
			if (!nrt_op.blk[i].fresh)
				continue;
			if (nrt_op.norphan == NRT_OP_ORPHANS) /* the oldest stays without producer */
				memmove(&nrt_op.orphan[0], &nrt_op.orphan[1], sizeof nrt_op.orphan - sizeof nrt_op.orphan[0]);
			else
				nrt_op.norphan++;
			nrt_op.orphan[nrt_op.norphan - 1] = nrt_op.blk[i];
		}
	}
	nrt_op.nblk = 0;
}

void nrt_op_adopt_orphans(struct nrt_queue *q, uint64_t seq)
{
	struct nrt_writer w = { q, seq, seq };
	int n = nrt_op.norphan;

	nrt_op.norphan = 0;
	nrt_alloc_op_end(nrt_op.orphan, n, &w, 1);
}
