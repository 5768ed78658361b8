/* mkseeds: writes the fuzzers' seed corpus, fuzz/corpus/NAME/ (`make
   fuzz-corpus` runs it). Every seed is small, valid input built from the
   file formats as the README describes them; none of run.c is used here.

     mkseeds CORPUS_DIR TINY_V0 GQA_V0

   TINY_V0 and GQA_V0 are tiny llama2.c version 0 checkpoints made by
   tools/mkmodel (shared and unshared classifier); they are copied
   as seeds and converted to the RUNC format in every weight type. The GGUF
   models, tokenizers, texts and command lines are generated here. The same
   arguments always give the same bytes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *corpus;

static void die(const char *what) {
    fprintf(stderr, "mkseeds: %s\n", what);
    exit(1);
}

/* ---- byte buffers, little-endian ---- */

typedef struct { unsigned char *p; size_t n, cap; } Buf;

static void put(Buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) die("out of memory");
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_u8(Buf *b, unsigned v) { unsigned char c = (unsigned char)v; put(b, &c, 1); }
static void put_u16(Buf *b, unsigned v) { put_u8(b, v & 0xFF); put_u8(b, v >> 8 & 0xFF); }
static void put_u32(Buf *b, uint32_t v) { put_u16(b, v & 0xFFFF); put_u16(b, v >> 16); }
static void put_u64(Buf *b, uint64_t v) { put_u32(b, (uint32_t)v); put_u32(b, (uint32_t)(v >> 32)); }
static void put_f32(Buf *b, float f) { uint32_t u; memcpy(&u, &f, 4); put_u32(b, u); }
static void pad_to(Buf *b, size_t align) { while (b->n % align) put_u8(b, 0); }

static void save(const char *target, const char *name, const void *data, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", corpus, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) die(path);
}

static Buf load(const char *path) {
    Buf b = {0};
    FILE *f = fopen(path, "rb");
    if (!f) die(path);
    unsigned char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) put(&b, chunk, n);
    fclose(f);
    return b;
}

/* ---- number formats ---- */

static uint16_t f32_to_f16(float f) { // round to nearest even; the values here are small and normal
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = x >> 16 & 0x8000;
    int exp = (int)(x >> 23 & 0xFF) - 127 + 15;
    uint32_t mant = x & 0x7FFFFF;
    if ((x & 0x7FFFFFFF) == 0) return (uint16_t)sign;
    if (exp <= 0) { // subnormal half
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000;
        int shift = 14 - exp;
        uint32_t half = mant >> shift, rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    if (exp >= 31) return (uint16_t)(sign | 0x7C00);
    uint32_t half = (uint32_t)exp << 10 | mant >> 13, rest = mant & 0x1FFF;
    if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) half++; // may carry into the exponent: still right
    return (uint16_t)(sign | half);
}

static uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)((x + 0x7FFF + (x >> 16 & 1)) >> 16);
}

enum { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, BF16 = 30 };

// One row of cols floats in a weight type; quantized rows end in a whole
// block of 32 (zero-padded).
static void put_row(Buf *b, const float *x, int cols, int type) {
    if (type == F32) { for (int j = 0; j < cols; j++) put_f32(b, x[j]); return; }
    if (type == F16) { for (int j = 0; j < cols; j++) put_u16(b, f32_to_f16(x[j])); return; }
    if (type == BF16) { for (int j = 0; j < cols; j++) put_u16(b, f32_to_bf16(x[j])); return; }
    for (int start = 0; start < cols; start += 32) {
        float v[32] = {0}, amax = 0.0f;
        for (int k = 0; k < 32 && start + k < cols; k++) v[k] = x[start + k];
        for (int k = 0; k < 32; k++) if (fabsf(v[k]) > amax) amax = fabsf(v[k]);
        float scale = amax / (type == Q8_0 ? 127.0f : 7.0f);
        put_u16(b, f32_to_f16(scale));
        int q[32];
        for (int k = 0; k < 32; k++) {
            q[k] = scale > 0 ? (int)lrintf(v[k] / scale) : 0;
            if (type == Q4_0) q[k] = (q[k] < -8 ? -8 : q[k] > 7 ? 7 : q[k]) + 8;
        }
        if (type == Q8_0) for (int k = 0; k < 32; k++) put_u8(b, (unsigned)(q[k] & 0xFF));
        else for (int k = 0; k < 16; k++) put_u8(b, (unsigned)(q[k] | q[k + 16] << 4));
    }
}

