// ane-shim.m - the ANE through AppleNeuralEngine.framework (private API).
//
// The call sequence, selectors and their C prototypes are the ones known to
// work on macOS with an unsigned binary and no entitlement (see ane-shim.h).
// Every selector is sent through objc_msgSend cast to its exact prototype,
// because none of these classes has a public header. Points no source has
// verified are marked UNVERIFIED, each with the fallback taken at run time.
//
// Build: clang -fobjc-arc, linked with Foundation, IOSurface, CommonCrypto
// (libSystem). On Linux the file is only syntax-checked, against the
// declarations in shim/stand-in/.
#import <Foundation/Foundation.h>
#import <IOSurface/IOSurface.h>
#include <CommonCrypto/CommonDigest.h>
#include <dispatch/dispatch.h>
#include <dlfcn.h>
#include <objc/message.h>
#include <objc/runtime.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ane-shim.h"

_Static_assert(ANE_SHIM_QOS == QOS_CLASS_DEFAULT, "QoS 21 is QOS_CLASS_DEFAULT");

// --- the framework ---------------------------------------------------------------

static struct {
	pthread_once_t once;
	void *handle;
	Class desc, model, request, surface;
	char why[ANE_SHIM_ERRLEN];
	char line[ANE_SHIM_ERRLEN];
} fw = {.once = PTHREAD_ONCE_INIT};

static void
fw_load(void)
{
	fw.handle = dlopen(ANE_SHIM_FRAMEWORK, RTLD_NOW);
	if (!fw.handle) {
		const char *e = dlerror();
		snprintf(fw.why, sizeof fw.why, "dlopen %s: %s", ANE_SHIM_FRAMEWORK, e ? e : "failed");
		snprintf(fw.line, sizeof fw.line, "AppleNeuralEngine: not loaded (%s)", fw.why);
		return;
	}
	fw.desc = NSClassFromString(@"_ANEInMemoryModelDescriptor");
	fw.model = NSClassFromString(@"_ANEInMemoryModel");
	fw.request = NSClassFromString(@"_ANERequest");
	fw.surface = NSClassFromString(@"_ANEIOSurfaceObject");
	const char *missing = !fw.desc      ? "_ANEInMemoryModelDescriptor"
	                      : !fw.model   ? "_ANEInMemoryModel"
	                      : !fw.request ? "_ANERequest"
	                      : !fw.surface ? "_ANEIOSurfaceObject"
	                                    : NULL;
	if (missing) {
		snprintf(fw.why, sizeof fw.why, "AppleNeuralEngine.framework loaded but class %s is missing", missing);
		snprintf(fw.line, sizeof fw.line, "AppleNeuralEngine: loaded, class %s missing", missing);
		return;
	}
	snprintf(fw.line, sizeof fw.line,
	         "AppleNeuralEngine: loaded; _ANEInMemoryModelDescriptor, _ANEInMemoryModel, _ANERequest, "
	         "_ANEIOSurfaceObject resolved");
}

int
ane_shim_init(char *err)
{
	pthread_once(&fw.once, fw_load);
	if (fw.why[0]) {
		if (err)
			snprintf(err, ANE_SHIM_ERRLEN, "%s", fw.why);
		return -1;
	}
	return 0;
}

const char *
ane_shim_describe(void)
{
	pthread_once(&fw.once, fw_load);
	return fw.line;
}

// --- helpers -----------------------------------------------------------------------

static uint64_t
now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}


// an NSError as "domain code: description", decoded by ane_shim_error when
// it names a "status=0x.." (the driver's messages read "... Failed with
// status=0x1d : Program Inference error"). UNVERIFIED: whether every
// failure puts the status in the description rather than only in the
// daemon's log; an undecoded load failure is retried like a busy pool.
static int
ns_fail(char *err, const char *what, NSError *e)
{
	if (!e)
		return ane_shim_error(err, what, "returned NO without an error");
	NSString *s = [NSString stringWithFormat:@"%@ %ld: %@", e.domain, (long)e.code, e.localizedDescription];
	return ane_shim_error(err, what, s.UTF8String);
}

