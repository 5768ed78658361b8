# run.c build. `make` optimizes for this machine; `make portable` runs anywhere.
CC ?= cc
# The larger test data, beside the repository when it is there (CI has it);
# the repository alone is complete without it.
SHARED ?= ../shared
OPENMP ?= 1
ARCH ?= -march=native
# LINUX=0 builds without Linux's extras (huge pages, AMX permission, /proc),
# as on other systems: the plain POSIX paths.
LINUX ?= 1

# What the compiler can do, tried once per make: without an OpenMP runtime
# (Apple's clang) the build is single-threaded, and without -march=native
# it is portable, each said in one line.
OMP_PROBE = \#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n
PLAIN_PROBE = int main(void) { return 0; }\n
try_cc = $(shell printf '$(2)' | $(CC) $(1) -x c - -o /dev/null >/dev/null 2>&1 && echo yes)
ifeq ($(OPENMP),1)
ifneq ($(call try_cc,-fopenmp,$(OMP_PROBE)),yes)
$(if $(filter 0,$(MAKELEVEL)),$(info make: $(CC) has no OpenMP (-fopenmp): building single-threaded))
override OPENMP = 0
endif
endif
ifneq ($(ARCH),)
ifneq ($(call try_cc,$(ARCH),$(PLAIN_PROBE)),yes)
$(if $(filter 0,$(MAKELEVEL)),$(info make: $(CC) does not take $(ARCH): building for any machine of this kind))
override ARCH =
endif
endif
# -ffp-contract=off in every build: the K-quant writers (-m quantize) equal
# llama-quantize byte for byte only if a * b + c is rounded twice, as ggml's
# reference C does; a fused multiply-add rounds once and moves some scales.
NOFMA = -ffp-contract=off
CFLAGS ?= -O3 $(ARCH) -std=c11 -Wall -Wextra -Wshadow
CFLAGS += $(NOFMA)
ifeq ($(OPENMP),1)
CFLAGS += -fopenmp
else
CFLAGS += -Wno-unknown-pragmas
endif
ifeq ($(LINUX),0)
CFLAGS += -DNO_LINUX
endif
LDLIBS = -lm

.PHONY: all portable test test-alone demo clean bench bench-large

# make CROSS=aarch64 builds the ARM64 binaries instead (see ARM64 below).
ifeq ($(CROSS),aarch64)
all: arm64
else
all: run
endif

# The flags ./run and ./test_all were built with: a change of CC, ARCH,
# OPENMP or CFLAGS rewrites build/flags, which rebuilds them.
BUILD_FLAGS = $(CC) $(CFLAGS) $(LDLIBS)
build/flags: FORCE
	@mkdir -p build
	@echo '$(BUILD_FLAGS)' | cmp -s - $@ || echo '$(BUILD_FLAGS)' > $@
.PHONY: FORCE
FORCE:

run: run.c build/flags
	$(CC) $(CFLAGS) -o $@ run.c $(LDLIBS)

test_all: test_all.c run.c build/flags
	$(CC) $(CFLAGS) -o $@ test_all.c $(LDLIBS)

# ARCH changes build/flags, which rebuilds ./run
portable:
	$(MAKE) run ARCH=

# A story from the 260K-parameter TinyStories model in models/ (trained by
# llama2.c's author; its 512-token tokenizer beside it).
demo: run
	@echo "stories260K (models/stories260K), temperature 0.8, 200 positions:"
	@./run models/stories260K/stories260K.bin -z models/stories260K/tok512.bin -t 0.8 -n 200 -i "Once upon a time"

# The two builds side by side (10 and 15 s), then the suite, with the
# shared data when it is there. Tests measure no speed: passive OpenMP
# waits keep them quick on a busy machine.
test:
	@$(MAKE) --no-print-directory -j2 run test_all
	OMP_WAIT_POLICY=passive ./test_all $(SHARED)

# The suite as a clone alone runs it: the repository's data only.
test-alone:
	@$(MAKE) --no-print-directory -j2 run test_all
	OMP_WAIT_POLICY=passive ./test_all /nonexistent

