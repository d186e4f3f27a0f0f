// fuzz-main.c - a plain driver for libFuzzer targets: feeds every file
// named on the command line, or found in a directory named there, to
// LLVMFuzzerTestOneInput once. It replays seed corpora and past crashes as
// an ordinary test, with any compiler.
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
run_file(const char *path, size_t size)
{
	// an exact-size buffer, so that the sanitizer catches reads past the end
	uint8_t *buf = malloc(size ? size : 1);
	FILE *f = fopen(path, "rb");
	if (!buf || !f || fread(buf, 1, size, f) != size) {
		perror(path);
		free(buf);
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, size);
	free(buf);
	return 0;
}

int
main(int argc, char **argv)
{
	int files = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i], (size_t)st.st_size))
				return 1;
			files++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		if (!d) {
			perror(argv[i]);
			return 1;
		}
		struct dirent *e;
		while ((e = readdir(d))) {
			// README files say what the directory holds; they are not inputs
			if (e->d_name[0] == '.' || !strncmp(e->d_name, "README", 6))
				continue;
			char path[4096];
			snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
			if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
				continue;
			if (run_file(path, (size_t)st.st_size)) {
				closedir(d);
				return 1;
			}
			files++;
		}
		closedir(d);
	}
	printf("%d inputs replayed\n", files);
	return 0;
}