static NSUInteger
num(NSDictionary *d, NSString *key)
{
	id v = d[key];
	return [v isKindOfClass:[NSNumber class]] ? [(NSNumber *)v unsignedIntegerValue] : 0;
}

// the flat byte surface every known user creates: width = bytes, height 1,
// one byte per element, pixel format 0
static IOSurfaceRef
surface_create(size_t bytes)
{
	NSDictionary *props = @{
		(__bridge NSString *)kIOSurfaceWidth : @(bytes),
		(__bridge NSString *)kIOSurfaceHeight : @1,
		(__bridge NSString *)kIOSurfaceBytesPerElement : @1,
		(__bridge NSString *)kIOSurfaceBytesPerRow : @(bytes),
		(__bridge NSString *)kIOSurfaceAllocSize : @(bytes),
		(__bridge NSString *)kIOSurfacePixelFormat : @0,
	};
	IOSurfaceRef s = IOSurfaceCreate((__bridge CFDictionaryRef)props);
	if (!s)
		return NULL;
	// zero once, padding included; nothing writes the padding again
	IOSurfaceLock(s, 0, NULL);
	memset(IOSurfaceGetBaseAddress(s), 0, IOSurfaceGetAllocSize(s));
	IOSurfaceUnlock(s, 0, NULL);
	return s;
}

// --- kernels -----------------------------------------------------------------------

struct ane_shim_kernel {
	void *model;   // __bridge_retained id (_ANEInMemoryModel)
	void *request; // __bridge_retained id (_ANERequest)
	int nin, nout;
	struct ane_shim_tensor in[ANE_SHIM_MAX_IO], out[ANE_SHIM_MAX_IO];
	size_t in_cap, out_cap;
	IOSurfaceRef in_s[ANE_SHIM_MAX_IO], out_s[ANE_SHIM_MAX_IO]; // kernel-owned
	IOSurfaceRef in_b[ANE_SHIM_MAX_IO], out_b[ANE_SHIM_MAX_IO]; // bound by the caller, or NULL
	enum ane_shim_io io;
	int loaded; // unload on free
	uint64_t compile_us, load_us;
	int attempts;
};

typedef id (*msg_desc_fn)(Class, SEL, id, id, id);
typedef id (*msg_cls1_fn)(Class, SEL, id);
typedef id (*msg_cls_surf_fn)(Class, SEL, IOSurfaceRef);
typedef id (*msg_id_fn)(id, SEL);
typedef BOOL (*msg_qos_fn)(id, SEL, unsigned int, id, NSError *__autoreleasing *);
typedef BOOL (*msg_eval_fn)(id, SEL, unsigned int, id, id, NSError *__autoreleasing *);
typedef BOOL (*msg_unload_fn)(id, SEL, unsigned int, NSError *__autoreleasing *);
typedef id (*msg_request_fn)(Class, SEL, id, id, id, id, id, id, id);

// the tensors of one LiveInputList / LiveOutputList
static int
read_list(NSArray *list, struct ane_shim_tensor *t, int *n, const char *what, char *err)
{
	if (![list isKindOfClass:[NSArray class]] || list.count == 0)
		return ane_shim_fail(err, "model attributes: no %s tensors", what);
	if (list.count > ANE_SHIM_MAX_IO)
		return ane_shim_fail(err, "model attributes: %lu %s tensors (at most %d)", (unsigned long)list.count,
		                     what, ANE_SHIM_MAX_IO);
	*n = 0;
	for (NSDictionary *e in list) {
		if (![e isKindOfClass:[NSDictionary class]])
			return ane_shim_fail(err, "model attributes: %s entry %d is not a dictionary", what, *n);
		id name = e[@"Name"], type = e[@"Type"];
		NSString *ns = [name isKindOfClass:[NSString class]] ? name : @"?";
		NSString *ts = [type isKindOfClass:[NSString class]] ? type : [type description];
		char e2[ANE_SHIM_ERRLEN];
		if (ane_shim_tensor_set(&t[*n], ns.UTF8String, ts.UTF8String, num(e, @"Batches"), num(e, @"Channels"),
		                        num(e, @"Height"), num(e, @"Width"), num(e, @"RowStride"),
		                        num(e, @"PlaneStride"), num(e, @"DepthStride"), num(e, @"BatchStride"), e2))
			return ane_shim_fail(err, "model attributes: %s %d: %s", what, *n, e2);
		(*n)++;
	}
	return 0;
}

