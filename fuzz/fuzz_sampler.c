/* fuzz_sampler: sample() on any logits (NaN, infinities, huge values: what a
   hostile or broken model file makes forward() return) with any sampling
   parameters inside the ranges the command line accepts. The token drawn
   must be inside the vocabulary.

   Input: 8 bytes of parameters (temperature, top-p, top-k, min-p,
   repetition penalty, repeat-last-n, seed), then little-endian float32
   logits, one per token (at least one). */
#define TESTING
#include "fuzz_util.h"
#include "../run.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 12) return 0;
    const uint8_t *b = data;
    SamplerParams params = {
        b[0] * (100.0f / 255.0f),                         // temperature, 0 = greedy
        b[1] / 255.0f,                                     // top-p, 1 = off
        b[2] < 128 ? 0 : b[2] - 127,                       // top-k, 0 = off
        b[3] < 128 ? 0.0f : (b[3] - 128) / 127.0f,         // min-p, 0 = off
        b[4] < 128 ? 1.0f : 0.01f + (b[4] - 128) * (99.99f / 127.0f), // repetition penalty, 1 = off
        b[5],                                              // repeat-last-n
    };
    int vocab_size = (int)((size - 8) / 4);
    float *logits = malloc((size_t)vocab_size * sizeof(float));
    int *recent = malloc(64 * sizeof(int));
    if (!logits || !recent) abort();
    for (int i = 0; i < vocab_size; i++) logits[i] = read_f32(data + 8 + 4 * (size_t)i);
    int n_recent = b[5] % 64;
    for (int i = 0; i < n_recent; i++) recent[i] = data[8 + (size_t)i % (size - 8)] % vocab_size;
    Sampler s;
    if (sampler_init(&s, vocab_size, params, b[6] | b[7] << 8) != 0) abort();
    int token = sample(&s, logits, recent, n_recent);
    if (token < 0 || token >= vocab_size) {
        fprintf(stderr, "fuzz_sampler: sample() returned %d, outside the vocabulary of %d\n", token, vocab_size);
        abort();
    }
    sampler_free(&s);
    free(logits);
    free(recent);
    return 0;
}
