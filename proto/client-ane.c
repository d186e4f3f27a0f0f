#include "client-ane.h"

#include "common.pb-c.h"

Anedvd__AneReply *
anec_compile(struct ad_client *c, const Anedvd__CompileRequest *q, int timeout_ms, int *code, char *err)
{
	Anedvd__CompileRequest describe = ANEDVD__COMPILE_REQUEST__INIT;
	return ad_rpc_call(c, &ad_rpc_ane, q ? &q->base : &describe.base, timeout_ms, code, err);
}

Anedvd__AneReply *
anec_stats(struct ad_client *c, int timeout_ms, int *code, char *err)
{
	Anedvd__StatsRequest q = ANEDVD__STATS_REQUEST__INIT;
	return ad_rpc_call(c, &ad_rpc_ane, &q.base, timeout_ms, code, err);
}

Anedvd__AneReply *
anec_attach(struct ad_client *c, const char *object, int timeout_ms, int *code, char *err)
{
	Anedvd__AttachRequest q = ANEDVD__ATTACH_REQUEST__INIT;
	q.object = (char *)object;
	return ad_rpc_call(c, &ad_rpc_ane, &q.base, timeout_ms, code, err);
}

Anedvd__AneReply *
anec_call(struct ad_client *c, uint32_t kernel, const char *input, const char *output, uint32_t ncols, uint64_t seq,
          int timeout_ms, int *code, char *err)
{
	Anedvd__KernelCall q = ANEDVD__KERNEL_CALL__INIT;
	q.kernel = kernel;
	q.input = (char *)input;
	q.output = (char *)output;
	q.ncols = ncols;
	q.seq = seq;
	Anedvd__AneReply *r = ad_rpc_call(c, &ad_rpc_ane, &q.base, timeout_ms, code, err);
	if (r && r->call->seq != seq) {
		if (code)
			*code = ANEDVD__ERROR_CODE__ERROR_INTERNAL;
		ad_err(err, "%s: kernel %u: the reply answers call %llu, not %llu", ad_rpc_ane.name, kernel,
		       (unsigned long long)r->call->seq, (unsigned long long)seq);
		ad_rpc_free(r);
		return NULL;
	}
	return r;
}
