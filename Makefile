# The front door. `make run` and `make test` are all a newcomer needs.
BUILD ?= build
SANITIZE_BUILD ?= build-sanitize
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: fuzz-build all deps build tool run test test-sanitize test-tsan test-valgrind test-cuda bench bench-check format clean install-test

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The dtensor tool alone (the library and the command; no tests, no examples): what the main
# job and the benchmarks need, so `make run` does not wait for the test suite to compile.
tool: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target dtensor_cli

# The main job: the dtensor demo (trains a transformer on a 2 x 2 mesh of 4 threads).
run: tool
	./$(BUILD)/dtensor demo

# ctest lists skipped tests only by name: ctest-skips.sh adds their count and reasons (a clone
# without ../shared/fixtures skips the fixture tests; CI sets DT_REQUIRE_FIXTURES=1 to fail).
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --output-junit ctest-junit.xml; rc=$$?; \
	  bash $(CURDIR)/scripts/ctest-skips.sh ctest-junit.xml; exit $$rc

$(SANITIZE_BUILD)/CMakeCache.txt:
	cmake -S . -B $(SANITIZE_BUILD) -DCMAKE_BUILD_TYPE=Debug -DDT_SANITIZE=ON $(CMAKE_FLAGS)

test-sanitize: deps $(SANITIZE_BUILD)/CMakeCache.txt
	cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	cd $(SANITIZE_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

# ThreadSanitizer over the threads backend and the dist layer (a plain test program:
# Criterion's runner cannot start under TSan).
TSAN_BUILD ?= build-tsan
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDT_TSAN=ON $(CMAKE_FLAGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target tsan_threads tsan_thread_pool
	cd $(TSAN_BUILD) && ctest --output-on-failure

# The CUDA variant (docs/cuda.md), as CI builds it: the library, the tool and the `cuda` tests
# only, nvcc's and gcc's warnings as errors, then those tests (they skip without a GPU). The
# toolkit is /usr/local/cuda or nvcc on PATH, else NVIDIA's wheels (scripts/install-cuda-toolkit.sh).
CUDA_BUILD ?= build-cuda
test-cuda: deps
	flags=$$(bash scripts/install-cuda-toolkit.sh | tail -1) && \
	  cmake -S . -B $(CUDA_BUILD) -DCMAKE_BUILD_TYPE=Release -DDT_WITH_CUDA=ON -DDT_CUDA_TESTS_ONLY=ON \
	    -DDT_WITH_MPI=OFF $$flags $(CMAKE_FLAGS)
	cmake --build $(CUDA_BUILD) -j $(JOBS) --target dtensor_cli cuda_tests
	cd $(CUDA_BUILD) && ctest -L cuda --output-on-failure

# valgrind memcheck with the allocator caches ON (the sanitizer builds turn them off): the
# demos (a few training steps, the TP walkthrough) and the distributed tests, threads backend.
test-valgrind: build
	valgrind --error-exitcode=9 -q ./$(BUILD)/dtensor demo --steps 3 > /dev/null
	valgrind --error-exitcode=9 -q ./$(BUILD)/dtensor demo tp > /dev/null
	cd $(BUILD) && valgrind --error-exitcode=9 -q --trace-children=yes ./tests/test_dist --jobs 1

bench: tool
	./$(BUILD)/dtensor bench kernels
	./$(BUILD)/dtensor bench dispatch
	./$(BUILD)/dtensor bench instructions
	./$(BUILD)/dtensor bench collectives --backend threads --world 2
	./$(BUILD)/dtensor bench profile
	./$(BUILD)/dtensor bench tp
	./$(BUILD)/dtensor bench autograd
	./$(BUILD)/dtensor bench train
	./$(BUILD)/dtensor bench compile
	./$(BUILD)/dtensor bench models
	./$(BUILD)/dtensor bench ckpt
	./$(BUILD)/dtensor bench context

# Instruction counts against bench/expected_results.csv (+-10 %), as PyTorch's gate.
bench-check: tool
	bash scripts/bench-check.sh $(BUILD)

# Installs into a scratch prefix and builds a tiny outside project against it, through
# find_package(dtensor) and through pkg-config.
install-test: build
	bash scripts/install-test.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(TSAN_BUILD) $(CUDA_BUILD)

# Builds every libFuzzer target without running it (fuzz/run.sh TARGET [SECONDS] runs one).
fuzz-build: deps
	sh fuzz/run.sh lib
	for t in trace_reader graph_parser safetensors checkpoint_meta; do sh fuzz/run.sh $$t 0 || exit 1; done
