// safetensors.c - .safetensors reader over mmap, HF shard sets, writer.
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wtype.h"

static const struct {
	const char *name;
	int size;
	uint32_t type;
} dtypes[] = {
	{"F32", 4, AD_TYPE_F32},    {"F16", 2, AD_TYPE_F16},       {"BF16", 2, AD_TYPE_BF16},
	{"F64", 8, AD_TYPE_COUNT},  {"I64", 8, AD_TYPE_COUNT},     {"U64", 8, AD_TYPE_COUNT},
	{"I32", 4, AD_TYPE_COUNT},  {"U32", 4, AD_TYPE_COUNT},     {"I16", 2, AD_TYPE_COUNT},
	{"U16", 2, AD_TYPE_COUNT},  {"I8", 1, AD_TYPE_COUNT},      {"U8", 1, AD_TYPE_COUNT},
	{"BOOL", 1, AD_TYPE_COUNT}, {"F8_E4M3", 1, AD_TYPE_COUNT}, {"F8_E5M2", 1, AD_TYPE_COUNT},
};

static int
dtype_find(const char *name)
{
	for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
		if (!strcmp(dtypes[i].name, name))
			return (int)i;
	return -1;
}

static const char *
dtype_of_type(uint32_t type)
{
	for (size_t i = 0; i < 3; i++)
		if (dtypes[i].type == type)
			return dtypes[i].name;
	return NULL;
}

// a JSON number that is an exact non-negative integer below 2^53
static int
json_u53(const cJSON *j, uint64_t *out)
{
	if (!cJSON_IsNumber(j))
		return -1;
	double v = j->valuedouble;
	if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(uint64_t)v)
		return -1;
	*out = (uint64_t)v;
	return 0;
}

static int
cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

static int
cmp_offset(const void *a, const void *b)
{
	const struct st_tensor *x = *(const struct st_tensor *const *)a;
	const struct st_tensor *y = *(const struct st_tensor *const *)b;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

static void
free_tensors(struct st_file *f)
{
	for (int64_t i = 0; i < f->n_tensors; i++)
		free(f->tensors[i].name);
	free(f->tensors);
	f->tensors = NULL;
	f->n_tensors = 0;
}

// one header entry into t; data_start is the file offset of the data buffer
static int
parse_entry(const cJSON *e, struct st_tensor *t, const uint8_t *base, size_t data_start, size_t data_size, char *err)
{
	if (!cJSON_IsObject(e))
		return ad_err(err, "entry is not an object");
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
	const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
	if (!cJSON_IsString(dt))
		return ad_err(err, "\"dtype\" missing or not a string");
	int k = dtype_find(dt->valuestring);
	if (k < 0)
		return ad_err(err, "unknown dtype \"%.32s\"", dt->valuestring);
	snprintf(t->dtype, sizeof t->dtype, "%s", dtypes[k].name);
	t->type = dtypes[k].type;

	if (!cJSON_IsArray(sh))
		return ad_err(err, "\"shape\" missing or not an array");
	int nd = cJSON_GetArraySize(sh);
	if (nd > ST_MAX_DIMS)
		return ad_err(err, "%d dimensions (at most %d)", nd, ST_MAX_DIMS);
	t->n_dims = (uint32_t)nd;
	uint64_t nelem = 1;
	int d = 0;
	const cJSON *x;
	cJSON_ArrayForEach(x, sh)
	{
		uint64_t v;
		if (json_u53(x, &v))
			return ad_err(err, "shape[%d] is not a non-negative integer", d);
		if (v && nelem > (uint64_t)INT64_MAX / 8 / v)
			return ad_err(err, "shape overflows");
		nelem *= v;
		t->shape[d++] = (int64_t)v;
	}
	t->nelem = (int64_t)nelem;

	uint64_t b, end;
	if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || json_u53(cJSON_GetArrayItem(off, 0), &b) ||
	    json_u53(cJSON_GetArrayItem(off, 1), &end))
		return ad_err(err, "\"data_offsets\" is not [begin, end]");
	if (b > end)
		return ad_err(err, "data_offsets [%llu, %llu] run backwards", (unsigned long long)b,
		              (unsigned long long)end);
	if (end > data_size)
		return ad_err(err, "data_offsets end %llu is past the data (%zu bytes): file truncated?",
		              (unsigned long long)end, data_size);
	if (end - b != nelem * (uint64_t)dtypes[k].size)
		return ad_err(err, "data_offsets span %llu bytes but %s%s needs %llu", (unsigned long long)(end - b),
		              t->dtype, nd ? " of that shape" : "",
		              (unsigned long long)(nelem * (uint64_t)dtypes[k].size));
	t->offset = data_start + (size_t)b;
	t->nbytes = (size_t)(end - b);
	t->data = base + t->offset;
	return 0;
}

