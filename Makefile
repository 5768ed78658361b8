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

.PHONY: all portable test demo clean

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

clean:
	rm -rf run test_all build tokenizer.bin
