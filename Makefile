# run.c build. `make` optimizes for this machine; `make portable` runs anywhere.
CC ?= cc
SHARED ?= ../shared
OPENMP ?= 1
ARCH ?= -march=native
CFLAGS ?= -O3 $(ARCH) -std=c11 -Wall -Wextra -Wshadow
ifeq ($(OPENMP),1)
CFLAGS += -fopenmp
endif
LDLIBS = -lm

.PHONY: all portable test demo clean bench bench-large

all: run tokenizer.bin

run: run.c
	$(CC) $(CFLAGS) -o $@ run.c $(LDLIBS)

test_all: test_all.c run.c
	$(CC) $(CFLAGS) -o $@ test_all.c $(LDLIBS)

portable:
	$(MAKE) -B run ARCH=

# The default tokenizer (-z) is Llama 2's; linked, never committed.
tokenizer.bin:
	ln -sf $(SHARED)/models/llama2/tokenizer.bin tokenizer.bin

demo: run
	./run $(SHARED)/models/stories260K/stories260K.bin -z $(SHARED)/models/stories260K/tok512.bin

test: run test_all
	./test_all $(SHARED)

# Benchmarks (BENCHMARKS.md): random-weight models of public shapes, made
# by mkmodel into build/models/ and quantized by ./run, each with 1 and 2
# threads.
BENCH_MODELS = s15m s42m s110m
BENCH_THREADS = 1 2

build/mkmodel: $(SHARED)/tools/mkmodel.c
	mkdir -p build
	cc -O2 -o $@ $(SHARED)/tools/mkmodel.c

build/models/%.bin: | build/mkmodel
	mkdir -p build/models
	build/mkmodel $@ $*

BENCH_FILES = $(foreach m,$(BENCH_MODELS),build/models/$(m).bin build/models/$(m).q8_0.bin build/models/$(m).q4_0.bin)

build/models/%.q8_0.bin: build/models/%.bin run
	./run $< -m quantize -o $@ --dtype q8_0

build/models/%.q4_0.bin: build/models/%.bin run
	./run $< -m quantize -o $@ --dtype q4_0

bench: run $(BENCH_FILES)
	@for f in $(BENCH_FILES); do for n in $(BENCH_THREADS); do \
		OMP_NUM_THREADS=$$n ./run $$f -m bench || exit 1; done; done

# TinyLlama-1.1B's shape: a 4.4 GB file.
bench-large: run build/models/tl1b.bin
	@for n in $(BENCH_THREADS); do OMP_NUM_THREADS=$$n ./run build/models/tl1b.bin -m bench || exit 1; done

clean:
	rm -rf run test_all build tokenizer.bin
