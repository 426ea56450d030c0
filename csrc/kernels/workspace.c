/* workspace.c - per-thread kernel scratch (nk_workspace.h): one record per thread behind a pthread key, whose
 * destructor frees it when the thread exits. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "nk_workspace.h"

typedef struct {
	void *p[NK_WS_SLOTS];
	size_t n[NK_WS_SLOTS];
} ws_t;

static pthread_key_t ws_key;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;
static bool ws_key_ok;

static void ws_free(void *v)
{
	ws_t *w = v;

	for (int i = 0; i < NK_WS_SLOTS; i++)
		free(w->p[i]);
	free(w);
}

static void ws_init(void)
{
	ws_key_ok = pthread_key_create(&ws_key, ws_free) == 0;
}

static ws_t *ws_self(void)
{
	ws_t *w;

	pthread_once(&ws_once, ws_init);
	if (!ws_key_ok)
		return NULL;
	w = pthread_getspecific(ws_key);
	if (w)
		return w;
	w = calloc(1, sizeof *w);
	if (w && pthread_setspecific(ws_key, w)) {
		free(w);
		w = NULL;
	}
	return w;
}

void *nk_ws_get(int slot, size_t bytes)
{
	ws_t *w;
	void *p;

	if (slot < 0 || slot >= NK_WS_SLOTS)
		return NULL;
	w = ws_self();
	if (!w)
		return NULL;
	if (w->p[slot] && w->n[slot] >= bytes)
		return w->p[slot];
	bytes = (bytes + 63) / 64 * 64;
	p = aligned_alloc(64, bytes ? bytes : 64);
	if (!p)
		return NULL;
	free(w->p[slot]);
	w->p[slot] = p;
	w->n[slot] = bytes;
	return p;
}
