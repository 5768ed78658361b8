/* fuzz_tokenizer_file: tokenizer_open on hostile tokenizer files, then the
   loaded vocabulary is used: a few texts encoded, every token decoded.

   Input: two bytes, little-endian, give the model's vocab_size (value % 4096
   + 1, since a model's vocab_size is positive); the rest is the file, either
   llama2.c's tokenizer.bin or a GGUF file with a vocabulary (run.c tells
   them apart by the magic). Seeds: fuzz/corpus/tokenizer_file. As ./run
   does, a tokenizer.bin gets the BOS and EOS ids of a version 0 model (1 and
   2, which such a model's vocabulary must contain). */
#define TESTING
#include "fuzz_util.h"
#include "../run.c"
#include "fuzz_vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int vocab_size = (data[0] | data[1] << 8) % 4096 + 1;
    const char *path = fuzz_file(0, data + 2, size - 2);
    Tokenizer tk;
    if (tokenizer_open(&tk, path, vocab_size) != 0) return 0;
    if (!tk.ids_known) { // tokenizer.bin has no BOS/EOS ids: ./run takes the model's, always inside its vocabulary
        if (vocab_size < 3) { tokenizer_close(&tk); return 0; }
        tk.bos_id = 1;
        tk.eos_id = 2;
    }
#define TEXT(s) {s, sizeof s - 1}
    static const struct { const char *s; size_t len; } texts[] = {
        TEXT(""), TEXT(" "), TEXT("Hello world"), TEXT("  two  spaces  "), TEXT("a\xE2\x96\x81" "b"),
        TEXT("caf\xC3\xA9 \xF0\x9F\x98\x80 \xFF\xC3"), TEXT("ab\0ab"), TEXT("<0x41><s>\n</s>")};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) fuzz_encode_decode(&tk, texts[k].s, texts[k].len, 1);
    fuzz_decode_all(&tk);
    tokenizer_close(&tk);
    return 0;
}
