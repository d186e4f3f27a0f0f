// kb-local.c - the kernel set in this process: the ane-worker's very
// service (ane-service.h) on threads of its own, listening on an nng
// inproc:// address, reached through kb_remote and the shared-memory data
// plane exactly as the pipeline reaches the anedvd-ane-worker process. So
// kb_local and kb_remote run the same code on both sides and give the
// same bits; the only difference is where the service's threads live.
//
// The emu backend (or, in a macOS build, the ane one: kb_opts.backend);
// no disk cache (every kernel compiled here); the service logs its start
// at debug level. Freeing the backend detaches it, then stops the service.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ane-service.h"
#include "kernels.h"

struct local {
	struct kernel_backend *kb; // kb_remote's
	void (*remote_free)(struct kernel_backend *kb);
	int (*remote_surface_new)(struct kernel_backend *kb, const char *name, int channels, unsigned flags,
	                          struct ad_surface *s, char *err);
	atomic_uint nsurf;
	struct ane_service *sv;
	struct local *next;
};

// the live backends, so that free finds its service (kb_remote owns priv)
static pthread_mutex_t locals_mu = PTHREAD_MUTEX_INITIALIZER;
static struct local *locals;
static atomic_int local_seq;

// the entry of kb (unlinked from the list with take)
static struct local *
find(struct kernel_backend *kb, int take)
{
	pthread_mutex_lock(&locals_mu);
	struct local **pp = &locals, *l = NULL;
	while (*pp && (*pp)->kb != kb)
		pp = &(*pp)->next;
	if (*pp) {
		l = *pp;
		if (take)
			*pp = l->next;
	}
	pthread_mutex_unlock(&locals_mu);
	return l;
}

// a surface's name is a label here, not an id: kb_remote's shared objects
// need unique names, so each gets a number
static int
l_surface_new(struct kernel_backend *kb, const char *name, int channels, unsigned flags, struct ad_surface *s,
              char *err)
{
	struct local *l = find(kb, 0);
	if (!l)
		return ad_err(err, "%s: not a local backend", kb->name);
	char uname[40];
	snprintf(uname, sizeof uname, "%.24s.%u", name ? name : "s", atomic_fetch_add(&l->nsurf, 1));
	return l->remote_surface_new(kb, uname, channels, flags, s, err);
}

static void
l_free(struct kernel_backend *kb)
{
	if (!kb)
		return;
	struct local *l = find(kb, 1);
	if (!l)
		return;
	l->remote_free(kb);
	ane_service_stop(l->sv);
	free(l);
}

struct kernel_backend *
kb_local_new(const struct model *m, const struct kb_opts *o, char *err)
{
	const struct kb_opts none = {0};
	if (!o)
		o = &none;
	const char *be = o->backend ? o->backend : "emu";
	struct local *l = calloc(1, sizeof *l);
	if (!l)
		return ad_err(err, "out of memory"), NULL;
	char url[96];
	snprintf(url, sizeof url, "inproc://anedvd-kb-local-%d", atomic_fetch_add(&local_seq, 1));
	struct ane_service_opts so = {.url = url,
	                              .backend = be,
	                              .chunk = o->width,
	                              .split = o->split,
	                              .threads = o->threads,
	                              .weights = ane_wfmt_name((enum ane_wfmt)o->weights),
	                              .quiet = 1};
	if (!(l->sv = ane_service_start(m, &so, err))) {
		free(l);
		return ad_err_prefix(err, "%s backend", be), NULL;
	}
	struct kb_opts ro = *o;
	ro.url = url;
	ro.quiet = 1;
	if (!(l->kb = kb_remote_new(m, &ro, err))) {
		ane_service_stop(l->sv);
		free(l);
		return ad_err_prefix(err, "%s backend", be), NULL;
	}
	l->remote_free = l->kb->free;
	l->remote_surface_new = l->kb->surface_new;
	l->kb->free = l_free;
	l->kb->surface_new = l_surface_new;
	l->kb->name = strcmp(be, "ane") ? "emu" : "ane";
	pthread_mutex_lock(&locals_mu);
	l->next = locals;
	locals = l;
	pthread_mutex_unlock(&locals_mu);
	return l->kb;
}
