/* fuzz_gguf: the same harness as fuzz_checkpoint, seeded with small GGUF
   models (F32, F16, BF16, Q8_0 and Q4_0 tensors, with a vocabulary), so the
   fuzzer spends its time inside gguf_parse, gguf_config, gguf_weights and
   gguf_vocab. */
#include "fuzz_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_model(data, size);
    return 0;
}