int
st_parse(struct st_file *f, const void *buf, size_t size, const char *label, char *err)
{
	memset(f, 0, sizeof *f);
	const uint8_t *p = buf;
	if (!label)
		label = "safetensors";
	if (size < 8)
		return ad_err(err, "%s: %zu bytes, too short for a safetensors header", label, size);
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | p[i];
	if (hlen < 2 || hlen > ST_MAX_HEADER)
		return ad_err(err, "%s: header length %llu out of range (2..%u)", label, (unsigned long long)hlen,
		              ST_MAX_HEADER);
	if (hlen > size - 8)
		return ad_err(err, "%s: header length %llu runs past the end of the file (%zu bytes)", label,
		              (unsigned long long)hlen, size);
	if (p[8] != '{')
		return ad_err(err, "%s: header does not start with '{'", label);

	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts((const char *)p + 8, (size_t)hlen, &end, 0);
	if (!root || !cJSON_IsObject(root)) {
		long at = end ? (long)(end - (const char *)p - 8) : -1;
		cJSON_Delete(root);
		if (at >= 0)
			return ad_err(err, "%s: header is not valid JSON (near byte %ld of %llu)", label, at,
			              (unsigned long long)hlen);
		return ad_err(err, "%s: header is not a valid JSON object", label);
	}
	// only padding may follow the object
	for (const char *q = end; q < (const char *)p + 8 + hlen; q++)
		if (*q != ' ' && *q != '\n' && *q != '\r' && *q != '\t' && *q != 0) {
			cJSON_Delete(root);
			return ad_err(err, "%s: junk after the header's JSON object", label);
		}

	size_t data_start = 8 + (size_t)hlen, data_size = size - data_start;
	int n = cJSON_GetArraySize(root);
	f->tensors = calloc(n ? (size_t)n : 1, sizeof *f->tensors);
	struct st_tensor **by_off = calloc(n ? (size_t)n : 1, sizeof *by_off);
	if (!f->tensors || !by_off) {
		free(by_off);
		cJSON_Delete(root);
		free_tensors(f);
		return ad_err(err, "%s: out of memory", label);
	}
	char sub[AD_ERRLEN];
	const cJSON *e;
	cJSON_ArrayForEach(e, root)
	{
		if (!strcmp(e->string, "__metadata__"))
			continue;
		struct st_tensor *t = &f->tensors[f->n_tensors];
		if (parse_entry(e, t, p, data_start, data_size, sub)) {
			ad_err(err, "%s: tensor \"%.200s\": %s", label, e->string, sub);
			goto fail;
		}
		t->name = strdup(e->string);
		if (!t->name) {
			ad_err(err, "%s: out of memory", label);
			goto fail;
		}
		by_off[f->n_tensors++] = t;
	}

	// the tensors must tile the data buffer: sorted by offset, each begins
	// where the previous ended, and the last ends at the end of the file
	qsort(by_off, (size_t)f->n_tensors, sizeof *by_off, cmp_offset);
	size_t at = data_start;
	for (int64_t i = 0; i < f->n_tensors; i++) {
		struct st_tensor *t = by_off[i];
		if (t->offset < at) {
			ad_err(err, "%s: tensor \"%.200s\" at data offset %zu overlaps \"%.200s\"", label, t->name,
			       t->offset - data_start, by_off[i - 1]->name);
			goto fail;
		}
		if (t->offset > at) {
			ad_err(err, "%s: %zu unused bytes before tensor \"%.200s\" (data offset %zu)", label,
			       t->offset - at, t->name, t->offset - data_start);
			goto fail;
		}
		at = t->offset + t->nbytes;
	}
	if (at != size) {
		ad_err(err, "%s: %zu bytes after the last tensor are not described by the header", label, size - at);
		goto fail;
	}

	qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_name);
	for (int64_t i = 1; i < f->n_tensors; i++)
		if (!strcmp(f->tensors[i].name, f->tensors[i - 1].name)) {
			ad_err(err, "%s: tensor \"%.200s\" appears twice", label, f->tensors[i].name);
			goto fail;
		}
	free(by_off);
	cJSON_Delete(root);
	f->base = p;
	f->size = size;
	return 0;
