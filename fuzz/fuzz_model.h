/* fuzz_model.h: the body shared by fuzz_checkpoint.c and fuzz_gguf.c.

   The input is a whole checkpoint file (llama2.c version 0, run.c's RUNC
   format or GGUF: run.c tells them apart by their first bytes). It is
   loaded with the real loader; when that succeeds and the model is small,
   two positions are run through forward(), so that any weight pointer or
   cache index the loader got wrong is read by AddressSanitizer. A GGUF
   model's own vocabulary is then loaded too, as ./run does, and any GGUF
   file gguf_parse accepts must have its tensors inside the file, apart. */
#define TESTING
#include "fuzz_util.h"
#include "../run.c"
#include "fuzz_vocab.h"

// The KV cache is sized for this many positions at most (what -c does), so a
// header declaring a long context does not make every run allocate gigabytes.
#define FUZZ_MAX_CONTEXT 8
// Above this many weights, forward() is skipped to keep executions fast.
#define FUZZ_MAX_WEIGHTS (1u << 20)

static void fuzz_vocab(const char *path, int vocab_size) {
    Tokenizer tk;
    if (tokenizer_open(&tk, path, vocab_size) != 0) return;
    static const char text[] = "Hello world \xE2\x96\x81 caf\xC3\xA9 \xFF";
    fuzz_encode_decode(&tk, text, sizeof text - 1, tk.add_bos);
    fuzz_decode_all(&tk);
    tokenizer_close(&tk);
}

// What the README promises of an accepted GGUF file: every tensor lies inside
// the file and no two overlap. Sizes are computed here in 128 bits, apart
// from run.c's own arithmetic.
static void fuzz_check_gguf(const uint8_t *data, size_t size) {
    if (size < 4 || (uint32_t)read_i32(data) != GGUF_MAGIC) return;
    unsigned char *copy = malloc(size); // exactly the file: a read past it is reported
    if (!copy) abort();
    memcpy(copy, data, size);
    Gguf g;
    if (gguf_parse(&g, copy, size, "fuzz") == 0) {
        unsigned __int128 *end = malloc(((size_t)g.n_tensors + 1) * sizeof *end);
        if (!end) abort();
        for (uint64_t i = 0; i < g.n_tensors; i++) {
            const GgufTensor *t = &g.tensors[i];
            unsigned __int128 values = 1;
            for (int d = 0; d < t->n_dims; d++) values *= t->dims[d];
            // a type run.c does not compute with is never read, so it has no extent to check
            if (!type_supported(t->type)) { end[i] = 0; continue; } // no extent: overlaps nothing
            const TypeTraits *tt = &type_traits[t->type];
            unsigned __int128 bytes = values / (unsigned)tt->block_size * tt->block_bytes;
            end[i] = t->offset + bytes;
            if (end[i] > g.data_size) {
                fprintf(stderr, "fuzz_gguf: tensor %.*s (%llu x %llu x %llu x %llu) ends past the file but was accepted\n",
                        (int)t->name_len, t->name, (unsigned long long)t->dims[0], (unsigned long long)t->dims[1],
                        (unsigned long long)t->dims[2], (unsigned long long)t->dims[3]);
                abort();
            }
        }
        for (uint64_t i = 0; i < g.n_tensors; i++)
            for (uint64_t j = i + 1; j < g.n_tensors; j++)
                if (g.tensors[i].offset < end[j] && g.tensors[j].offset < end[i]) {
                    fprintf(stderr, "fuzz_gguf: tensors %llu and %llu overlap but were accepted\n", (unsigned long long)i,
                            (unsigned long long)j);
                    abort();
                }
        free(end);
        gguf_free(&g);
    }
    free(copy);
}

static void fuzz_model(const uint8_t *data, size_t size) {
    fuzz_check_gguf(data, size);
    const char *path = fuzz_file(0, data, size);
    Transformer t;
    if (transformer_open_context(&t, path, FUZZ_MAX_CONTEXT) != 0) return;
    const Config *c = &t.config;
    uint64_t layer_weights = (uint64_t)c->dim * c->hidden_dim * 3 + (uint64_t)c->dim * c->dim * 2;
    if (layer_weights * c->n_layers <= FUZZ_MAX_WEIGHTS && (uint64_t)c->vocab_size * c->dim <= FUZZ_MAX_WEIGHTS) {
        int tokens[2] = {c->bos_id, c->vocab_size - 1};
        for (int pos = 0; pos < 2 && pos < c->seq_len; pos++) forward(&t, tokens[pos], pos);
    }
    int vocab_size = c->vocab_size, is_gguf = t.is_gguf;
    transformer_close(&t);
    if (is_gguf) fuzz_vocab(path, vocab_size);
}

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

// When data[0..size) starts with a version 0 or RUNC header that run.c
// accepts, returns the file size that header implies (run.c's own walkers),
// having zero-padded data up to it; else size. Loaders accept only files of
// exactly that size, which random mutations rarely hit: mutators call this
// so that the fuzzer reaches forward() with shapes and types of its choosing.
static size_t fuzz_fix_size(uint8_t *data, size_t size, size_t max_size) {
    if (size < 4) return size;
    Config c;
    int runc = (uint32_t)read_i32(data) == RUNC_MAGIC;
    int err = runc ? parse_header_runc(&c, data, size, "fuzz") : parse_header_v0(&c, data, size, "fuzz");
    if (err != 0 || check_config(&c, "fuzz") != 0) return size;
    TensorWalk walk = {.offset = runc ? RUNC_HEADER_SIZE : V0_HEADER_SIZE, .align = runc ? RUNC_ALIGN : 1};
    TensorStarts starts;
    uint64_t expected = runc ? walk_runc(&walk, &starts, &c) : walk_v0(&walk, &starts, &c);
    if (expected > max_size) return size;
    if (expected > size) memset(data + size, 0, (size_t)expected - size);
    return (size_t)expected;
}