static void put_matrix(Buf *b, const float *x, int rows, int cols, int type) {
    for (int i = 0; i < rows; i++) put_row(b, x + (size_t)i * cols, cols, type);
}

static uint64_t rng = 0x853C49E6748FEA9Bull;

static float uniform(void) { // [-0.5, 0.5)
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f - 0.5f;
}

static float *random_floats(size_t n, float offset) {
    float *x = malloc(n * sizeof(float) + 1);
    if (!x) die("out of memory");
    for (size_t i = 0; i < n; i++) x[i] = offset + uniform();
    return x;
}

/* ---- RUNC (version 1) from a version 0 file ---- */

typedef struct { int dim, hidden, layers, heads, kv_heads, vocab, seq, shared; } Shape;

// Converts a version 0 checkpoint into run.c's format (README, "The run.c
// checkpoint format"), with the matrices in the given type.
static Buf runc_from_v0(const Buf *v0, int type) {
    const unsigned char *h = v0->p;
    int32_t c[7];
    for (int i = 0; i < 7; i++) c[i] = (int32_t)(h[4 * i] | h[4 * i + 1] << 8 | h[4 * i + 2] << 16 | (uint32_t)h[4 * i + 3] << 24);
    Shape s = {c[0], c[1], c[2], c[3], c[4], abs(c[5]), c[6], c[5] > 0};
    int hs = s.dim / s.heads, kvd = s.kv_heads * hs, L = s.layers, D = s.dim, H = s.hidden, V = s.vocab;
    const float *f = (const float *)(v0->p + 28); // the seeds are little-endian hosts' files
    const float *emb = f;
    const float *rms_att = emb + (size_t)V * D, *wq = rms_att + (size_t)L * D, *wk = wq + (size_t)L * D * D;
    const float *wv = wk + (size_t)L * kvd * D, *wo = wv + (size_t)L * kvd * D, *rms_ffn = wo + (size_t)L * D * D;
    const float *w1 = rms_ffn + (size_t)L * D, *w2 = w1 + (size_t)L * H * D, *w3 = w2 + (size_t)L * D * H;
    const float *rms_final = w3 + (size_t)L * H * D, *wcls = rms_final + D + (size_t)s.seq * hs;
    if ((size_t)((const unsigned char *)(s.shared ? wcls : wcls + (size_t)V * D) - v0->p) != v0->n)
        die("a version 0 seed does not have the size its header describes");
    Buf b = {0};
    int32_t header[16] = {0x434E5552, 1, D, H, L, s.heads, s.kv_heads, V, s.seq, hs, 0, 0, s.shared, 1, 2, type};
    float theta = 10000.0f, eps = 1e-5f;
    memcpy(&header[10], &theta, 4);
    memcpy(&header[11], &eps, 4);
    for (int i = 0; i < 16; i++) put_u32(&b, (uint32_t)header[i]);
    pad_to(&b, 256);
    struct { const float *x; int rows, cols, type; } t[] = {
        {rms_att, L, D, F32}, {rms_ffn, L, D, F32}, {rms_final, 1, D, F32}, {emb, V, D, type},
        {wq, L * D, D, type}, {wk, L * kvd, D, type}, {wv, L * kvd, D, type}, {wo, L * D, D, type},
        {w1, L * H, D, type}, {w2, L * D, H, type}, {w3, L * H, D, type}, {wcls, V, D, type},
    };
    for (int i = 0; i < (s.shared ? 11 : 12); i++) {
        pad_to(&b, 64);
        put_matrix(&b, t[i].x, t[i].rows, t[i].cols, t[i].type);
    }
    return b;
}

/* ---- a 32-token SentencePiece vocabulary ---- */

