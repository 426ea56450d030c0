/* watch.c - the watch page: what `torchneuron info --watch` shows of every process using the runtime.
 *
 * After the runtime initializes, a detached thread refreshes /dev/shm/neuron-watch-<pid> every 250 ms with
 * the process's devices: memory (allocated, reserved, peak, limit, OOMs) and queue counters (records
 * pushed and finished over all queues).  The page is one 4 KiB shared mapping: a 64-bit sequence number
 * (odd while the thread writes, a seqlock) and then NUL-terminated JSON, so the reader needs no struct
 * layout.  The page is unlinked at exit by the process that made it (not by a forked child).  A process
 * that ends without exit handlers (os._exit, as multiprocessing children do; a signal) leaves its page:
 * each new page's process and the reader remove the pages whose process is gone.  NEURON_WATCH=0 turns it
 * off.  Failures to publish are
 * silent: watching never affects the program.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "nrt.h"
#include "nrt_impl.h"

#define PAGE 4096

static struct {
	atomic_int started;
	pid_t owner;
	char path[64];
	char cmd[160];
	char *page;
} w;

static void cmdline(char *out, size_t cap)
{
	FILE *f = fopen("/proc/self/cmdline", "r");
	size_t n = 0, j = 0;
	char buf[256];

	out[0] = 0;
	if (!f)
		return;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	for (size_t i = 0; i < n && j + 2 < cap; i++) {
		char c = buf[i] ? buf[i] : ' ';
		if (c == '"' || c == '\\')
			out[j++] = '\\';
		out[j++] = (c >= 32 && c < 127) ? c : '?';
	}
	while (j > 0 && out[j - 1] == ' ')
		j--;
	out[j] = 0;
}

/* The queues' pushed / finished record counts of device dev. */
static void queue_counts(int dev, uint64_t *pushed, uint64_t *done, int *nq)
{
	struct nrt_device *d = &nrt_devices[dev];

	*pushed = *done = 0, *nq = 0;
	pthread_mutex_lock(&d->queues_lock);
	for (struct nrt_queue *q = d->queues; q; q = q->next) {
		*pushed += atomic_load_explicit(&q->tail, memory_order_relaxed);
		*done += atomic_load_explicit(&q->head, memory_order_relaxed);
		(*nq)++;
	}
	pthread_mutex_unlock(&d->queues_lock);
}

static void publish(void)
{
	char text[PAGE - 8];
	int n = 0, ndev = nrt_device_count();
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	n += snprintf(text + n, sizeof text - n, "{\"pid\":%d,\"cmd\":\"%s\",\"time\":%.3f,\"devices\":[", (int)w.owner, w.cmd,
		      ts.tv_sec + ts.tv_nsec * 1e-9);
	for (int i = 0; i < ndev && n < (int)sizeof text - 256; i++) {
		nrt_mem_stats_t st;
		uint64_t pushed, done;
		int nq;

		if (!nrt_devices[i].created || nrt_memory_stats(i, &st))
			continue;
		queue_counts(i, &pushed, &done, &nq);
		n += snprintf(text + n, sizeof text - n,
			      "%s{\"index\":%d,\"allocated\":%lld,\"reserved\":%lld,\"peak_allocated\":%lld,\"limit\":%lld,"
			      "\"ooms\":%lld,\"queues\":%d,\"pushed\":%llu,\"done\":%llu}",
			      i ? "," : "", i, (long long)st.allocated_bytes.current, (long long)st.reserved_bytes.current,
			      (long long)st.allocated_bytes.peak, (long long)st.limit_bytes, (long long)st.num_ooms, nq,
			      (unsigned long long)pushed, (unsigned long long)done);
	}
	if (n >= (int)sizeof text - 3)
		return;
	n += snprintf(text + n, sizeof text - n, "]}");
	atomic_uint_fast64_t *seq = (atomic_uint_fast64_t *)w.page;
	atomic_fetch_add_explicit(seq, 1, memory_order_acq_rel); /* odd: writing */
	memcpy(w.page + 8, text, (size_t)n + 1);
	atomic_fetch_add_explicit(seq, 1, memory_order_release);
}

static void *watch_thread(void *arg)
{
	const struct timespec period = { 0, 250 * 1000 * 1000 };

	(void)arg;
	for (;;) {
		if (getpid() == w.owner)
			publish();
		nanosleep(&period, NULL);
	}
	return NULL;
}

static void unlink_page(void)
{
	if (getpid() == w.owner && w.path[0])
		unlink(w.path);
}

/* Unlinks the pages of processes that no longer exist (ESRCH; a reused pid keeps its page, harmlessly). */
static void sweep_dead_pages(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	char path[300];

	if (!d)
		return;
	while ((e = readdir(d))) {
		char *end;
		long pid;

		if (strncmp(e->d_name, "neuron-watch-", 13) != 0)
			continue;
		pid = strtol(e->d_name + 13, &end, 10);
		if (*end || pid <= 0 || pid == (long)getpid())
			continue;
		if (kill((pid_t)pid, 0) == -1 && errno == ESRCH) {
			snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
			unlink(path);
		}
	}
	closedir(d);
}

void nrt_watch_start(void)
{
	const char *v = getenv("NEURON_WATCH");
	pthread_attr_t attr;
	pthread_t t;
	int fd;

	if ((v && strcmp(v, "0") == 0) || atomic_exchange(&w.started, 1))
		return;
	w.owner = getpid();
	sweep_dead_pages();
	snprintf(w.path, sizeof w.path, "/dev/shm/neuron-watch-%d", (int)w.owner);
	fd = open(w.path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		goto fail;
	if (ftruncate(fd, PAGE)) {
		close(fd);
		goto fail_unlink;
	}
	w.page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (w.page == MAP_FAILED) {
		w.page = NULL;
		goto fail_unlink;
	}
	cmdline(w.cmd, sizeof w.cmd);
	atexit(unlink_page);
	publish();
	if (pthread_attr_init(&attr))
		return;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, watch_thread, NULL))
		unlink_page();
	pthread_attr_destroy(&attr);
	return;

fail_unlink:
	unlink(w.path);
fail:
	w.path[0] = 0;
}
