/* fuzz_checkpoint: any bytes as a checkpoint file, through transformer_open
   and forward(). Seeds: llama2.c version 0 files and RUNC files in every
   weight type (fuzz/corpus/checkpoint, made by fuzz/mkseeds.c).

   A loader accepts a file only when its size is exactly what its header
   describes, which random mutation rarely hits. So half of the mutations are
   followed by a fix-up: when the mutated header is one run.c accepts, the
   file is cut or zero-padded to the size that header implies (computed by
   run.c's own walkers), and the fuzzer reaches forward() with shapes,
   weight types and classifier layouts it chose itself. */
#include "fuzz_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_model(data, size);
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    size = LLVMFuzzerMutate(data, size, max_size);
    return seed % 2 ? fuzz_fix_size(data, size, max_size) : size;
}