#define SP "\xE2\x96\x81" // U+2581, SentencePiece's space
static const struct { const char *piece; int type; } vocab[] = {
    {"<unk>", 2}, {"<s>", 3}, {"</s>", 3},
    {"<0x00>", 6}, {"<0x0A>", 6}, {"<0x20>", 6}, {"<0x41>", 6}, {"<0xC3>", 6}, {"<0xFF>", 6},
    {SP, 1}, {"e", 1}, {"l", 1}, {"o", 1}, {"H", 1}, {"w", 1}, {"r", 1}, {"d", 1},
    {"ll", 1}, {"He", 1}, {"llo", 1}, {"Hello", 1}, {SP "w", 1}, {"or", 1}, {SP "world", 1},
    {"\xC3\xA9", 1}, {SP SP, 1}, {"a", 1}, {"b", 1}, {"ab", 1}, {"<|im|>", 4}, {"zz", 5}, {"ld", 1},
};
#define VOCAB 32

static float vocab_score(int i) { return vocab[i].type == 1 ? -(float)i : 0.0f; }

// The piece as tokenizer.bin spells it: U+2581 as a space, BOS and EOS as llama2.c writes them.
static size_t bin_piece(int i, char *out) {
    if (i == 1) return (size_t)sprintf(out, "\n<s>\n");
    if (i == 2) return (size_t)sprintf(out, "\n</s>\n");
    size_t n = 0;
    for (const char *p = vocab[i].piece; *p;) {
        if (!strncmp(p, SP, 3)) { out[n++] = ' '; p += 3; }
        else out[n++] = *p++;
    }
    return n;
}

static Buf tokenizer_bin(void) {
    Buf b = {0};
    put_u32(&b, 8); // max_token_length
    for (int i = 0; i < VOCAB; i++) {
        char piece[64];
        size_t n = bin_piece(i, piece);
        put_f32(&b, vocab_score(i));
        put_u32(&b, (uint32_t)n);
        put(&b, piece, n);
    }
    return b;
}

/* ---- GGUF (version 3) ---- */

enum { G_U8, G_I8, G_U16, G_I16, G_U32, G_I32, G_F32, G_BOOL, G_STRING, G_ARRAY, G_U64, G_I64, G_F64 };

typedef struct {
    Buf kv, info, data;
    uint64_t n_kv, n_tensors;
    uint32_t alignment;
} Gguf;

static void g_str(Buf *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }
static void g_key(Gguf *g, const char *key, uint32_t type) { g_str(&g->kv, key); put_u32(&g->kv, type); g->n_kv++; }
static void kv_u32(Gguf *g, const char *key, uint32_t v) { g_key(g, key, G_U32); put_u32(&g->kv, v); }
static void kv_f32(Gguf *g, const char *key, float v) { g_key(g, key, G_F32); put_f32(&g->kv, v); }
static void kv_bool(Gguf *g, const char *key, int v) { g_key(g, key, G_BOOL); put_u8(&g->kv, (unsigned)v); }
static void kv_str(Gguf *g, const char *key, const char *v) { g_key(g, key, G_STRING); g_str(&g->kv, v); }

// The tokenizer.ggml.* keys: tokens, scores, and the token types as
// elem_type (G_I32 or G_U32), or none when elem_type is -1.
static void kv_vocab(Gguf *g, int elem_type) {
    kv_str(g, "tokenizer.ggml.model", "llama");
    g_key(g, "tokenizer.ggml.tokens", G_ARRAY);
    put_u32(&g->kv, G_STRING);
    put_u64(&g->kv, VOCAB);
    for (int i = 0; i < VOCAB; i++) g_str(&g->kv, vocab[i].piece);
    g_key(g, "tokenizer.ggml.scores", G_ARRAY);
    put_u32(&g->kv, G_F32);
    put_u64(&g->kv, VOCAB);
    for (int i = 0; i < VOCAB; i++) put_f32(&g->kv, vocab_score(i));
    if (elem_type >= 0) {
        g_key(g, "tokenizer.ggml.token_type", G_ARRAY);
        put_u32(&g->kv, (uint32_t)elem_type);
        put_u64(&g->kv, VOCAB);
        for (int i = 0; i < VOCAB; i++) put_u32(&g->kv, (uint32_t)vocab[i].type);
    }
    kv_u32(g, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(g, "tokenizer.ggml.eos_token_id", 2);
}

// A tensor of random values (norms near 1), rows x cols (GGML's ne = {cols, rows}).
static void g_tensor(Gguf *g, const char *name, int rows, int cols, int type) {
    pad_to(&g->data, g->alignment);
    g_str(&g->info, name);
    put_u32(&g->info, rows > 1 ? 2 : 1);
    put_u64(&g->info, (uint64_t)cols);
    if (rows > 1) put_u64(&g->info, (uint64_t)rows);
    put_u32(&g->info, (uint32_t)type);
    put_u64(&g->info, g->data.n);
    float *x = random_floats((size_t)rows * cols, rows == 1 ? 1.0f : 0.0f);
    put_matrix(&g->data, x, rows, cols, type);
    free(x);
    g->n_tensors++;
}

static Buf g_finish(Gguf *g) {
    Buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, g->n_tensors);
    put_u64(&b, g->n_kv);
    put(&b, g->kv.p, g->kv.n);
    put(&b, g->info.p, g->info.n);
    if (g->n_tensors > 0) {
        pad_to(&b, g->alignment);
        put(&b, g->data.p, g->data.n);
    }
    free(g->kv.p); free(g->info.p); free(g->data.p);
    return b;
}