// SHA-256 of a byte range of any length (CC_LONG is 32 bits: fold the rest)
static void
digest(const void *p, size_t n, unsigned char md[CC_SHA256_DIGEST_LENGTH])
{
	const size_t step = 0x40000000u;
	CC_SHA256(p, (CC_LONG)(n < step ? n : step), md);
	for (size_t off = step; off < n; off += step) {
		unsigned char m2[2 * CC_SHA256_DIGEST_LENGTH];
		memcpy(m2, md, CC_SHA256_DIGEST_LENGTH);
		size_t k = n - off < step ? n - off : step;
		CC_SHA256((const char *)p + off, (CC_LONG)k, m2 + CC_SHA256_DIGEST_LENGTH);
		CC_SHA256(m2, (CC_LONG)sizeof m2, md);
	}
}

// the weight dictionary: {"@model_path/weights/<name>": {offset: 0, data:
// SHA-256 of the file}}. The compiler reads the files, not this data; the
// dictionary feeds the model's identity, and equal MIL text with equal
// dictionary data could reuse another weight set's compiled program.
// UNVERIFIED: exactly which inputs the identity hashes; a digest covers any.
static int
weight_dict(const struct ane_shim_file *files, int nfiles, NSMutableDictionary *wdict, char *err)
{
	for (int i = 0; i < nfiles; i++) {
		char key[1024];
		if (ane_shim_weight_key(key, sizeof key, files[i].name, err))
			return -1;
		NSData *bytes;
		if (files[i].data) {
			bytes = [NSData dataWithBytesNoCopy:(void *)files[i].data length:files[i].len freeWhenDone:NO];
		} else {
			if (!files[i].path)
				return ane_shim_fail(err, "weight file %s: neither a path nor data", files[i].name);
			NSError *e = nil;
			bytes = [NSData dataWithContentsOfFile:@(files[i].path)
						       options:NSDataReadingMappedIfSafe
							 error:&e];
			if (!bytes)
				return ns_fail(err, files[i].path, e);
		}
		unsigned char md[CC_SHA256_DIGEST_LENGTH];
		digest(bytes.bytes, bytes.length, md);
		wdict[@(key)] = @{@"offset" : @0, @"data" : [NSData dataWithBytes:md length:sizeof md]};
	}
	return 0;
}

// dir/model.mil and dir/weights/<name>, as the compiler reads them
static int
stage_files(NSString *dir, NSData *milData, const struct ane_shim_file *files, int nfiles, char *err)
{
	NSFileManager *fm = [NSFileManager defaultManager];
	NSString *wdir = [dir stringByAppendingPathComponent:@"weights"];
	NSError *e = nil;
	[fm removeItemAtPath:dir error:nil]; // a leftover of a killed process
	if (![fm createDirectoryAtPath:wdir withIntermediateDirectories:YES attributes:nil error:&e])
		return ns_fail(err, "temp dir", e);
	if (![milData writeToFile:[dir stringByAppendingPathComponent:@"model.mil"]
			  options:NSDataWritingAtomic
			    error:&e])
		return ns_fail(err, "model.mil", e);
	for (int i = 0; i < nfiles; i++) {
		NSString *dst = [wdir stringByAppendingPathComponent:@(files[i].name)];
		if (files[i].data) {
			NSData *d = [NSData dataWithBytesNoCopy:(void *)files[i].data
							 length:files[i].len
						   freeWhenDone:NO];
			if (![d writeToFile:dst options:NSDataWritingAtomic error:&e])
				return ns_fail(err, files[i].name, e);
		} else if (link(files[i].path, dst.fileSystemRepresentation) != 0 &&
		           ![fm copyItemAtPath:@(files[i].path) toPath:dst error:&e]) {
			// a hard link costs nothing on the same volume; else a copy
			return ns_fail(err, files[i].path, e);
		}
	}
	return 0;
}