fail:
	free(by_off);
	cJSON_Delete(root);
	free_tensors(f);
	return -1;
}

int
st_open(struct st_file *f, const char *path, char *err)
{
	memset(f, 0, sizeof *f);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ad_err(err, "%s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return ad_err(err, "%s: not a regular file", path);
	}
	size_t size = (size_t)st.st_size;
	if (size < 8) {
		close(fd);
		return ad_err(err, "%s: %zu bytes, too short for a safetensors header", path, size);
	}
	void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return ad_err(err, "%s: mmap: %s", path, strerror(errno));
	if (st_parse(f, map, size, path, err)) {
		munmap(map, size);
		return -1;
	}
	f->mapped = 1;
	f->path = strdup(path);
	if (!f->path) {
		st_close(f);
		return ad_err(err, "%s: out of memory", path);
	}
	return 0;
}

void
st_close(struct st_file *f)
{
	if (!f)
		return;
	free_tensors(f);
	if (f->mapped && f->base)
		munmap((void *)f->base, f->size);
	free(f->path);
	memset(f, 0, sizeof *f);
}

const struct st_tensor *
st_find(const struct st_file *f, const char *name)
{
	struct st_tensor key = {.name = (char *)name};
	if (!f->n_tensors)
		return NULL;
	return bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof key, cmp_name);
}

int
st_tensor_check(const struct st_tensor *t, char *err)
{
	if (t->type == AD_TYPE_COUNT)
		return ad_err(err, "tensor \"%.200s\": dtype %s is not supported (F32, F16, BF16 are)", t->name,
		              t->dtype);
	return 0;
}

// --- shard sets ----------------------------------------------------------------

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n >= m && !strcmp(s + n - m, suf);
}

