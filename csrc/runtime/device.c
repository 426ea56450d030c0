/* device.c - environment parsing, nrt_init and the device table.
 *
 * Devices are created once per index and never torn down: nrt_reinit_for_testing only changes how many
 * are visible, their memory limit and the launch mode, so queue and block references stay valid.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "nrt_impl.h"

#define NRT_MAX_CORE_INDEX 4096

struct nrt_device nrt_devices[NRT_MAX_DEVICES];

static struct {
	pthread_mutex_t lock;
	atomic_int state;      /* 0 not yet, 1 ok, 2 failed */
	int status;            /* failure status (state 2) */
	char msg[NRT_ERRMSG_MAX];
	atomic_int ndev;
	size_t limit;
	atomic_bool blocking;
} rt = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int env_error(const char *var, const char *val, const char *why)
{
	return nrt_set_error(NRT_ERR_ENV, "%s=\"%s\": %s", var, val, why);
}

/* Reads a decimal number without sign or spaces; false if there are no digits or it exceeds max. */
static bool parse_uint(const char **p, uint64_t max, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;

	if (!isdigit((unsigned char)*s))
		return false;
	for (; isdigit((unsigned char)*s); s++) {
		unsigned d = (unsigned)(*s - '0');

		if (v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*p = s;
	*out = v;
	return true;
}

int nrt_parse_visible_cores(const char *s, int *count)
{
	static const char var[] = "NEURON_RT_VISIBLE_CORES";
	static const char want[] = "expected core indices like \"0\", \"0-1\" or \"0,2\"";
	unsigned char seen[NRT_MAX_CORE_INDEX / 8] = { 0 };
	const char *p = s;
	int n = 0;

	if (!s || !count)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_parse_visible_cores: null argument");
	if (!*s)
		return env_error(var, s, want);
	for (;;) {
		uint64_t a, b;

		if (!parse_uint(&p, NRT_MAX_CORE_INDEX - 1, &a))
			return env_error(var, s, want);
		b = a;
		if (*p == '-') {
			p++;
			if (!parse_uint(&p, NRT_MAX_CORE_INDEX - 1, &b))
				return env_error(var, s, want);
			if (b < a)
				return env_error(var, s, "a range must go upwards (\"0-1\")");
		}
		for (uint64_t i = a; i <= b; i++) {
			if (seen[i / 8] & (1u << (i % 8)))
				return env_error(var, s, "a core is listed twice");
			seen[i / 8] |= (unsigned char)(1u << (i % 8));
			if (++n > NRT_MAX_DEVICES)
				return env_error(var, s, "more cores than the runtime supports (64)");
		}
		if (!*p)
			break;
		if (*p != ',')
			return env_error(var, s, want);
		p++;
	}
	*count = n;
	return NRT_OK;
}

/* Suffixes are binary: K, KB and KiB all mean 1024 (as memory limits are usually meant). */
int nrt_parse_bytes(const char *s, size_t *bytes)
{
	static const char var[] = "NEURON_RT_MEMORY_LIMIT";
	static const char want[] = "expected a byte count like 1073741824, 4GiB, 512MiB or 4G";
	static const char units[] = "KMGT";
	const char *p = s, *u;
	uint64_t v, mult = 1;

	if (!s || !bytes)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_parse_bytes: null argument");
	if (!parse_uint(&p, UINT64_MAX, &v))
		return env_error(var, s, want);
	if (*p && (u = strchr(units, toupper((unsigned char)*p)))) {
		for (const char *k = units; k <= u; k++)
			mult *= 1024;
		p++;
		if (!strcasecmp(p, "iB") || !strcasecmp(p, "B"))
			p += strlen(p);
	} else if (!strcasecmp(p, "B")) {
		p++;
	}
	if (*p)
		return env_error(var, s, want);
	if (v > SIZE_MAX / mult)
		return env_error(var, s, "too large");
	if (v == 0)
		return env_error(var, s, "the limit must be positive");
	*bytes = (size_t)(v * mult);
	return NRT_OK;
}

static int parse_blocking(const char *s, bool *on)
{
	if (!s || !*s || !strcmp(s, "0")) {
		*on = false;
		return NRT_OK;
	}
	if (!strcmp(s, "1")) {
		*on = true;
		return NRT_OK;
	}
	return env_error("NEURON_LAUNCH_BLOCKING", s, "expected 0 or 1");
}

static size_t default_limit(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || psz <= 0)
		return (size_t)1 << 30;
	return (size_t)pages / 2 * (size_t)psz;
}

static int parse_env(int *ndev, size_t *limit, bool *blocking)
{
	const char *v;
	int rc, nthreads;
	size_t inline_bytes;

	*ndev = 1;
	v = getenv("NEURON_RT_VISIBLE_CORES");
	if (v && (rc = nrt_parse_visible_cores(v, ndev)))
		return rc;
	*limit = default_limit();
	v = getenv("NEURON_RT_MEMORY_LIMIT");
	if (v && (rc = nrt_parse_bytes(v, limit)))
		return rc;
	if ((rc = parse_blocking(getenv("NEURON_LAUNCH_BLOCKING"), blocking)))
		return rc;
	v = getenv("NEURON_NUM_THREADS");
	if (v && nrt_parse_num_threads(v, &nthreads))
		return env_error("NEURON_NUM_THREADS", v, "expected a thread count from 1 to 256");
	inline_bytes = NRT_INLINE_BYTES_DEFAULT;
	v = getenv("NEURON_INLINE_BYTES");
	if (v && strcmp(v, "0") && (rc = nrt_parse_bytes(v, &inline_bytes)))
		return env_error("NEURON_INLINE_BYTES", v, "expected a byte count (0 disables inline execution)");
	if (v && !strcmp(v, "0"))
		inline_bytes = 0;
	nrt_set_inline_bytes(inline_bytes);
	v = getenv("NEURON_HUGEPAGES");
	if (v && strcmp(v, "0") && strcmp(v, "1"))
		return env_error("NEURON_HUGEPAGES", v, "expected 0 or 1");
	nrt_set_hugepages(!v || strcmp(v, "0") != 0);
	return NRT_OK;
}

/* Creates device dev's allocator and default queue (first time it becomes visible). */
static int device_create(int dev, size_t limit)
{
	struct nrt_device *d = &nrt_devices[dev];
	struct nrt_queue *q;
	int rc;

	if (d->created)
		return NRT_OK;
	q = calloc(1, sizeof *q);
	if (!q)
		return nrt_set_error(NRT_ERR_HOST, "neuron:%d: out of host memory for the default queue", dev);
	if ((rc = nrt_alloc_device_init(dev, limit)))
		goto free_queue;
	if ((rc = nrt_queue_start(q, dev, 0, 0)))
		goto free_queue; /* the allocator's mutex stays initialized; harmless */
	pthread_mutex_init(&d->queues_lock, NULL);
	d->queues = q;
	d->default_queue = q;
	d->next_queue_id = 1;
	d->created = true;
	return NRT_OK;

free_queue:
	free(q);
	return rc;
}

/* Called with rt.lock held. */
static int init_locked(void)
{
	int ndev = 0, rc;
	size_t limit = 0;
	bool blocking = false;

	atomic_store(&rt.ndev, 0);
	rc = parse_env(&ndev, &limit, &blocking);
	for (int i = 0; !rc && i < ndev; i++)
		rc = device_create(i, limit);
	if (rc) {
		rt.status = rc;
		snprintf(rt.msg, sizeof rt.msg, "%s", nrt_last_error());
		atomic_store(&rt.state, 2);
		return rc;
	}
	rt.limit = limit;
	for (int i = 0; i < NRT_MAX_DEVICES; i++)
		if (nrt_devices[i].created)
			nrt_alloc_set_limit(i, limit);
	atomic_store(&rt.blocking, blocking);
	atomic_store(&rt.ndev, ndev);
	atomic_store(&rt.state, 1);
	return NRT_OK;
}

static int report_init_failure(void)
{
	return nrt_set_error(rt.status, "%s", rt.msg);
}

int nrt_init(void)
{
	int state = atomic_load(&rt.state), rc;

	if (nrt_bad_fork())
		return nrt_fork_error();
	if (state == 1)
		return NRT_OK;
	nrt_fork_register();
	if (state == 2)
		return report_init_failure();
	pthread_mutex_lock(&rt.lock);
	state = atomic_load(&rt.state);
	if (state == 0)
		rc = init_locked();
	else
		rc = state == 1 ? NRT_OK : report_init_failure();
	pthread_mutex_unlock(&rt.lock);
	if (rc == NRT_OK)
		nrt_watch_start();
	return rc;
}

int nrt_reinit_for_testing(void)
{
	int rc = NRT_OK;

	pthread_mutex_lock(&rt.lock);
	for (int i = 0; i < NRT_MAX_DEVICES; i++) {
		if (!nrt_devices[i].created)
			continue;
		nrt_device_synchronize(i); /* errors of the old configuration are dropped */
		nrt_empty_cache(i);
		if (nrt_alloc_live_bytes(i)) {
			rc = nrt_set_error(NRT_ERR_INVALID, "nrt_reinit_for_testing: neuron:%d has live memory", i);
			break;
		}
	}
	if (!rc)
		rc = init_locked();
	pthread_mutex_unlock(&rt.lock);
	return rc;
}

int nrt_device_count(void)
{
	return atomic_load(&rt.ndev);
}

bool nrt_device_valid(int dev)
{
	return dev >= 0 && dev < atomic_load(&rt.ndev);
}

bool nrt_launch_blocking(void)
{
	return atomic_load_explicit(&rt.blocking, memory_order_relaxed);
}

int nrt_device_memory_limit(int dev, size_t *bytes)
{
	if (nrt_bad_fork())
		return nrt_fork_error();
	if (!nrt_device_valid(dev) || !bytes)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_device_memory_limit: no device neuron:%d", dev);
	*bytes = nrt_alloc_limit(dev);
	return NRT_OK;
}

/* The init lock, then each created device's queue list (devices are created under the init lock). */
void nrt_device_fork_locks(bool lock)
{
	if (lock)
		pthread_mutex_lock(&rt.lock);
	for (int i = 0; i < NRT_MAX_DEVICES; i++) {
		if (!nrt_devices[i].created)
			continue;
		if (lock)
			pthread_mutex_lock(&nrt_devices[i].queues_lock);
		else
			pthread_mutex_unlock(&nrt_devices[i].queues_lock);
	}
	if (!lock)
		pthread_mutex_unlock(&rt.lock);
}
