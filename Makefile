# Thin wrapper over CMake. `make run` and `make test` are the two commands of the README.
JOBS ?= $(shell nproc)
BUILD ?= build/release
ASAN_BUILD ?= build/asan
FUZZ_BUILD ?= build/fuzz
FUZZ_SECONDS ?= 13
# make fuzz-long: executions per target (and a time cap per target, seconds).
FUZZ_LONG_RUNS ?= 10000000
FUZZ_LONG_SECONDS ?= 3600
CMAKE_FLAGS ?=
CTEST_FLAGS ?= --output-on-failure -j $(JOBS)
DAY0 := $(BUILD)/bin/day0
# ccache (when installed) shares objects between clones of the repo: paths are made relative to it,
# and the sanitizer and fuzz builds' line tables (-g1) keep the first clone's folder rather than put it
# in the hash, so that a fresh clone (CI's) reuses every object a session built instead of missing all.
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1
# Sanitizer and fuzz builds: light optimisation and line tables only, so they build fast and still
# give file:line stack traces.
CHECK_FLAGS := -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1"

.PHONY: all deps deps-run build build-day0 run test test-release test-asan test-fuzz fuzz-build fuzz-long bench format format-check tidy clean

all: build

# Every package (build, test, fuzz, benchmark tools).
deps:
	@bash scripts/bootstrap.sh

# Only what building and running day0 needs.
deps-run:
	@bash scripts/bootstrap.sh build

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

# Everything: the library, day0, tests and benchmarks (re-configured so that test packages installed
# after a `make run` are found).
build: deps $(BUILD)/build.ninja
	cmake -S . -B $(BUILD) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# Only the day0 binary.
build-day0: deps-run $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target day0_cli

# The main job: adapt the embedded default model end to end. Installs and builds only what day0 needs.
run: build-day0
	$(DAY0) adapt

test: test-release test-asan test-fuzz

test-release: build
	cd $(BUILD) && ctest $(CTEST_FLAGS)

$(ASAN_BUILD)/build.ninja: | deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDAY0_SANITIZE=ON \
	  -DDAY0_BUILD_BENCH=OFF $(CHECK_FLAGS) $(CMAKE_FLAGS)

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (tests labelled `slow` are skipped).
test-asan: deps $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest $(CTEST_FLAGS) -LE slow

# libFuzzer targets under fuzz/, each run for FUZZ_SECONDS in a separate clang build; skipped with a
# message where clang++ cannot link -fsanitize=fuzzer.
test-fuzz: fuzz-build
	@if [ -d $(FUZZ_BUILD) ]; then cd $(FUZZ_BUILD) && ctest $(CTEST_FLAGS) -L fuzz; fi

fuzz-build: deps
	@if ! printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' | \
	    clang++ -x c++ -fsanitize=fuzzer,address -o /dev/null - >/dev/null 2>&1; then \
	  echo "test-fuzz: skipped: clang++ with libFuzzer (-fsanitize=fuzzer) is not available"; \
	else \
	  cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	    -DCMAKE_CXX_COMPILER=clang++ -DDAY0_BUILD_FUZZ=ON -DDAY0_BUILD_BENCH=OFF $(CHECK_FLAGS) \
	    -DDAY0_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CMAKE_FLAGS) >/dev/null && \
	  cmake --build $(FUZZ_BUILD) -j $(JOBS) --target day0_fuzz_all; \
	fi

# The long run: every target for FUZZ_LONG_RUNS executions (capped at FUZZ_LONG_SECONDS each), one
# after the other; prints executions and crashes per target. Findings go to $(FUZZ_BUILD)/findings/.
fuzz-long: fuzz-build
	@bash scripts/fuzz_long.sh $(FUZZ_BUILD) $(FUZZ_LONG_RUNS) $(FUZZ_LONG_SECONDS)

bench: build
	@ls $(BUILD)/bench

format:
	find src apps tests bench fuzz -name '*.cpp' -o -name '*.h' -o -name '*.cu' | xargs clang-format -i

format-check:
	find src apps tests bench fuzz -name '*.cpp' -o -name '*.h' -o -name '*.cu' | xargs clang-format --dry-run --Werror

tidy: build
	find src apps -name '*.cpp' | xargs clang-tidy -p $(BUILD) --quiet

clean:
	rm -rf build