# Benchmarks (BENCHMARKS.md): random-weight models of public shapes, made
# by tools/mkmodel.c into build/models/ and quantized by ./run, each with 1
# and 2 threads.
BENCH_MODELS = s15m s42m s110m
BENCH_THREADS = 1 2

build/mkmodel: tools/mkmodel.c
	mkdir -p build
	$(CC) -O2 -std=c11 -o $@ tools/mkmodel.c

# mkgguf: GGUF models of public shapes (qwen3, qwen3moe, gemma3, gpt-oss),
# random weights written directly in a quantized type (tools/mkgguf.c)
build/mkgguf: tools/mkgguf.c run.c build/flags
	mkdir -p build
	$(CC) $(CFLAGS) -Wno-unused-function -o $@ tools/mkgguf.c $(LDLIBS)

build/models/%.bin: | build/mkmodel
	mkdir -p build/models
	build/mkmodel $@ $*

BENCH_FILES = $(foreach m,$(BENCH_MODELS),build/models/$(m).bin build/models/$(m).q8_0.bin build/models/$(m).q4_0.bin \
	build/models/$(m).q4_k_m.bin build/models/$(m).q6_k.bin)

build/models/%.q8_0.bin: build/models/%.bin run
	./run $< -m quantize -o $@ --dtype q8_0

build/models/%.q4_0.bin: build/models/%.bin run
	./run $< -m quantize -o $@ --dtype q4_0

# llama-quantize's Q4_K_M mix (RUNC version 2) and Q6_K, by our quantize mode
build/models/%.q4_k_m.bin: build/models/%.bin run
	./run $< -m quantize -o $@ --dtype q4_k_m

build/models/%.q6_k.bin: build/models/%.bin run
	./run $< -m quantize -o $@ --dtype q6_k

# The new architectures' shapes by mkgguf (tools/mkgguf.c), with Llama 2's
# vocabulary (tokenizer.bin): Qwen3-0.6B's layers (4 of its 28) and
# Qwen3-30B-A3B's (2 of 48; 128 experts, 8 used) in Q8_0.
BENCH_FILES += build/models/qwen3-0.6b-4l.q8_0.gguf build/models/qwen3-30b-a3b-2l.q8_0.gguf

build/models/qwen3-0.6b-4l.q8_0.gguf: | build/mkgguf
	mkdir -p build/models
	build/mkgguf $@ qwen3-0.6b --layers 4 --dtype q8_0

build/models/qwen3-30b-a3b-2l.q8_0.gguf: | build/mkgguf
	mkdir -p build/models
	build/mkgguf $@ qwen3-30b-a3b --layers 2 --dtype q8_0

bench: run $(BENCH_FILES)
	@for f in $(BENCH_FILES); do for n in $(BENCH_THREADS); do \
		OMP_NUM_THREADS=$$n ./run $$f -m bench || exit 1; done; done

# tl1b, TinyLlama-1.1B's shape: a 4.4 GB file (and 1.2, 0.6, 0.7 and 0.9 GB quantized).
BENCH_LARGE_FILES = build/models/tl1b.bin build/models/tl1b.q8_0.bin build/models/tl1b.q4_0.bin \
	build/models/tl1b.q4_k_m.bin build/models/tl1b.q6_k.bin
# and Qwen3-0.6B whole, 8 layers of Qwen3-30B-A3B (3.4 GB), Gemma-3-1B whole
# in Q4_K_M, 4 layers of gpt-oss-20b in MXFP4_MOE (3 GB)
BENCH_LARGE_FILES += build/models/qwen3-0.6b.q4_k_m.gguf build/models/qwen3-30b-a3b-8l.q4_k_m.gguf \
	build/models/gemma3-1b.q4_k_m.gguf build/models/gpt-oss-20b-4l.mxfp4_moe.gguf

build/models/qwen3-0.6b.q4_k_m.gguf: | build/mkgguf
	mkdir -p build/models
	build/mkgguf $@ qwen3-0.6b --dtype q4_k_m

