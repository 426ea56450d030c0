/* nc.c - the compiler's entry point: parse -> fuse -> plan -> emit. */
#include <stdlib.h>
#include <string.h>

#include "nc_impl.h"

struct nc_result {
	char *source, *plan, *log, *error;
};

const char *nc_status_string(int status)
{
	switch (status) {
	case NC_OK: return "ok";
	case NC_ERR_PARSE: return "malformed graph IR";
	case NC_ERR_INVALID: return "invalid graph";
	case NC_ERR_NOMEM: return "out of memory";
	default: return "unknown status";
	}
}

static char *take(nc_sb_t *sb)
{
	if (sb->oom) {
		sb_free(sb);
		return NULL;
	}
	char *p = sb->buf ? sb->buf : nc_strdup_heap("");
	memset(sb, 0, sizeof *sb);
	return p;
}

int nc_compile(const char *ir, nc_result_t **out)
{
	nc_result_t *r = nc_calloc(1, sizeof *r);
	*out = r;
	if (!r)
		return NC_ERR_NOMEM;
	nc_graph_t g;
	memset(&g, 0, sizeof g);
	nc_sb_t src = {0}, plan = {0};
	int st = ir ? nc_parse(&g, ir) : nc_fail(&g, NC_ERR_PARSE, "no IR");
	if (!st)
		st = nc_fuse(&g);
	if (!st)
		st = nc_plan(&g);
	if (!st)
		st = nc_emit(&g, &src);
	if (!st)
		st = nc_emit_plan(&g, &plan);
	if (!st && (src.oom || plan.oom || g.log.oom || g.A.oom))
		st = nc_fail(&g, NC_ERR_NOMEM, "out of memory");
	r->log = take(&g.log);
	if (!st) {
		r->source = take(&src);
		r->plan = take(&plan);
		r->error = nc_strdup_heap("");
	} else {
		r->error = nc_strdup_heap(g.err[0] ? g.err : nc_status_string(st));
	}
	sb_free(&src);
	sb_free(&plan);
	nc_arena_free(&g.A);
	if (!st && (!r->source || !r->plan || !r->error))
		st = NC_ERR_NOMEM;
	return st;
}

const char *nc_result_source(const nc_result_t *r) { return r && r->source ? r->source : ""; }
const char *nc_result_plan(const nc_result_t *r) { return r && r->plan ? r->plan : ""; }
const char *nc_result_log(const nc_result_t *r) { return r && r->log ? r->log : ""; }
const char *nc_result_error(const nc_result_t *r) { return r && r->error ? r->error : "out of memory"; }

void nc_result_free(nc_result_t *r)
{
	if (!r)
		return;
	free(r->source);
	free(r->plan);
	free(r->log);
	free(r->error);
	free(r);
}