// A llama model's shape and tensor types: emb for token_embd, mat for the
// attention and gate/up matrices, down[l] for layer l's ffn_down (at most
// two layers), output for the classifier (-1: tied to the embedding).
typedef struct { int dim, hidden, layers, heads, kv_heads, ctx; int emb, mat, down[2], output; } GgufShape;

static void g_model(Gguf *g, const GgufShape *s, float theta, float eps) {
    kv_str(g, "general.architecture", "llama");
    kv_str(g, "general.name", "mkseeds");
    kv_u32(g, "llama.context_length", (uint32_t)s->ctx);
    kv_u32(g, "llama.embedding_length", (uint32_t)s->dim);
    kv_u32(g, "llama.block_count", (uint32_t)s->layers);
    kv_u32(g, "llama.feed_forward_length", (uint32_t)s->hidden);
    kv_u32(g, "llama.attention.head_count", (uint32_t)s->heads);
    kv_u32(g, "llama.attention.head_count_kv", (uint32_t)s->kv_heads);
    kv_u32(g, "llama.rope.dimension_count", (uint32_t)(s->dim / s->heads));
    kv_f32(g, "llama.rope.freq_base", theta);
    kv_f32(g, "llama.attention.layer_norm_rms_epsilon", eps);
}

static void g_weights(Gguf *g, const GgufShape *s, int vocab_size) {
    int kvd = s->kv_heads * (s->dim / s->heads);
    char name[64];
    g_tensor(g, "token_embd.weight", vocab_size, s->dim, s->emb);
    for (int l = 0; l < s->layers; l++) {
        struct { const char *suffix; int rows, cols, type; } t[] = {
            {"attn_norm", 1, s->dim, F32}, {"attn_q", s->dim, s->dim, s->mat}, {"attn_k", kvd, s->dim, s->mat},
            {"attn_v", kvd, s->dim, s->mat}, {"attn_output", s->dim, s->dim, s->mat}, {"ffn_norm", 1, s->dim, F32},
            {"ffn_gate", s->hidden, s->dim, s->mat}, {"ffn_up", s->hidden, s->dim, s->mat},
            {"ffn_down", s->dim, s->hidden, s->down[l]},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, t[i].suffix);
            g_tensor(g, name, t[i].rows, t[i].cols, t[i].type);
        }
    }
    g_tensor(g, "output_norm.weight", 1, s->dim, F32);
    if (s->output >= 0) g_tensor(g, "output.weight", vocab_size, s->dim, s->output);
}

static void save_buf(const char *target, const char *name, Buf b) {
    save(target, name, b.p, b.n);
    free(b.p);
}

// fuzz_quantize: a --dtype byte (0 f32, 1 f16, 2 q8_0, 3 q4_0; bit 2 set:
// GGUF output for a GGUF input), then the checkpoint.
static void save_quantize(const char *name, int dtype, const Buf *model) {
    Buf b = {0};
    put_u8(&b, (unsigned)dtype);
    put(&b, model->p, model->n);
    save_buf("quantize", name, b);
}