build/models/qwen3-30b-a3b-8l.q4_k_m.gguf: | build/mkgguf
	mkdir -p build/models
	build/mkgguf $@ qwen3-30b-a3b --layers 8 --dtype q4_k_m

build/models/gemma3-1b.q4_k_m.gguf: | build/mkgguf
	mkdir -p build/models
	build/mkgguf $@ gemma3-1b --dtype q4_k_m

build/models/gpt-oss-20b-4l.mxfp4_moe.gguf: | build/mkgguf
	mkdir -p build/models
	build/mkgguf $@ gpt-oss-20b --layers 4 --dtype mxfp4_moe

bench-large: run $(BENCH_LARGE_FILES)
	@for f in $(BENCH_LARGE_FILES); do for n in $(BENCH_THREADS); do \
		OMP_NUM_THREADS=$$n ./run $$f -m bench || exit 1; done; done

# The Unicode tables at the end of run.c, from Debian's unicode-data.
.PHONY: unicode-tables
unicode-tables:
	/usr/bin/python3 tools/gen_unicode.py --update run.c

clean:
	rm -rf run test_all build

# ---- Hardening: fuzzers and sanitizers (fuzz/README.md) ----
# make fuzz         builds the libFuzzer harnesses (clang) into build/fuzz/ and
#                   runs each for FUZZ_SECONDS, FUZZ_JOBS at a time; non-zero
#                   exit on any finding
# make fuzz-regress replays fuzz/regressions/ and the seed corpus once
# make fuzz-corpus  regenerates fuzz/corpus/ (fuzz/mkseeds.c, tools/mkmodel)
# make test-asan    the suite (but quality) built with ASan + UBSan, in build/asan/
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 30
FUZZ_TARGETS = checkpoint gguf tokenizer_file encode bpe args sampler quantize output
FUZZ_CFLAGS = -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all $(NOFMA) \
	-std=c11 -Wall -Wextra -Wno-unknown-pragmas -Wno-unused-function -DFUZZ_DATA_DIR='"$(abspath .)"'
ASAN_CFLAGS = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1 -std=c11 -Wall -Wextra $(NOFMA)
ifeq ($(OPENMP),1)
ASAN_CFLAGS += -fopenmp
endif

.PHONY: fuzz fuzz-build fuzz-regress fuzz-corpus test-asan

build/fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_util.c fuzz/fuzz_util.h fuzz/fuzz_model.h fuzz/fuzz_vocab.h run.c
	@mkdir -p build/fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< fuzz/fuzz_util.c -lm

fuzz-build: $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)

fuzz: fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) sh fuzz/run_fuzzers.sh build/fuzz $(FUZZ_TARGETS)

fuzz-regress: fuzz-build
	@status=0; for t in $(FUZZ_TARGETS); do \
	    files=$$(find fuzz/regressions/$$t fuzz/corpus/$$t -type f 2>/dev/null | sort); \
	    mkdir -p build/fuzz/findings/$$t; \
	    if build/fuzz/fuzz_$$t -artifact_prefix=build/fuzz/findings/$$t/ $$files >build/fuzz/regress-$$t.log 2>&1; then \
	        echo "ok   fuzz replay: $$t ($$(echo $$files | wc -w) inputs)"; \
	    else echo "FAIL fuzz replay: $$t (see build/fuzz/regress-$$t.log)"; status=1; fi; \
	done; exit $$status

build/fuzz/mkmodel: tools/mkmodel.c
	@mkdir -p build/fuzz
	$(CC) -O2 -std=c11 -o $@ $<

build/fuzz/mkseeds: fuzz/mkseeds.c
	@mkdir -p build/fuzz
	$(CC) -O2 -std=c11 -Wall -Wextra -o $@ $< -lm