static void
free_names(char **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

// the shard names listed by the index (each once, sorted), checked to be plain
// file names; *json keeps the parsed index for the membership check
static int
index_files(const char *path, cJSON **json, char ***out, int *n_out, char *err)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return ad_err(err, "%s: %s", path, strerror(errno));
	char *buf = NULL;
	long len = -1;
	if (!fseek(fp, 0, SEEK_END))
		len = ftell(fp);
	if (len < 0 || len > (long)ST_MAX_HEADER || fseek(fp, 0, SEEK_SET)) {
		fclose(fp);
		return ad_err(err, "%s: unreadable or larger than %u bytes", path, ST_MAX_HEADER);
	}
	buf = malloc((size_t)len + 1);
	if (!buf || fread(buf, 1, (size_t)len, fp) != (size_t)len) {
		free(buf);
		fclose(fp);
		return ad_err(err, "%s: read failed", path);
	}
	fclose(fp);
	cJSON *root = cJSON_ParseWithLength(buf, (size_t)len);
	free(buf);
	const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
	if (!cJSON_IsObject(wm)) {
		cJSON_Delete(root);
		return ad_err(err, "%s: not JSON with a \"weight_map\" object", path);
	}
	int cap = cJSON_GetArraySize(wm), n = 0;
	char **names = calloc(cap ? (size_t)cap : 1, sizeof *names);
	if (!names) {
		cJSON_Delete(root);
		return ad_err(err, "%s: out of memory", path);
	}
	const cJSON *e;
	cJSON_ArrayForEach(e, wm)
	{
		const char *fn = cJSON_IsString(e) ? e->valuestring : NULL;
		if (!fn || !fn[0] || strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, "..")) {
			ad_err(err, "%s: weight_map[\"%.200s\"] is not a file name", path, e->string);
			free_names(names, n);
			cJSON_Delete(root);
			return -1;
		}
		int seen = 0;
		for (int i = 0; i < n && !seen; i++)
			seen = !strcmp(names[i], fn);
		if (!seen && !(names[n++] = strdup(fn))) {
			free_names(names, n);
			cJSON_Delete(root);
			return ad_err(err, "%s: out of memory", path);
		}
	}
	if (n == 0) {
		free(names);
		cJSON_Delete(root);
		return ad_err(err, "%s: weight_map is empty", path);
	}
	qsort(names, (size_t)n, sizeof *names, cmp_str);
	*json = root;
	*out = names;
	*n_out = n;
	return 0;
}

static int
dir_files(const char *dir, char ***out, int *n_out, char *err)
{
	DIR *d = opendir(dir);
	if (!d)
		return ad_err(err, "%s: %s", dir, strerror(errno));
	char **names = NULL;
	int n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || !has_suffix(de->d_name, ".safetensors"))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 8;
			char **nn = realloc(names, (size_t)cap * sizeof *names);
			if (!nn)
				break;
			names = nn;
		}
		if (!(names[n] = strdup(de->d_name)))
			break;
		n++;
	}
	int oom = de != NULL;
	closedir(d);
	if (oom) {
		free_names(names, n);
		return ad_err(err, "%s: out of memory", dir);
	}
	if (n == 0) {
		free(names);
		return ad_err(err, "%s: no model.safetensors.index.json and no *.safetensors files", dir);
	}
	qsort(names, (size_t)n, sizeof *names, cmp_str);
	*out = names;
	*n_out = n;
	return 0;
}

int
st_set_open(struct st_set *s, const char *dir, char *err)
{
	memset(s, 0, sizeof *s);
	char path[PATH_MAX];
	char **names = NULL;
	int n = 0;
	cJSON *index = NULL;
	if (snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir) >= (int)sizeof path)
		return ad_err(err, "%s: path too long", dir);
	if (access(path, F_OK) == 0) {
		if (index_files(path, &index, &names, &n, err))
			return -1;
		s->has_index = 1;
	} else if (dir_files(dir, &names, &n, err)) {
		return -1;
	}

	s->files = calloc((size_t)n, sizeof *s->files);
	if (!s->files) {
		ad_err(err, "%s: out of memory", dir);
		goto fail;
	}
	for (int i = 0; i < n; i++) {
		if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path) {
			ad_err(err, "%s: path too long", dir);
			goto fail;
		}
		if (st_open(&s->files[i], path, err))
			goto fail;
		s->n_files++;
		for (int64_t j = 0; j < s->files[i].n_tensors; j++)
			s->files[i].tensors[j].file = i;
		s->n_tensors += s->files[i].n_tensors;
	}
	// a name in two shards would make lookups ambiguous
	for (int i = 1; i < n; i++)
		for (int64_t j = 0; j < s->files[i].n_tensors; j++)
			for (int k = 0; k < i; k++)
				if (st_find(&s->files[k], s->files[i].tensors[j].name)) {
					ad_err(err, "%s: tensor \"%.200s\" is in both %s and %s", dir,
					       s->files[i].tensors[j].name, names[k], names[i]);
					goto fail;
				}
	if (index) {
		const cJSON *e;
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(index, "weight_map"))
		{
			const struct st_tensor *t = st_set_find(s, e->string);
			if (!t || strcmp(names[t->file], e->valuestring)) {
				ad_err(err, "%s: index puts tensor \"%.200s\" in %s, which does not have it", dir,
				       e->string, e->valuestring);
				goto fail;
			}
		}
	}
	free_names(names, n);
	cJSON_Delete(index);
	return 0;