static void gguf_seeds(void) {
    // F32, tied classifier, full vocabulary with I32 token types and a chat template.
    Gguf g = {.alignment = 32};
    GgufShape a = {8, 16, 1, 2, 1, 16, F32, F32, {F32, F32}, -1};
    g_model(&g, &a, 10000.0f, 1e-5f);
    kv_u32(&g, "general.alignment", 32);
    kv_vocab(&g, G_I32);
    kv_bool(&g, "tokenizer.ggml.add_bos_token", 1);
    kv_str(&g, "tokenizer.chat_template", "{% for m in messages %}[INST] {{ m }} [/INST]{% endfor %}");
    g_weights(&g, &a, VOCAB);
    save_buf("gguf", "f32.gguf", g_finish(&g));

    // Two layers in mixed types: BF16 embedding, F16 matrices, ffn_down in
    // Q8_0 and Q4_0 (its rows are hidden = 32 long), an F16 classifier;
    // alignment 64, U32 token types, no BOS, no space prefix.
    g = (Gguf){.alignment = 64};
    GgufShape b = {8, 32, 2, 2, 2, 32, BF16, F16, {Q8_0, Q4_0}, F16};
    g_model(&g, &b, 500000.0f, 1e-6f);
    kv_u32(&g, "general.alignment", 64);
    kv_vocab(&g, G_U32);
    kv_bool(&g, "tokenizer.ggml.add_bos_token", 0);
    kv_bool(&g, "tokenizer.ggml.add_space_prefix", 0);
    g_weights(&g, &b, VOCAB);
    Buf mixed = g_finish(&g);
    save_quantize("mixed.gguf-to-q4_0", 3, &mixed);
    save_quantize("mixed.gguf-to-gguf-q8_0", 4 | 2, &mixed);
    save_buf("gguf", "mixed.gguf", mixed);

    // dim 32, all quantized (Q4_0, ffn_down Q8_0), 4 heads over one kv head, no token types.
    g = (Gguf){.alignment = 32};
    GgufShape c = {32, 32, 1, 4, 1, 8, Q4_0, Q4_0, {Q8_0, Q8_0}, -1};
    g_model(&g, &c, 10000.0f, 1e-5f);
    kv_vocab(&g, -1);
    g_weights(&g, &c, VOCAB);
    save_buf("gguf", "quantized.gguf", g_finish(&g));

    // Vocabulary only (as llama.cpp's ggml-vocab-*.gguf files), for -z.
    g = (Gguf){.alignment = 32};
    kv_str(&g, "general.architecture", "llama");
    kv_vocab(&g, G_I32);
    Buf vocab_only = g_finish(&g);
    Buf seed = {0};
    put_u16(&seed, VOCAB - 1); // fuzz_tokenizer_file: vocab_size - 1, then the file
    put(&seed, vocab_only.p, vocab_only.n);
    save_buf("tokenizer_file", "vocab.gguf", seed);
    save_buf("gguf", "vocab-only.gguf", vocab_only);
}

// A 3-D tensor of n experts' (rows, cols) matrices, F32.
static void g_tensor_3d(Gguf *g, const char *name, int n, int rows, int cols) {
    pad_to(&g->data, g->alignment);
    g_str(&g->info, name);
    put_u32(&g->info, 3);
    put_u64(&g->info, (uint64_t)cols);
    put_u64(&g->info, (uint64_t)rows);
    put_u64(&g->info, (uint64_t)n);
    put_u32(&g->info, F32);
    put_u64(&g->info, g->data.n);
    float *x = random_floats((size_t)n * rows * cols, 0.0f);
    put_matrix(&g->data, x, n * rows, cols, F32);
    free(x);
    g->n_tensors++;
}

// ARCH.suffix into key.
static const char *arch_key(char *key, const char *arch, const char *suffix) {
    sprintf(key, "%s.%s", arch, suffix);
    return key;
}

