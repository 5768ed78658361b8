/* mkmodel: a llama2.c "version 0" checkpoint of random weights, of any shape.

   Benchmarks and tests need models of real sizes (TinyLlama-1.1B's shape is
   4.4 GB) that nobody should have to download. Random weights cost the same
   arithmetic and memory traffic as trained ones; only the text is nonsense.
   The same arguments give the same bytes on every machine and compiler: an
   integer generator, and scales that are powers of two (so no product is
   rounded, fused multiply-add or not).

     cc -O2 -o build/mkmodel tools/mkmodel.c
     build/mkmodel OUT.bin PRESET [--seed N]
     build/mkmodel OUT.bin DIM HIDDEN LAYERS HEADS KV_HEADS VOCAB SEQ [--unshared] [--seed N]

   The file: seven little-endian int32 {dim, hidden_dim, n_layers, n_heads,
   n_kv_heads, vocab_size (negative when the classifier is stored apart),
   seq_len}, then float32 tensors, each matrix [out][in]: token_embedding
   [vocab][dim], rms_att[L][dim], wq[L][dim][dim], wk and wv[L][kv_dim][dim],
   wo[L][dim][dim], rms_ffn[L][dim], w1[L][hidden][dim], w2[L][dim][hidden],
   w3[L][hidden][dim], rms_final[dim], llama2.c's two legacy RoPE tables
   (seq_len * head_size / 2 floats each, zeros: readers compute RoPE), and
   wcls[vocab][dim] only when unshared. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int dim, hidden, layers, heads, kv_heads, vocab, seq;
    int unshared; // 1: a classifier of its own after the tensors
    const char *shape_of;
} Preset;

static const Preset presets[] = {
    {"s15m", 288, 768, 6, 6, 6, 32000, 256, 0, "stories15M"},
    {"s42m", 512, 1376, 8, 8, 8, 32000, 1024, 0, "stories42M"},
    {"s110m", 768, 2048, 12, 12, 12, 32000, 1024, 0, "stories110M"},
    {"gqa", 512, 1408, 8, 8, 2, 32000, 512, 1, "grouped-query attention, 4 query heads per kv head"},
    {"mqa", 256, 704, 4, 8, 1, 32000, 256, 1, "multi-query attention, one kv head"},
    {"tl1b", 2048, 5632, 22, 32, 4, 32000, 2048, 1, "TinyLlama-1.1B"},
};
enum { N_PRESETS = sizeof presets / sizeof presets[0] };

// xorshift64* (Vigna): 24 of its top bits make a float in [-1, 1), exactly.
static uint64_t rng_state;

static float random_uniform(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t bits = (rng_state * 0x2545F4914F6CDD1DULL) >> 40;
    return (float)bits * (2.0f / 16777216.0f) - 1.0f;
}

// n floats, each offset + scale * uniform, written in chunks.
static int write_tensor(FILE *f, size_t n, float scale, float offset) {
    float chunk[4096];
    while (n > 0) {
        size_t k = n < 4096 ? n : 4096;
        for (size_t i = 0; i < k; i++) chunk[i] = offset + scale * random_uniform();
        if (fwrite(chunk, sizeof(float), k, f) != k) return -1;
        n -= k;
    }
    return 0;
}

// The power of two nearest above 1/sqrt(n), halving once per factor 4:
// weights of that size keep activations near unit scale through a layer.
static float weight_scale(int n) {
    float s = 1.0f;
    for (long q = 2; q < n; q *= 4) s *= 0.5f;
    return s;
}

static int usage(void) {
    fprintf(stderr, "usage: mkmodel OUT.bin PRESET [--seed N]\n"
                    "       mkmodel OUT.bin DIM HIDDEN LAYERS HEADS KV_HEADS VOCAB SEQ [--unshared] [--seed N]\n"
                    "presets:\n");
    for (int i = 0; i < N_PRESETS; i++) {
        const Preset *p = &presets[i];
        fprintf(stderr, "  %-6s %4d %4d %2d %2d %2d %5d %4d %-8s (%s shape)\n", p->name, p->dim, p->hidden, p->layers,
                p->heads, p->kv_heads, p->vocab, p->seq, p->unshared ? "unshared" : "shared", p->shape_of);
    }
    return 2;
}

static const Preset *find_preset(const char *name) {
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(name, presets[i].name) == 0) return &presets[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    Preset m = {0};
    int numbers[7], n_numbers = 0, have_preset = 0, unshared = 0;
    uint64_t seed = 1;
    for (int i = 2; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--unshared") == 0) {
            unshared = 1;
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], &end, 10);
            if (*end) return usage();
        } else if (i == 2 && find_preset(argv[i])) {
            m = *find_preset(argv[i]);
            have_preset = 1;
        } else if (!have_preset && n_numbers < 7) {
            long v = strtol(argv[i], &end, 10);
            if (*end || v <= 0 || v > (1L << 30)) return usage();
            numbers[n_numbers++] = (int)v;
        } else {
            return usage();
        }
    }
    if (!have_preset) {
        if (n_numbers != 7) return usage();
        m = (Preset){"", numbers[0], numbers[1], numbers[2], numbers[3], numbers[4], numbers[5], numbers[6], unshared,
                     ""};
    } else if (unshared) {
        m.unshared = 1;
    }
    if (m.dim % m.heads || m.heads % m.kv_heads || (m.dim / m.heads) % 2) {
        fprintf(stderr, "mkmodel: dim %d, %d heads, %d kv heads: heads must divide dim (into an even head size) "
                        "and kv heads must divide heads\n", m.dim, m.heads, m.kv_heads);
        return 2;
    }

    rng_state = 0x9E3779B97F4A7C15ULL ^ (seed * 0xD1B54A32D192ED03ULL);
    if (rng_state == 0) rng_state = 1; // xorshift's one fixed point
    FILE *f = fopen(argv[1], "wb");
    if (!f) { perror(argv[1]); return 1; }
    int32_t header[7] = {m.dim, m.hidden, m.layers, m.heads, m.kv_heads, m.unshared ? -m.vocab : m.vocab, m.seq};
    size_t dim = (size_t)m.dim, hidden = (size_t)m.hidden, layers = (size_t)m.layers, vocab = (size_t)m.vocab;
    size_t head_size = dim / (size_t)m.heads, kv_dim = head_size * (size_t)m.kv_heads;
    float a = weight_scale(m.dim), b = weight_scale(m.hidden);
    int bad = fwrite(header, sizeof header, 1, f) != 1;
    bad |= write_tensor(f, vocab * dim, 0.5f, 0.0f);             // token embedding
    bad |= write_tensor(f, layers * dim, 0.25f, 1.0f);           // rms_att: norm weights near 1
    bad |= write_tensor(f, layers * dim * dim, a, 0.0f);         // wq
    bad |= write_tensor(f, layers * kv_dim * dim, a, 0.0f);      // wk
    bad |= write_tensor(f, layers * kv_dim * dim, a, 0.0f);      // wv
    bad |= write_tensor(f, layers * dim * dim, a, 0.0f);         // wo
    bad |= write_tensor(f, layers * dim, 0.25f, 1.0f);           // rms_ffn
    bad |= write_tensor(f, layers * hidden * dim, a, 0.0f);      // w1
    bad |= write_tensor(f, layers * dim * hidden, b, 0.0f);      // w2
    bad |= write_tensor(f, layers * hidden * dim, a, 0.0f);      // w3
    bad |= write_tensor(f, dim, 0.25f, 1.0f);                    // rms_final
    bad |= write_tensor(f, (size_t)m.seq * head_size, 0.0f, 0.0f); // the legacy RoPE tables
    if (m.unshared) bad |= write_tensor(f, vocab * dim, a, 0.0f); // wcls
    if (fclose(f) != 0) bad = 1;
    if (bad) {
        perror("mkmodel: write");
        remove(argv[1]);
        return 1;
    }
    return 0;
}
