/* fuzz_util.c: in-memory files and the mmap replacement for the harnesses
   (see fuzz_util.h). A separate file because memfd_create needs _GNU_SOURCE,
   which run.c itself is not built with. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef FUZZ_DATA_DIR
#define FUZZ_DATA_DIR "."
#endif

static int fds[2] = {-1, -1};
static char paths[2][64];

static void die(const char *what) {
    fprintf(stderr, "fuzz_util: %s: %s\n", what, strerror(errno));
    abort();
}

const char *fuzz_file(int slot, const void *data, size_t size) {
    if (fds[slot] < 0) {
        fds[slot] = memfd_create("fuzz-input", 0);
        if (fds[slot] < 0) die("memfd_create");
        snprintf(paths[slot], sizeof paths[slot], "/proc/self/fd/%d", fds[slot]);
    }
    if (ftruncate(fds[slot], 0) != 0) die("ftruncate");
    const char *p = data;
    for (size_t done = 0; done < size;) {
        ssize_t n = pwrite(fds[slot], p + done, size - done, (off_t)done);
        if (n <= 0) die("pwrite");
        done += (size_t)n;
    }
    return paths[slot];
}

const char *fuzz_data_path(const char *relative) {
    static char path[4096];
    const char *dir = getenv("FUZZ_DATA");
    snprintf(path, sizeof path, "%s/%s", dir && dir[0] ? dir : FUZZ_DATA_DIR, relative);
    return path;
}

volatile unsigned char fuzz_sink; // a store the compiler must keep

void fuzz_touch(const void *p, size_t n) {
    unsigned char sum = 0;
    for (size_t i = 0; i < n; i++) sum ^= ((const unsigned char *)p)[i];
    fuzz_sink ^= sum;
}

// The file's bytes in a heap block of exactly `length` bytes, page-aligned.
void *fuzz_mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
    (void)addr; (void)prot; (void)flags;
    void *buf = NULL;
    if (length == 0 || posix_memalign(&buf, 4096, length) != 0) { errno = ENOMEM; return MAP_FAILED; }
    for (size_t done = 0; done < length;) {
        ssize_t n = pread(fd, (char *)buf + done, length - done, offset + (off_t)done);
        if (n <= 0) { free(buf); errno = EIO; return MAP_FAILED; }
        done += (size_t)n;
    }
    return buf;
}

int fuzz_munmap(void *addr, size_t length) {
    (void)length;
    free(addr);
    return 0;
}