static void
remove_dir(NSString *dir)
{
	const char *keep = getenv("ANEDVD_KEEP_ANE_FILES");
	if (keep && strcmp(keep, "1") == 0)
		return;
	[[NSFileManager defaultManager] removeItemAtPath:dir error:nil];
}

static int
request_in_pool(struct ane_shim_kernel *k, char *err)
{
	NSMutableArray *ins = [NSMutableArray array], *outs = [NSMutableArray array];
	NSMutableArray *iidx = [NSMutableArray array], *oidx = [NSMutableArray array];
	// UNVERIFIED: with several inputs, whether LiveInputList order is the
	// binding order (one source binds alphabetically); our kernels have one
	for (int i = 0; i < k->nin; i++) {
		IOSurfaceRef s = k->in_b[i] ? k->in_b[i] : k->in_s[i];
		id o = ((msg_cls_surf_fn)objc_msgSend)(fw.surface, @selector(objectWithIOSurface:), s);
		if (!o)
			return ane_shim_fail(err, "objectWithIOSurface: nil for input %d", i);
		[ins addObject:o];
		[iidx addObject:@(i)];
	}
	for (int i = 0; i < k->nout; i++) {
		IOSurfaceRef s = k->out_b[i] ? k->out_b[i] : k->out_s[i];
		id o = ((msg_cls_surf_fn)objc_msgSend)(fw.surface, @selector(objectWithIOSurface:), s);
		if (!o)
			return ane_shim_fail(err, "objectWithIOSurface: nil for output %d", i);
		[outs addObject:o];
		[oidx addObject:@(i)];
	}
	id req = ((msg_request_fn)objc_msgSend)(
		fw.request,
		@selector(requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:),
		ins, iidx, outs, oidx, nil, nil, @0);
	if (!req)
		return ane_shim_fail(err, "_ANERequest: nil request");
	if (k->request)
		CFRelease(k->request);
	k->request = (__bridge_retained void *)req;
	return 0;
}

// (re)build the request over the current surfaces; callable from plain C
static int
make_request(struct ane_shim_kernel *k, char *err)
{
	int rc;
	@autoreleasepool {
		rc = request_in_pool(k, err);
	}
	return rc;
}

void
ane_shim_free(struct ane_shim_kernel *k)
{
	if (!k)
		return;
	@autoreleasepool {
		if (k->model && k->loaded) {
			id model = (__bridge id)k->model;
			if ([model respondsToSelector:@selector(unloadWithQoS:error:)]) {
				NSError *e = nil;
				((msg_unload_fn)objc_msgSend)(model, @selector(unloadWithQoS:error:), ANE_SHIM_QOS, &e);
			}
		}
		if (k->request)
			CFRelease(k->request);
		if (k->model)
			CFRelease(k->model);
		for (int i = 0; i < ANE_SHIM_MAX_IO; i++) {
			if (k->in_s[i])
				CFRelease(k->in_s[i]);
			if (k->out_s[i])
				CFRelease(k->out_s[i]);
			if (k->in_b[i])
				CFRelease(k->in_b[i]);
			if (k->out_b[i])
				CFRelease(k->out_b[i]);
		}
	}
	free(k);
}