// The keys every architecture has: dim 8, heads of 8 (key_length), ctx 16.
static void g_arch(Gguf *g, const char *arch, int layers, int heads, int kv_heads, int hidden) {
    char key[96];
    kv_str(g, "general.architecture", arch);
    kv_u32(g, arch_key(key, arch, "context_length"), 16);
    kv_u32(g, arch_key(key, arch, "embedding_length"), 8);
    kv_u32(g, arch_key(key, arch, "block_count"), (uint32_t)layers);
    kv_u32(g, arch_key(key, arch, "feed_forward_length"), (uint32_t)hidden);
    kv_u32(g, arch_key(key, arch, "attention.head_count"), (uint32_t)heads);
    kv_u32(g, arch_key(key, arch, "attention.head_count_kv"), (uint32_t)kv_heads);
    kv_u32(g, arch_key(key, arch, "attention.key_length"), 8);
    kv_u32(g, arch_key(key, arch, "attention.value_length"), 8);
    kv_f32(g, arch_key(key, arch, "attention.layer_norm_rms_epsilon"), 1e-6f);
    kv_vocab(g, G_I32);
}

// Gemma 3 (sliding windows on two layers of three, q/k norms, post-norms,
// a logit soft cap) and gpt-oss (sinks, biases, experts, YaRN) at a
// fuzzer's size, so that the fuzzer mutates their keys and tensors.
static void arch_seeds(void) {
    char name[64];
    Gguf g = {.alignment = 32};
    g_arch(&g, "gemma3", 3, 2, 1, 16);
    kv_u32(&g, "gemma3.attention.sliding_window", 4);
    kv_u32(&g, "gemma3.attention.sliding_window_pattern", 3);
    kv_f32(&g, "gemma3.rope.freq_base", 1e6f);
    kv_f32(&g, "gemma3.rope.freq_base_swa", 1e4f);
    kv_f32(&g, "gemma3.final_logit_softcapping", 30.0f);
    kv_bool(&g, "tokenizer.ggml.add_space_prefix", 0);
    g_tensor(&g, "token_embd.weight", VOCAB, 8, F32);
    for (int l = 0; l < 3; l++) {
        struct { const char *suffix; int rows, cols; } t[] = {
            {"attn_norm", 1, 8}, {"attn_q", 16, 8}, {"attn_k", 8, 8}, {"attn_v", 8, 8}, {"attn_output", 8, 16},
            {"attn_q_norm", 1, 8}, {"attn_k_norm", 1, 8}, {"post_attention_norm", 1, 8}, {"ffn_norm", 1, 8},
            {"ffn_gate", 16, 8}, {"ffn_up", 16, 8}, {"ffn_down", 8, 16}, {"post_ffw_norm", 1, 8},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, t[i].suffix);
            g_tensor(&g, name, t[i].rows, t[i].cols, F32);
        }
    }
    g_tensor(&g, "output_norm.weight", 1, 8, F32);
    save_buf("gguf", "gemma3.gguf", g_finish(&g));

    g = (Gguf){.alignment = 32};
    g_arch(&g, "gpt-oss", 2, 2, 1, 16);
    kv_u32(&g, "gpt-oss.expert_count", 4);
    kv_u32(&g, "gpt-oss.expert_used_count", 2);
    kv_u32(&g, "gpt-oss.expert_feed_forward_length", 8);
    kv_u32(&g, "gpt-oss.attention.sliding_window", 4);
    kv_f32(&g, "gpt-oss.rope.freq_base", 150000.0f);
    kv_str(&g, "gpt-oss.rope.scaling.type", "yarn");
    kv_f32(&g, "gpt-oss.rope.scaling.factor", 4.0f);
    kv_u32(&g, "gpt-oss.rope.scaling.original_context_length", 8);
    g_tensor(&g, "token_embd.weight", VOCAB, 8, F32);
    for (int l = 0; l < 2; l++) {
        struct { const char *suffix; int rows, cols; } t[] = {
            {"attn_norm.weight", 1, 8}, {"attn_q.weight", 16, 8}, {"attn_k.weight", 8, 8}, {"attn_v.weight", 8, 8},
            {"attn_output.weight", 8, 16}, {"attn_q.bias", 1, 16}, {"attn_k.bias", 1, 8}, {"attn_v.bias", 1, 8},
            {"attn_output.bias", 1, 8}, {"attn_sinks.weight", 1, 2}, {"post_attention_norm.weight", 1, 8},
            {"ffn_gate_inp.weight", 4, 8}, {"ffn_gate_inp.bias", 1, 4}, {"ffn_gate_exps.bias", 4, 8},
            {"ffn_up_exps.bias", 4, 8}, {"ffn_down_exps.bias", 4, 8},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            snprintf(name, sizeof name, "blk.%d.%s", l, t[i].suffix);
            g_tensor(&g, name, t[i].rows, t[i].cols, F32);
        }
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
        g_tensor_3d(&g, name, 4, 8, 8);
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
        g_tensor_3d(&g, name, 4, 8, 8);
        snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
        g_tensor_3d(&g, name, 4, 8, 8);
    }
    g_tensor(&g, "output_norm.weight", 1, 8, F32);
    g_tensor(&g, "output.weight", VOCAB, 8, F32);
    save_buf("gguf", "gpt-oss.gguf", g_finish(&g));
}

