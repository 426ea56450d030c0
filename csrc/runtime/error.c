/* error.c - status strings, the thread-local last-error message and nrt_kernel_fail. */
#include <stdio.h>
#include <string.h>

#include "nrt_impl.h"

static _Thread_local char nrt_last_msg[NRT_ERRMSG_MAX];
static _Thread_local char nrt_kernel_msg[NRT_ERRMSG_MAX];

const char *nrt_status_string(int status)
{
	switch (status) {
	case NRT_OK: return "success";
	case NRT_ERR_INVALID: return "invalid argument";
	case NRT_ERR_OOM: return "out of memory";
	case NRT_ERR_ENV: return "bad environment variable";
	case NRT_ERR_KERNEL: return "kernel failed";
	case NRT_ERR_HOST: return "host resource error";
	case NRT_ERR_NOT_READY: return "not ready";
	case NRT_ERR_TIMEOUT: return "timeout";
	case NRT_ERR_FORK: return "used in a forked child";
	default: return "unknown status";
	}
}

const char *nrt_last_error(void)
{
	return nrt_last_msg;
}

/* Formats into a temporary first: callers may pass nrt_last_error() itself as an argument. */
int nrt_set_error(int status, const char *fmt, ...)
{
	char tmp[NRT_ERRMSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	memcpy(nrt_last_msg, tmp, sizeof tmp);
	return status;
}

void nrt_kernel_fail(const char *fmt, ...)
{
	char tmp[NRT_ERRMSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	memcpy(nrt_kernel_msg, tmp, sizeof tmp);
}

const char *nrt_kernel_fail_message(void)
{
	return nrt_kernel_msg;
}

void nrt_kernel_fail_clear(void)
{
	nrt_kernel_msg[0] = '\0';
}

void nrt_format_bytes(char *buf, size_t cap, uint64_t bytes)
{
	static const char *const unit[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	int u = 0;

	if (bytes < 1024) {
		snprintf(buf, cap, "%llu bytes", (unsigned long long)bytes);
		return;
	}
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	snprintf(buf, cap, "%.2f %s", v, unit[u]);
}