// the whole sequence, inside the caller's autorelease pool; k is freed by the caller on -1
static int
compile_kernel(struct ane_shim_kernel *k, const char *mil, const struct ane_shim_file *files, int nfiles, char *err)
{
	// MIL as NSData, never NSString; weights @{} rather than nil (both crash otherwise)
	NSData *milData = [NSData dataWithBytes:mil length:strlen(mil)];
	NSMutableDictionary *wdict = [NSMutableDictionary dictionary];
	if (weight_dict(files, nfiles, wdict, err))
		return -1;
	id desc = ((msg_desc_fn)objc_msgSend)(fw.desc, @selector(modelWithMILText:weights:optionsPlist:), milData,
	                                      wdict, nil);
	if (!desc) {
		ane_shim_fail(err, "_ANEInMemoryModelDescriptor: nil descriptor (MIL text not accepted)");
		return -1;
	}
	id model = ((msg_cls1_fn)objc_msgSend)(fw.model, @selector(inMemoryModelWithDescriptor:), desc);
	if (!model) {
		ane_shim_fail(err, "_ANEInMemoryModel: nil model");
		return -1;
	}
	k->model = (__bridge_retained void *)model;
	NSString *hex = ((msg_id_fn)objc_msgSend)(model, @selector(hexStringIdentifier));
	if (![hex isKindOfClass:[NSString class]] || hex.length == 0) {
		ane_shim_fail(err, "_ANEInMemoryModel: no hexStringIdentifier");
		return -1;
	}
	// the compiler reads NSTemporaryDirectory()/<hex>/{model.mil, weights/*}
	NSString *dir = [NSTemporaryDirectory() stringByAppendingPathComponent:hex];
	if (stage_files(dir, milData, files, nfiles, err)) {
		remove_dir(dir);
		return -1;
	}

	// compile: not retried (after failures the compiler wants pacing)
	NSError *e = nil;
	uint64_t t0 = now_us();
	BOOL ok = ((msg_qos_fn)objc_msgSend)(model, @selector(compileWithQoS:options:error:), ANE_SHIM_QOS, @{}, &e);
	k->compile_us = now_us() - t0;
	if (!ok) {
		remove_dir(dir);
		ns_fail(err, "compile", e);
		return -1;
	}

	// load: the program pool is machine-wide and answers 0x5 while busy
	t0 = now_us();
	char last[ANE_SHIM_ERRLEN] = "";
	for (int a = 1; a <= ANE_SHIM_LOAD_ATTEMPTS; a++) {
		int ms = ane_shim_retry_delay_ms(a);
		if (ms > 0)
			usleep((useconds_t)ms * 1000);
		k->attempts = a;
		e = nil;
		ok = ((msg_qos_fn)objc_msgSend)(model, @selector(loadWithQoS:options:error:), ANE_SHIM_QOS, @{}, &e);
		if (ok)
			break;
		ns_fail(last, "load", e);
		uint64_t st;
		int known = e && ane_shim_status_find(last, &st) == 0;
		if (!ane_shim_status_transient(known ? st : 0, known))
			break;
	}
	k->load_us = now_us() - t0;
	k->loaded = ok;
	remove_dir(dir); // the program lives in the daemon now
	if (!ok) {
		ane_shim_fail(err, "%s (after %d attempt%s)", last, k->attempts, k->attempts == 1 ? "" : "s");
		return -1;
	}

	NSDictionary *attrs = ((msg_id_fn)objc_msgSend)(model, @selector(modelAttributes));
	NSArray *nsl = [attrs isKindOfClass:[NSDictionary class]] ? attrs[@"NetworkStatusList"] : nil;
	NSDictionary *net = [nsl isKindOfClass:[NSArray class]] && nsl.count > 0 ? nsl[0] : nil;
	if (![net isKindOfClass:[NSDictionary class]]) {
		ane_shim_fail(err, "model attributes: no NetworkStatusList");
		return -1;
	}
	if (read_list(net[@"LiveInputList"], k->in, &k->nin, "input", err) ||
	    read_list(net[@"LiveOutputList"], k->out, &k->nout, "output", err))
		return -1;
	// one capacity per direction: uneven sizes within a request fail (0x1d)
	size_t mi = 0, mo = 0;
	for (int i = 0; i < k->nin; i++)
		mi = k->in[i].nbytes > mi ? k->in[i].nbytes : mi;
	for (int i = 0; i < k->nout; i++)
		mo = k->out[i].nbytes > mo ? k->out[i].nbytes : mo;
	k->in_cap = ane_shim_surface_bytes(mi);
	k->out_cap = ane_shim_surface_bytes(mo);
	for (int i = 0; i < k->nin; i++)
		if (!(k->in_s[i] = surface_create(k->in_cap))) {
			ane_shim_fail(err, "IOSurfaceCreate: %zu bytes for input %d", k->in_cap, i);
			return -1;
		}
	for (int i = 0; i < k->nout; i++)
		if (!(k->out_s[i] = surface_create(k->out_cap))) {
			ane_shim_fail(err, "IOSurfaceCreate: %zu bytes for output %d", k->out_cap, i);
			return -1;
		}
	if (make_request(k, err))
		return -1;
	k->io = ANE_SHIM_IO_COPY;
	return 0;
}