/* ---- texts and command lines ---- */

// A seed of a text target: a flag byte, then the text.
typedef struct { const char *name; unsigned char flags; const char *text; size_t len; } TextSeed;

static void save_text_seeds(const char *target, const TextSeed *seeds, size_t n) {
    for (size_t i = 0; i < n; i++) {
        Buf b = {0};
        put_u8(&b, seeds[i].flags);
        put(&b, seeds[i].text, seeds[i].len);
        save_buf(target, seeds[i].name, b);
    }
}

static void text_seeds(void) {
    static const TextSeed texts[] = {
#define T(name, flags, s) {name, flags, s, sizeof s - 1}
        T("llama2-bos.txt", 3, "Hello, world! caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 1234"),
        T("tok512-bos-eos.txt", 6, "  Once upon  a time,\tthere was a   dog.  \n"),
        T("llama2-hostile.txt", 1, "\xFF\xFE bad \xC3 \x00 nul \xE2\x96\x81sym \xED\xA0\x80 \xF4\x90\x80\x80"),
        T("tok512-bytes.txt", 0, "\r\n\x01\x7F <s></s><unk><0x41> \xEF\xBB\xBF"),
    };
    save_text_seeds("encode", texts, sizeof texts / sizeof texts[0]);
    // fuzz_bpe: the same flag byte (bit 0: Qwen's vocabulary, else Llama 3's; bits 3-4: another
    // pre-tokenizer: 1 GPT-2, 2 smollm, 3 Llama 3's for Qwen and Qwen 2's for Llama 3), then the text
    static const TextSeed bpe[] = {
        T("llama3-ascii.txt", 2, "Hello, world! The quick brown fox jumps over the lazy dog."),
        T("qwen-cjk.txt", 1, "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x82 "
                             "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xA8\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4"),
        T("llama3-emoji.txt", 0, "\xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D"
                                 "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 \xE2\x9D\xA4\xEF\xB8\x8F"),
        T("qwen-numbers.txt", 7, "3.14159 1,000,000 12345678901234567890 \xD9\xA3\xD9\xA4 \xE2\x85\xA7 x2=4"),
        T("llama3-numbers.txt", 4, "3.14159 1,000,000 12345678901234567890 \xD9\xA3\xD9\xA4 \xE2\x85\xA7 x2=4"),
        T("llama3-contractions.txt", 0, "I'm sure you'll see it's what they've done; I'D SAY WE'RE 'RE' o'\xC5\xBFt"),
        T("qwen-whitespace.txt", 1, "  a\t\tb   \n\n\r\n  c \xC2\xA0\xE3\x80\x80" "d     \n   "),
        T("llama3-special.txt", 6, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nhi<|eot_id|>"
                                   "<|end_of_text|><|reserved_special_token_0|>"),
        T("qwen-special.txt", 3, "<|im_start|>user\nhi<|im_end|>\n<|endoftext|><think>x</think><tool_call>"),
        T("gpt2-pre-mixed.txt", 8, "It's 2024: don't  stop   \xE2\x80\x94 caf\xC3\xA9 x123y \n\n  'LL 'll"),
        T("smollm-pre-digits.txt", 17, "v1.2.3 ab12cd 007 \xD9\xA3\xD9\xA4x  9 "),
        T("swapped-pre.txt", 25, "The year 12345 and 67 \r\n\r\n  tabs\t\there 's"),
        T("llama3-bytes.txt", 0, "\xFF\xFE bad \xC3 \x00 nul \xED\xA0\x80 \xF4\x90\x80\x80 \xE2\x82 's"),
    };
    save_text_seeds("bpe", bpe, sizeof bpe / sizeof bpe[0]);
#undef T
    static const struct { const char *name; const char *args; size_t len; } lines[] = {
#define A(name, s) {name, s, sizeof s - 1}
        A("generate", "model.bin\0-t\0" "0.8\0-p\0" "0.9\0-n\0" "256\0-i\0Once upon a time\0-s\0" "42"),
        A("chat", "m.gguf\0-m\0chat\0-y\0Be brief.\0-k\0" "40\0--min-p\0" "0.05\0--repeat-penalty\0" "1.1\0"
                  "--repeat-last-n\0" "64\0-c\0" "128"),
        A("logits", "m.bin\0-m\0logits\0-f\0ids.txt\0-o\0out.f32\0--trace\0t.txt\0-z\0tok.bin"),
        A("bad", "m.bin\0-t\0nan\0-n\0-1\0-s\0-3\0-p\0" "1e999\0-x"),
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) save("args", lines[i].name, lines[i].args, lines[i].len);
    // fuzz_output: a piece-length byte, then what decode() might print
    static const struct { const char *name; const char *bytes; size_t len; } outputs[] = {
        A("text", "\x03Once upon a time,\tthere was\r\na caf\xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x98\x80."),
        A("hostile", "\x00\x1B[31mred\x1B[0m \x07\x7F \xC2\xA0 \xE0\x80\x80 \xED\xA0\x80 \xF4\x90 \xC3"),
#undef A
    };
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
        save("output", outputs[i].name, outputs[i].bytes, outputs[i].len);
}

