/* fuzz_util.h: shared by the libFuzzer harnesses in fuzz/.

   Include this, then "../run.c" (with TESTING defined). It does two things:

   - fuzz_file() puts the fuzzer's bytes in an in-memory file (memfd) and
     returns a path to it, so the real loaders, which take a path, are tested
     as they are.
   - run.c's mmap/munmap are replaced by a copy of the file into a heap
     buffer of exactly the file's size. A real mapping is rounded up to whole
     pages, so a read a few bytes past the end of a file would go unnoticed;
     on the heap AddressSanitizer reports it. The buffer is page-aligned like
     a mapping, so alignment behaves as in the real program. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L // as run.c defines it
#endif
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE // as run.c defines it (madvise)
#endif
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>

// A path naming a file that holds data[0..size); slot 0 or 1 (two files may
// be open at once). The path stays valid, its content until the next call.
const char *fuzz_file(int slot, const void *data, size_t size);

// A path in the repository, whose models and tokenizers the harnesses read
// (compiled in by make; FUZZ_DATA in the environment overrides it).
const char *fuzz_data_path(const char *relative);

// Reads every byte of p[0..n), so AddressSanitizer checks them all.
void fuzz_touch(const void *p, size_t n);

void *fuzz_mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset);
int fuzz_munmap(void *addr, size_t length);

#define mmap fuzz_mmap
#define munmap fuzz_munmap

#endif
