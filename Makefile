# The two commands of the quick start, and a few more.
#
#   make run     build, then tell the default story with the embedded model,
#                through the whole pipeline (tokenizer, cpu-worker, ane-worker on emu)
#   make test    build and run every test suite (plain, then ASan+UBSan)
#   make bench   build and run the benchmarks (prints figures), then the side-by-side
#                one, tests/perf/bench.sh (LLAMA_BENCH=path/to/llama-bench to compare)
#   make format        reformat the C sources in place (.clang-format, tests/format.sh)
#   make format-check  show what clang-format would change; fails if anything would
#                (the suite runs it too, as test-format)
#
# Both install the Debian packages they need first (deploy/install-deps.sh).

JOBS  ?= 2
MODEL ?= tests/data/stories260K/stories260K.gguf
PROMPT ?= Once upon a time

.PHONY: all run test test-plain test-sanitize bench fuzz deps clean format format-check

all: build/bin/anedvd

deps:
	@sh deploy/install-deps.sh

build/bin/anedvd: deps FORCE
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build -j $(JOBS) >/dev/null

run: build/bin/anedvd
	build/bin/anedvd run --model $(MODEL) --prompt "$(PROMPT)" --no-chat --max-tokens 200

test: test-plain test-sanitize

test-plain:
	@sh deploy/install-deps.sh --test
	cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DANEDVD_WERROR=ON >/dev/null
	cmake --build build-test -j $(JOBS)
	cd build-test && { ctest --output-on-failure -j $(JOBS) || { ../tests/failure-digest.sh; exit 1; }; }

test-sanitize:
	@sh deploy/install-deps.sh --test
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DANEDVD_WERROR=ON -DANEDVD_SANITIZE=ON >/dev/null
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) || { ../tests/failure-digest.sh; exit 1; }

bench: build/bin/anedvd
	@for b in build/tests/bench-*; do [ -x "$$b" ] && echo "== $$b" && "$$b"; done; true
	@echo "== tests/perf/bench.sh build (LLAMA_BENCH=$${LLAMA_BENCH:-unset})"
	@tests/perf/bench.sh build

format:
	@sh tests/format.sh apply

format-check:
	@sh tests/format.sh check

clean:
	rm -rf build build-test build-asan build-fuzz

FORCE:
