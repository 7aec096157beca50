# Thin wrapper over CMake. `make run` and `make test` are the two commands of the README.
JOBS ?= $(shell nproc)
BUILD ?= build/release
ASAN_BUILD ?= build/asan
FUZZ_BUILD ?= build/fuzz
FUZZ_SECONDS ?= 45
CMAKE_FLAGS ?=
CTEST_FLAGS ?= --output-on-failure -j $(JOBS)
DAY0 := $(BUILD)/bin/day0
# ccache (when installed) shares objects between clones of the repo: paths are made relative to it.
export CCACHE_BASEDIR ?= $(CURDIR)
# Sanitizer and fuzz builds: light optimisation and line tables only, so they build fast and still
# give file:line stack traces.
CHECK_FLAGS := -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1"

.PHONY: all deps build run test test-release test-asan test-fuzz bench format format-check tidy clean

all: build

deps:
	@bash scripts/bootstrap.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The main job: adapt the embedded default model end to end.
run: build
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
test-fuzz: deps
	@if ! printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' | \
	    clang++ -x c++ -fsanitize=fuzzer,address -o /dev/null - >/dev/null 2>&1; then \
	  echo "test-fuzz: skipped: clang++ with libFuzzer (-fsanitize=fuzzer) is not available"; \
	else \
	  cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	    -DCMAKE_CXX_COMPILER=clang++ -DDAY0_BUILD_FUZZ=ON -DDAY0_BUILD_BENCH=OFF $(CHECK_FLAGS) \
	    -DDAY0_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CMAKE_FLAGS) >/dev/null && \
	  cmake --build $(FUZZ_BUILD) -j $(JOBS) --target day0_fuzz_all && \
	  cd $(FUZZ_BUILD) && ctest $(CTEST_FLAGS) -L fuzz; \
	fi

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