struct ane_shim_kernel *
ane_shim_compile(const char *mil, const struct ane_shim_file *files, int nfiles, char *err)
{
	if (ane_shim_init(err))
		return NULL;
	if (!mil || nfiles < 0 || (nfiles > 0 && !files)) {
		ane_shim_fail(err, "compile: no MIL text or bad file list");
		return NULL;
	}
	struct ane_shim_kernel *k = calloc(1, sizeof *k);
	if (!k) {
		ane_shim_fail(err, "compile: out of memory");
		return NULL;
	}
	int rc;
	@autoreleasepool {
		rc = compile_kernel(k, mil, files, nfiles, err);
	}
	if (rc) {
		ane_shim_free(k);
		return NULL;
	}
	return k;
}

int
ane_shim_ninputs(const struct ane_shim_kernel *k)
{
	return k->nin;
}

int
ane_shim_noutputs(const struct ane_shim_kernel *k)
{
	return k->nout;
}

const struct ane_shim_tensor *
ane_shim_input(const struct ane_shim_kernel *k, int i)
{
	return i >= 0 && i < k->nin ? &k->in[i] : NULL;
}

const struct ane_shim_tensor *
ane_shim_output(const struct ane_shim_kernel *k, int i)
{
	return i >= 0 && i < k->nout ? &k->out[i] : NULL;
}

size_t
ane_shim_input_capacity(const struct ane_shim_kernel *k)
{
	return k->in_cap;
}

size_t
ane_shim_output_capacity(const struct ane_shim_kernel *k)
{
	return k->out_cap;
}

uint64_t
ane_shim_compile_us(const struct ane_shim_kernel *k)
{
	return k->compile_us;
}

uint64_t
ane_shim_load_us(const struct ane_shim_kernel *k)
{
	return k->load_us;
}

int
ane_shim_load_attempts(const struct ane_shim_kernel *k)
{
	return k->attempts;
}

enum ane_shim_io
ane_shim_io_path(const struct ane_shim_kernel *k)
{
	return k->io;
}

int
ane_shim_write_input(struct ane_shim_kernel *k, int i, const void *src, const struct ane_shim_tensor *s, size_t ncols,
                     char *err)
{
	if (i < 0 || i >= k->nin)
		return ane_shim_fail(err, "input %d of %d", i, k->nin);
	IOSurfaceRef surf = k->in_b[i] ? k->in_b[i] : k->in_s[i];
	if (IOSurfaceLock(surf, 0, NULL) != 0)
		return ane_shim_fail(err, "IOSurfaceLock: input %d", i);
	int rc = ane_shim_restride(IOSurfaceGetBaseAddress(surf), &k->in[i], src, s ? s : &k->in[i], ncols, err);
	IOSurfaceUnlock(surf, 0, NULL);
	return rc;
}