// fuzz_sampler: 8 parameter bytes, then float32 logits.
static void sampler_seeds(void) {
    static const struct { const char *name; unsigned char params[8]; } seeds[] = {
        {"greedy", {0, 255, 0, 0, 0, 64, 1, 0}},
        {"t1-p0.9", {3, 230, 0, 0, 0, 64, 2, 0}},
        {"topk-minp-penalty", {2, 255, 167, 134, 130, 16, 3, 0}},
        {"t100-p0", {255, 0, 0, 0, 0, 0, 4, 0}},
    };
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        Buf b = {0};
        put(&b, seeds[i].params, 8);
        for (int k = 0; k < 16; k++) put_f32(&b, 8.0f * uniform());
        save_buf("sampler", seeds[i].name, b);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) die("usage: mkseeds CORPUS_DIR TINY_V0 GQA_V0");
    corpus = argv[1];
    Buf tiny = load(argv[2]), gqa = load(argv[3]);
    save("checkpoint", "v0-tiny.bin", tiny.p, tiny.n);
    save("checkpoint", "v0-gqa-unshared.bin", gqa.p, gqa.n);
    save_quantize("v0-tiny-to-q8_0", 2, &tiny);
    save_quantize("v0-gqa-unshared-to-f16", 1, &gqa);
    Buf q8 = runc_from_v0(&tiny, Q8_0);
    save_quantize("runc-q8_0-to-f32", 0, &q8);
    save_buf("checkpoint", "runc-q8_0.bin", q8);
    save_buf("checkpoint", "runc-f32.bin", runc_from_v0(&tiny, F32));
    save_buf("checkpoint", "runc-bf16.bin", runc_from_v0(&tiny, BF16));
    save_buf("checkpoint", "runc-f16-unshared.bin", runc_from_v0(&gqa, F16));
    save_buf("checkpoint", "runc-q4_0-unshared.bin", runc_from_v0(&gqa, Q4_0));
    free(tiny.p);
    free(gqa.p);

    Buf tok = tokenizer_bin(), seed = {0};
    put_u16(&seed, VOCAB - 1);
    put(&seed, tok.p, tok.n);
    save_buf("tokenizer_file", "tokenizer.bin", seed);
    free(tok.p);
    gguf_seeds();
    text_seeds();
    sampler_seeds();
    arch_seeds(); // last: the seeds before keep their random numbers
    return 0;
}