fuzz-corpus: build/fuzz/mkmodel build/fuzz/mkseeds
	rm -rf fuzz/corpus
	mkdir -p $(FUZZ_TARGETS:%=fuzz/corpus/%)
	build/fuzz/mkmodel build/fuzz/v0-tiny.bin 4 8 1 2 1 8 4
	build/fuzz/mkmodel build/fuzz/v0-gqa.bin 8 8 1 4 2 8 4 --unshared --seed 2
	build/fuzz/mkseeds fuzz/corpus build/fuzz/v0-tiny.bin build/fuzz/v0-gqa.bin

# Suites built with other flags (SUITE_CFLAGS_name) into build/name/: test_all
# runs ./run from its working directory and keeps its scratch files in build/
# there, so each suite runs inside its own directory.
SUITE_CFLAGS_asan = $(ASAN_CFLAGS)
build/%/run: run.c
	@mkdir -p $(@D)
	$(CC) $(SUITE_CFLAGS_$*) -o $@ run.c $(LDLIBS)

build/%/test_all: test_all.c run.c
	@mkdir -p $(@D)
	$(CC) $(SUITE_CFLAGS_$*) -o $@ test_all.c $(LDLIBS)

# Every group but quality: it runs quantize and the forward pass that the
# other groups sanitize, only on more positions (40% of the sanitized
# suite's time); make test runs it.
test-asan: build/asan/run build/asan/test_all
	cd build/asan && OMP_WAIT_POLICY=passive ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
	    UBSAN_OPTIONS=print_stacktrace=1 ./test_all $(abspath $(SHARED)) -quality

# Valgrind memcheck of a generation, a chat and a quantized GGUF run; any
# error or leak fails. Valgrind 3.19 cannot decode AVX-512, so on x86-64 this
# build stops at AVX2 (still the SIMD paths), single-threaded.
VALGRIND = valgrind -q --leak-check=full --show-leak-kinds=all --errors-for-leak-kinds=all --error-exitcode=9
VALGRIND_ARCH = $(if $(filter x86_64,$(shell uname -m)),-march=x86-64-v3,)
STORIES = models/stories260K

build/valgrind/run: run.c
	@mkdir -p build/valgrind
	$(CC) -O2 -g $(VALGRIND_ARCH) $(NOFMA) -std=c11 -Wall -Wextra -Wno-unknown-pragmas -o $@ run.c $(LDLIBS)

.PHONY: valgrind
valgrind: build/valgrind/run
	$(VALGRIND) build/valgrind/run $(STORIES)/stories260K.bin -z $(STORIES)/tok512.bin -t 0.8 -s 3 -n 80 -i "Once upon" >/dev/null
	printf 'Be kind.\nHello\nTell me more\n' | $(VALGRIND) build/valgrind/run $(STORIES)/stories260K.bin \
	    -z $(STORIES)/tok512.bin -m chat -n 30 -t 0 >/dev/null
	$(VALGRIND) build/valgrind/run test/data/models/gguf/g128s.q4_0.gguf -n 20 -i hi -s 1 >/dev/null
	@echo "valgrind: generate, chat and GGUF runs are clean"

# ---- x86-64-v3: the AVX2 paths, tested on machines that have AVX-512 ----
# make test-v3 builds run and test_all for -march=x86-64-v3 (AVX2, FMA, F16C;
# no AVX-512) into build/v3/ and runs the whole suite there, so every AVX2
# kernel is checked against its plain twin even where `make` picks AVX-512.
V3_CFLAGS = -O3 -march=x86-64-v3 -std=c11 -Wall -Wextra -Wshadow $(NOFMA)
ifeq ($(OPENMP),1)
V3_CFLAGS += -fopenmp
endif

SUITE_CFLAGS_v3 = $(V3_CFLAGS)
# and again with AVX-VNNI (Intel from Alder Lake, AMD from Zen 5), whose
# packed kernels multiply in int32 where plain AVX2 takes maddubs: run where
# the CPU has it, else a line says that suite did not run
SUITE_CFLAGS_v3vnni = $(V3_CFLAGS) -mavxvnni