fail:
	free_names(names, n);
	cJSON_Delete(index);
	st_set_close(s);
	return -1;
}

void
st_set_close(struct st_set *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->n_files; i++)
		st_close(&s->files[i]);
	free(s->files);
	memset(s, 0, sizeof *s);
}

const struct st_tensor *
st_set_find(const struct st_set *s, const char *name)
{
	for (int i = 0; i < s->n_files; i++) {
		const struct st_tensor *t = st_find(&s->files[i], name);
		if (t)
			return t;
	}
	return NULL;
}

// --- writing -------------------------------------------------------------------

static int
write_all(FILE *fp, const void *p, size_t n)
{
	return n == 0 || fwrite(p, 1, n, fp) == n ? 0 : -1;
}

int
st_write(const char *path, const struct st_wtensor *t, int n, char *err)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
	cJSON_AddStringToObject(meta, "format", "pt");
	uint64_t at = 0;
	for (int i = 0; i < n; i++) {
		const char *dt = dtype_of_type(t[i].type);
		if (!dt || t[i].n_dims > ST_MAX_DIMS) {
			cJSON_Delete(root);
			return ad_err(err, "%s: tensor %s: cannot write type %u / %u dims", path, t[i].name, t[i].type,
			              t[i].n_dims);
		}
		uint64_t ne = 1;
		cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
		cJSON_AddStringToObject(e, "dtype", dt);
		cJSON *sh = cJSON_AddArrayToObject(e, "shape");
		for (uint32_t d = 0; d < t[i].n_dims; d++) {
			cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
			ne *= (uint64_t)t[i].shape[d];
		}
		uint64_t nb = ne * ad_type_block_bytes(t[i].type);
		cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
		cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
		cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(at + nb)));
		at += nb;
	}
	char *json = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	if (!json)
		return ad_err(err, "%s: out of memory", path);
	size_t jlen = strlen(json), hlen = (jlen + 7) / 8 * 8; // pad with spaces to 8
	FILE *fp = fopen(path, "wb");
	if (!fp) {
		free(json);
		return ad_err(err, "%s: %s", path, strerror(errno));
	}
	uint8_t len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
	int rc = write_all(fp, len8, 8) || write_all(fp, json, jlen) || write_all(fp, "        ", hlen - jlen);
	free(json);
	for (int i = 0; i < n && !rc; i++) {
		uint64_t ne = 1;
		for (uint32_t d = 0; d < t[i].n_dims; d++)
			ne *= (uint64_t)t[i].shape[d];
		rc = write_all(fp, t[i].data, ne * ad_type_block_bytes(t[i].type));
	}
	if (fclose(fp) || rc)
		return ad_err(err, "%s: write failed", path);
	return 0;
}

int
st_write_index(const char *path, const char *const *names, const char *const *files, int n, uint64_t total_size,
               char *err)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
	cJSON_AddNumberToObject(meta, "total_size", (double)total_size);
	cJSON *wm = cJSON_AddObjectToObject(root, "weight_map");
	for (int i = 0; i < n; i++)
		cJSON_AddStringToObject(wm, names[i], files[i]);
	char *json = cJSON_Print(root);
	cJSON_Delete(root);
	if (!json)
		return ad_err(err, "%s: out of memory", path);
	FILE *fp = fopen(path, "wb");
	if (!fp) {
		free(json);
		return ad_err(err, "%s: %s", path, strerror(errno));
	}
	int rc = write_all(fp, json, strlen(json));
	free(json);
	if (fclose(fp) || rc)
		return ad_err(err, "%s: write failed", path);
	return 0;
}