int
ane_shim_read_output(struct ane_shim_kernel *k, int i, void *dst, const struct ane_shim_tensor *d, size_t ncols,
                     char *err)
{
	if (i < 0 || i >= k->nout)
		return ane_shim_fail(err, "output %d of %d", i, k->nout);
	IOSurfaceRef surf = k->out_b[i] ? k->out_b[i] : k->out_s[i];
	if (IOSurfaceLock(surf, kIOSurfaceLockReadOnly, NULL) != 0)
		return ane_shim_fail(err, "IOSurfaceLock: output %d", i);
	int rc = ane_shim_restride(dst, d ? d : &k->out[i], IOSurfaceGetBaseAddress(surf), &k->out[i], ncols, err);
	IOSurfaceUnlock(surf, kIOSurfaceLockReadOnly, NULL);
	return rc;
}

int
ane_shim_eval(struct ane_shim_kernel *k, char *err)
{
	int rc = 0;
	@autoreleasepool {
		NSError *e = nil;
		BOOL ok = ((msg_eval_fn)objc_msgSend)((__bridge id)k->model,
		                                      @selector(evaluateWithQoS:options:request:error:), ANE_SHIM_QOS,
		                                      @{}, (__bridge id)k->request, &e);
		if (!ok)
			rc = ns_fail(err, "evaluate", e);
	}
	return rc;
}

int
ane_shim_bind(struct ane_shim_kernel *k, int output, int i, void *iosurface, char *err)
{
	if (i < 0 || i >= (output ? k->nout : k->nin) || !iosurface)
		return ane_shim_fail(err, "bind: no %s %d", output ? "output" : "input", i);
	IOSurfaceRef s = (IOSurfaceRef)iosurface;
	size_t need = output ? k->out_cap : k->in_cap;
	if (IOSurfaceGetAllocSize(s) < need)
		return ane_shim_fail(err, "bind: surface of %zu bytes, the kernel's are %zu", IOSurfaceGetAllocSize(s),
		                     need);
	// UNVERIFIED: whether the ANE accepts a surface another process created
	// (received by mach port or XPC object) in an _ANERequest, and how its
	// locks interact with evaluation. One eval decides; on failure the
	// kernel goes back to its own surfaces and the copy path.
	IOSurfaceRef *slot = output ? &k->out_b[i] : &k->in_b[i];
	IOSurfaceRef old = *slot;
	*slot = (IOSurfaceRef)CFRetain(s);
	char e2[ANE_SHIM_ERRLEN];
	if (make_request(k, e2) == 0 && ane_shim_eval(k, e2) == 0) {
		if (old)
			CFRelease(old);
		k->io = ANE_SHIM_IO_SHARED;
		return 0;
	}
	CFRelease(*slot);
	*slot = old;
	char e3[ANE_SHIM_ERRLEN];
	if (make_request(k, e3))
		return ane_shim_fail(err, "bind: %s; and the request on the previous surfaces failed: %s", e2, e3);
	return ane_shim_fail(err, "bind: the device refused the surface (%s); the kernel keeps its previous surfaces",
	                     e2);
}

int
ane_shim_unbind(struct ane_shim_kernel *k, int output, int i, char *err)
{
	if (i < 0 || i >= (output ? k->nout : k->nin))
		return ane_shim_fail(err, "unbind: no %s %d", output ? "output" : "input", i);
	IOSurfaceRef *slot = output ? &k->out_b[i] : &k->in_b[i];
	if (!*slot)
		return 0;
	CFRelease(*slot);
	*slot = NULL;
	int any = 0;
	for (int j = 0; j < ANE_SHIM_MAX_IO; j++)
		any |= k->in_b[j] != NULL || k->out_b[j] != NULL;
	k->io = any ? ANE_SHIM_IO_SHARED : ANE_SHIM_IO_COPY;
	return make_request(k, err);
}