.PHONY: test-v3
test-v3: build/v3/run build/v3/test_all build/v3vnni/run build/v3vnni/test_all
	cd build/v3 && OMP_WAIT_POLICY=passive ./test_all $(abspath $(SHARED))
	@if grep -qw avx_vnni /proc/cpuinfo; then cd build/v3vnni && OMP_WAIT_POLICY=passive ./test_all $(abspath $(SHARED)); \
	else echo "test-v3: NOT RUN: the AVX-VNNI suite (build/v3vnni): this CPU lacks AVX-VNNI"; fi

# ---- ARM64: cross build, tested under emulation (README: ARM boards) ----
# make CROSS=aarch64  (or make arm64) builds static run and test_all with
#                     Debian's gcc-aarch64-linux-gnu for two targets:
#   build/arm64-v8a/      -march=armv8-a                any ARM64 (plain NEON)
#   build/arm64-dotprod/  -march=armv8.2-a+dotprod      with the SDOT instruction
#                     (Cortex-A55/A76 on, so Raspberry Pi 5, not Pi 3/4)
# make test-arm64     runs the whole suite for each under qemu-aarch64.
# Static binaries run on any ARM64 Linux, whatever its libc, and under
# qemu-aarch64 without an ARM sysroot. Linking libgomp statically makes ld
# warn that dlopen needs the glibc it was linked with: only OpenACC
# profiling plugins would use it.
ARM_CC ?= aarch64-linux-gnu-gcc
ARM_TARGETS = v8a dotprod
ARM_MARCH_v8a = -march=armv8-a
ARM_MARCH_dotprod = -march=armv8.2-a+dotprod
ARM_CFLAGS = -O3 -std=c11 -Wall -Wextra -Wshadow -static $(NOFMA)
ifeq ($(OPENMP),1)
ARM_CFLAGS += -fopenmp
endif
QEMU ?= qemu-aarch64
# Each suite runs on the oldest core its -march promises, so that an
# instruction beyond the target (auto-vectorized or not) fails the test.
QEMU_CPU_v8a = cortex-a53
QEMU_CPU_dotprod = cortex-a76

.PHONY: arm64 test-arm64 $(ARM_TARGETS:%=test-arm64-%)

arm64: $(foreach t,$(ARM_TARGETS),build/arm64-$(t)/run build/arm64-$(t)/test_all)

build/arm64-%/run: run.c
	@mkdir -p $(@D)
	$(ARM_CC) $(ARM_CFLAGS) $(ARM_MARCH_$*) -o $@ run.c $(LDLIBS)

build/arm64-%/test_all: test_all.c run.c
	@mkdir -p $(@D)
	$(ARM_CC) $(ARM_CFLAGS) $(ARM_MARCH_$*) -o $@ test_all.c $(LDLIBS)

# Like test-asan, each suite runs inside its build directory (./run is that
# target's, scratch files go to its build/). test_all is emulated and starts
# every ./run through qemu too (RUN_WRAPPER); cc and python3 run natively.
# The groups whose code is the same on every machine (the command line,
# hostile input, first runs, output files, export.py) run in the native
# suites only: under emulation each of their checks starts ./run in qemu,
# and none tests what an ARM build computes differently. Nor does quality
# (how close each quantized type comes to fp32: the same quantizers
# everywhere, the kernels checked against their twins in kernels), which
# under emulation took two thirds of a suite's time.
ARM_GROUPS ?= data tokenizer forward kernels sampler generation chat gguf bpe eog rope arch templates
test-arm64: $(ARM_TARGETS:%=test-arm64-%)

$(ARM_TARGETS:%=test-arm64-%): test-arm64-%: build/arm64-%/run build/arm64-%/test_all
	@echo "== arm64-$* under $(QEMU) -cpu $(QEMU_CPU_$*)"
	@start=$$(date +%s); \
	cd build/arm64-$* && OMP_WAIT_POLICY=passive RUN_WRAPPER="$(QEMU) -cpu $(QEMU_CPU_$*)" \
	    $(QEMU) -cpu $(QEMU_CPU_$*) ./test_all $(abspath $(SHARED)) $(ARM_GROUPS) || exit 1; \
	echo "== arm64-$* passed in $$(( $$(date +%s) - start )) s"
