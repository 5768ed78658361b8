/* run.c: inference for Llama-family transformers in one C file.

   It memory-maps a checkpoint (llama2.c "version 0", this project's own
   versioned format, or GGUF), encodes text with a SentencePiece-exact BPE
   tokenizer or a byte-level BPE one (Llama 3, Qwen 2), runs the transformer
   forward pass over a key/value cache (prompts in blocks of positions,
   generation one position at a time), and samples the next token.

   Reading order. Part 1, the engine, is a complete plain-C inference engine
   to be read in one sitting:
     structs; the math (rmsnorm, softmax, RoPE, the plain matrix product);
     forward and forward_batch; the tokenizers (SentencePiece, byte-level
     BPE); the sampler; text output; the loops (generate, tokenize, logits,
     chat in the model's own template).
   Part 2, the engine room, makes it fast and lets it read real files:
     capabilities (which SIMD this build has); number formats; weight types
     (one table, their blocks and kernels); float SIMD kernels; packed
     integer kernels; the matrix-product dispatch; file formats (llama2.c
     v0, RUNC, GGUF, tokenizer files) and loading; quantize; bench; the
     command line and main. Last, the Unicode tables the byte-level
     pre-tokenizers use (generated data, tools/gen_unicode.py).

   Build: make            (optimized for this machine, OpenMP if available)
          make portable   (runs on any x86-64 / ARM64 machine) */

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L // mmap, getline, strdup, sigaction, clock_gettime
#endif
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE // madvise
#endif
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h> // strcasecmp
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ----------------------------------------------------------------------------
   Errors. Loaders and parsers do not exit: they write one line into
   error_message ("FILE: problem") and return -1, so main can print it and
   the tests (and fuzzers) can check it. */

static char error_message[1024];

#define RUN_VERSION "2026.11"

static int fail(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(error_message, sizeof error_message, format, args);
    va_end(args);
    return -1;
}

/* ============================================================================
   PART 1: THE ENGINE
   ============================================================================ */

/* ----------------------------------------------------------------------------
   Structs. The model's shape (Config), its weights (TransformerWeights: views
   into the mapped file), and the activations and KV cache of a run
   (RunState). */

// GGML's type ids, so that our format and GGUF name weight types alike. The
// weight types section (engine room) has one table row for each type run.c
// computes with.
enum { TYPE_F32 = 0, TYPE_F16 = 1, TYPE_Q4_0 = 2, TYPE_Q4_1 = 3, TYPE_Q5_0 = 6, TYPE_Q5_1 = 7, TYPE_Q8_0 = 8,
       TYPE_Q8_1 = 9, TYPE_Q2_K = 10, TYPE_Q3_K = 11, TYPE_Q4_K = 12, TYPE_Q5_K = 13, TYPE_Q6_K = 14,
       TYPE_Q8_K = 15, TYPE_IQ4_NL = 20, TYPE_IQ4_XS = 23, TYPE_BF16 = 30, TYPE_MXFP4 = 39, TYPE_COUNT = 40 };

typedef struct {
    int dim;               // transformer width
    int hidden_dim;        // feed-forward (SwiGLU) width
    int n_layers;
    int n_heads;           // query heads
    int n_kv_heads;        // key/value heads; n_heads is a multiple of it (GQA/MQA)
    int vocab_size;
    int seq_len;           // context length: positions the KV cache holds
    int head_size;         // dim / n_heads, or the model's own (GGUF's attention.key_length)
    int n_experts;         // experts in each layer's feed-forward, 0 for a dense one
    int n_experts_used;    // experts each position runs (the top k of the router's)
    float rope_theta;      // RoPE base frequency
    float rope_scale;      // positions are multiplied by it (linear scaling: 1 / factor), else 1
    float rope_theta_local; // RoPE base of the sliding-window layers, which have no scaling (gemma3);
                            // 0: they turn as the others do
    int rope_yarn_context; // YaRN scaling (gpt-oss): the context the model was trained at, which sets
                           // the pairs that rope_scale interpolates; 0: no YaRN
    int rope_neox;         // 1: RoPE pairs dimension i with i + head_size/2 (qwen2), 0: 2i with 2i+1
    float norm_eps;        // RMSNorm epsilon
    int shared_classifier; // 1: the classifier reuses token_embedding
    int gate;              // the feed-forward's gate: GATE_SILU (SwiGLU), GATE_GELU (GeGLU, tanh form:
                           // gemma3) or GATE_CLAMPED (gpt-oss's clamped SwiGLU)
    float embed_scale;     // the embedding row is multiplied by it (gemma3: sqrt(dim)); 0: not scaled
    float query_scale;     // attention scores are q.k times it; 0: 1/sqrt(head_size)
    float logit_softcap;   // logits become cap * tanh(logits / cap); 0: none
    int post_norms;        // 1: every layer norms attention's and the feed-forward's outputs (gemma3)
    int window;            // sliding-window layers' span (positions a query sees), 0: no such layers
    int window_period;     // layer l slides when l % period < period - 1 (gemma3: 6, five of six)
    int bos_id, eos_id;
    int weight_type;       // TYPE_F32, ... for the matrices (norms are always F32)
} Config;

enum { GATE_SILU = 0, GATE_GELU, GATE_CLAMPED };

// How a matrix's products are computed, chosen once at load (see the
// dispatch in the engine room).
enum { KERNEL_ROWS = 0, KERNEL_F32, KERNEL_PACKED };

// A weight matrix in the mapped file, row-major (rows, cols): each row is
// type_row_bytes(type, cols) bytes of its weight type's blocks.
typedef struct {
    const void *data;
    int type;                    // TYPE_*
    int rows, cols;
    int kernel;                  // KERNEL_*: KERNEL_ROWS works for any type
    const unsigned char *packed; // KERNEL_PACKED: the same weights interleaved for the
                                 // integer kernels (see pack_groups), else NULL
} Matrix;

typedef struct {
    const float *rms_att; // (dim)
    const float *rms_ffn; // (dim)
    Matrix wq;            // (n_heads*head_size, dim)
    Matrix wk;            // (n_kv_heads*head_size, dim)
    Matrix wv;            // (n_kv_heads*head_size, dim)
    Matrix wo;            // (dim, n_heads*head_size)
    Matrix w1;            // (hidden_dim, dim)   gate
    Matrix w2;            // (dim, hidden_dim)   down
    Matrix w3;            // (hidden_dim, dim)   up
    Matrix router;        // (n_experts, dim) a mixture of experts' scores (ffn_gate_inp); unused when dense
    const Matrix *experts; // (n_experts, 3) each expert's w1, w2, w3 (shapes as the dense ones), or NULL: dense
    const float *router_bias; // (n_experts) added to the router's scores (gpt-oss), or NULL
    const float *expert_b1;   // (n_experts, hidden_dim) biases after each expert's w1 (gpt-oss), or NULL
    const float *expert_b2;   // (n_experts, dim) after w2
    const float *expert_b3;   // (n_experts, hidden_dim) after w3
    const float *bq;      // (n_heads*head_size) biases added after wq, wk, wv (qwen2), or NULL
    const float *bk;      // (n_kv_heads*head_size)
    const float *bv;      // (n_kv_heads*head_size)
    const float *bo;      // (dim) bias added after wo (gpt-oss), or NULL
    const float *sinks;   // (n_heads) each head's sink: a logit in its softmax without a value (gpt-oss), or NULL
    const float *q_norm;  // (head_size) RMSNorm of each query head before RoPE (qwen3), or NULL
    const float *k_norm;  // (head_size) and of each key head
    const float *post_att_norm; // (dim) RMSNorm of attention's output before it joins the residual (gemma3), or NULL
    const float *post_ffn_norm; // (dim) and of the feed-forward's
    int window;           // a sliding-window layer's span: a query sees the last `window` positions; 0: all
} LayerWeights;

/* A layer's matrices as data: the loaders, our format, quantize and the
   kernel choice walk this table, in this order (our format's), instead of
   naming wq .. w3 each time. rows and cols are sizes of the Config. */
enum { SIZE_DIM, SIZE_Q, SIZE_KV, SIZE_HIDDEN };

typedef struct {
    const char *name;  // in messages and our format: "wq"
    const char *gguf;  // GGUF's blk.N.<gguf>.weight
    size_t offset;     // of its Matrix in LayerWeights
    int rows, cols;    // SIZE_*
    int ffn;           // 1: the dense feed-forward's (a mixture of experts has experts instead)
} LayerMatrix;

static const LayerMatrix layer_matrices[] = {
    {"wq", "attn_q", offsetof(LayerWeights, wq), SIZE_Q, SIZE_DIM, 0},
    {"wk", "attn_k", offsetof(LayerWeights, wk), SIZE_KV, SIZE_DIM, 0},
    {"wv", "attn_v", offsetof(LayerWeights, wv), SIZE_KV, SIZE_DIM, 0},
    {"wo", "attn_output", offsetof(LayerWeights, wo), SIZE_DIM, SIZE_Q, 0},
    {"w1", "ffn_gate", offsetof(LayerWeights, w1), SIZE_HIDDEN, SIZE_DIM, 1},
    {"w2", "ffn_down", offsetof(LayerWeights, w2), SIZE_DIM, SIZE_HIDDEN, 1},
    {"w3", "ffn_up", offsetof(LayerWeights, w3), SIZE_HIDDEN, SIZE_DIM, 1},
};
enum { LAYER_MATRICES = sizeof layer_matrices / sizeof layer_matrices[0] };

static Matrix *layer_matrix(LayerWeights *lw, int k) { return (Matrix *)((char *)lw + layer_matrices[k].offset); }

// Every pointer points into the memory map; nothing here owns weight data
// (layers and experts are the Matrix records' own allocations).
typedef struct {
    Matrix token_embedding; // (vocab_size, dim)
    LayerWeights *layers;   // (n_layers), the only allocation
    const float *rms_final; // (dim)
    Matrix wcls;            // (vocab_size, dim), the embedding when shared
    const float *rope_freqs; // (head_size/2) each RoPE frequency is divided by its factor
                             // (Llama 3.1+ rope scaling), or NULL
    Matrix *experts;        // (n_layers, n_experts, 3) what the layers' experts point at, or NULL
} TransformerWeights;

// Positions per prefill block: forward_batch evaluates longer runs block by
// block. A multiple of every TILE_TOKENS, so BATCH * cols floats are enough
// room for the F32 prefill tiles. 128 rather than 64: the AMX kernels decode
// each weight block once per block of positions, so longer blocks decode less.
#define BATCH 128

// Prefill positions whose queries take each read of the keys and values
// together: at long contexts attention reads the whole cache for every
// position, so a tile of positions reads it once.
#define QUERY_TILE 4

// What the matrix products (engine room) need besides their operands, for
// up to BATCH positions of up to max_cols = max(dim, hidden_dim, n_heads *
// head_size) inputs.
typedef struct ActBlock ActBlock; // an activation block of the packed kernels
typedef struct WorkRun WorkRun;   // a thread's run of row groups in generation
typedef struct {
    float *tiles;         // (BATCH, max_cols) F32 prefill: inputs transposed into tiles
    ActBlock *act_blocks; // (BATCH, max_cols / 32) inputs quantized for the packed kernels
    unsigned char *act;   // (BATCH, act_bytes_max(max_cols)) inputs in a weight type's
                          // activation format (act_type in the weight types' table)
    int8_t *amx_x;        // AMX builds: (BATCH / 16, max_cols / 256, 16, 256) the K-quants'
                          // Q8_K quants again, 16 positions' rows of a block side by side
    WorkRun *runs;        // (MAX_RUNS) generation's split of the row groups, one per thread
} MatmulScratch;

// How many threads a step runs on, chosen from the steps' own timing
// (engine room: threads on a busy machine). One for generation's steps, one
// for prefill's blocks.
typedef struct {
    int adapt;          // 0: the count is fixed (--threads, OMP_NUM_THREADS, bench, tests)
    int count[2];       // the two counts it moves between: [0] fewer (at least 1), [1] all the threads
    int now;            // which the steps run on now, 0 or 1
    double per[2];      // seconds a position of recent steps on each count (0: not known yet)
    int trying;         // steps left to run on the other count, to time it
    double try_sum;     // their seconds a position, summed
    double next_try;    // when to time the other count again
    double wait;        // seconds between such tries, doubled each time the other count loses
    double started;     // when this step started
} ThreadChoice;

// Activations for a step of up to BATCH positions (one in generation, a
// block in prefill; each position a row), and the KV cache for all
// positions so far.
typedef struct {
    float *x;           // (BATCH, dim) the residual stream
    float *xb;          // (BATCH, dim) normed input; attention's output (BATCH, n_heads*head_size)
    float *xb2;         // (BATCH, dim) a second dim-sized buffer
    float *hb;          // (BATCH, hidden_dim) gate
    float *hb2;         // (BATCH, hidden_dim) up
    float *q;           // (BATCH, n_heads*head_size) queries
    float *k;           // (BATCH, kv_dim) keys, before they are stored
    float *v;           // (BATCH, kv_dim) and values
    float *rope_cos;    // (2, BATCH, head_size/2) each position's rotation: [0] of the layers with
    float *rope_sin;    // (2, BATCH, head_size/2) the model's RoPE, [1] of sliding-window layers with their own
    float *att;         // (n_heads * QUERY_TILE, seq_len) attention scores
    float *q_tile;      // (n_heads * QUERY_TILE, head_size) a tile's queries, gathered
    float *out_tile;    // (n_heads * QUERY_TILE, head_size) and its outputs
    // a mixture of experts (NULL when dense): each position's choice, and an expert's rows
    float *router;      // (BATCH, n_experts) the router's scores, then probabilities
    int *chosen;        // (BATCH, n_experts_used) the experts each position runs
    float *chosen_weight; // (BATCH, n_experts_used) and their weights
    float *expert_in;   // (BATCH, dim) the rows routed to one expert
    float *expert_out;  // (BATCH, dim) its outputs
    float *logits;      // (vocab_size) the last position's
    float *key_cache;   // per layer (n_kv_heads, cache_len[l], head_size), or NULL with an fp16 cache:
    float *value_cache; // likewise
    uint16_t *key_cache_f16;   // the same shapes with --kv f16, else NULL
    uint16_t *value_cache_f16;
    void *key_block, *value_block; // the allocations the caches lie in (to free)
    size_t *cache_start; // (n_layers) where each layer's part of the caches starts, in elements
    int *cache_len;      // (n_layers) positions it holds: seq_len, or for a sliding-window layer a ring
                         // of window + BATCH - 1 (position p in slot p % cache_len)
    MatmulScratch mm;   // the matrix products' own scratch
} RunState;

// A loaded model: it owns the map, the packed weights and the run state.
typedef struct {
    Config config;
    TransformerWeights weights;
    RunState state;
    void *map;           // the whole checkpoint file, read-only
    size_t map_size;
    unsigned char *packed; // every Matrix.packed, one allocation (or NULL)
    long long n_forward; // forward passes run, for tests and timing
    FILE *trace;         // --trace: every token fed, one id per line
    int is_gguf;
    ThreadChoice threads[2]; // for steps of one position (generation) and blocks (prefill)
} Transformer;

static int kv_dim(const Config *c) { return c->n_kv_heads * c->head_size; }

// A LayerMatrix's rows or cols (SIZE_*) for config c.
static int config_size(const Config *c, int size) {
    switch (size) {
    case SIZE_Q: return c->n_heads * c->head_size;
    case SIZE_KV: return kv_dim(c);
    case SIZE_HIDDEN: return c->hidden_dim;
    default: return c->dim;
    }
}

/* What the engine room (part 2) provides for the engine. Each fast kernel
   there has a plain twin (the same name with _plain) that the suite checks
   it against. */
static void matmul(float *out, const float *x, int n, const Matrix *m, MatmulScratch *mm);
static void matmul_shared(float *const *outs, const Matrix *const *ms, int count, const float *x, int n,
                          MatmulScratch *mm);
static void dequantize_row(float *out, const Matrix *m, int row);
static float dot_f32(const float *a, const float *b, int n);
static void attention_scores(float *att, size_t att_stride, const float *q, int n_q, const float *k, size_t stride, int n, int hs,
                             float scale);
static void attention_values(float *out, const float *att, const float *v, size_t stride, int n, int hs);
static float dot_f32_f16(const float *a, const uint16_t *b, int n);
static void attention_scores_f16(float *att, size_t att_stride, const float *q, int n_q, const uint16_t *k, size_t stride, int n,
                                 int hs, float scale);
static void attention_values_f16(float *out, const float *att, const uint16_t *v, size_t stride, int n, int hs);
static void f32_to_f16_row(uint16_t *out, const float *x, size_t n);
static float exp_row(float *x, int n, float shift);
static float max_row(const float *x, int n);
static void swiglu(float *hb, const float *hb2, int n);
static void geglu(float *hb, const float *hb2, int n);
static void swiglu_clamped(float *hb, const float *hb2, int n);
static int alloc_matmul_scratch(MatmulScratch *mm, int max_cols);
static void free_matmul_scratch(MatmulScratch *mm);
static void threads_begin(ThreadChoice *tc);
static void threads_end(ThreadChoice *tc, int positions);

/* ----------------------------------------------------------------------------
   The run state: every buffer a forward pass writes, allocated once. */

// The run state's own buffers (not the products' scratch) start on 64-byte
// lines, so that a vector load of a key, a value or a query does not
// straddle two lines (glibc's large blocks start 16 bytes into a page,
// and straddling loads made attention markedly slower).

// n zeroed elements of size bytes, aligned; NULL if out of memory.
static void *zeros_aligned(size_t n, size_t size) {
    if (size && n > (SIZE_MAX - 64) / size) return NULL;
    size_t bytes = (n * size + 63) / 64 * 64; // aligned_alloc takes a multiple
    void *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p) memset(p, 0, bytes);
    return p;
}

// The same for the KV cache, without touching it: calloc's pages stay
// untouched until used (a 7B model's F32 cache at 4096 positions is 4 GB).
// *block gets what to free.
static void *cache_aligned(size_t n, size_t size, void **block) {
    *block = size && n > (SIZE_MAX - 64) / size ? NULL : calloc(n * size + 64, 1);
    return *block ? (void *)(((uintptr_t)*block + 63) / 64 * 64) : NULL;
}

// Positions layer l's cache holds: all of the context, or for a
// sliding-window layer the window and a block's positions besides (a block
// stores its keys before its first position has read the oldest it sees).
static int layer_cache_len(const Config *c, const LayerWeights *layers, int l) {
    int window = layers ? layers[l].window : 0;
    return window > 0 && window + BATCH - 1 < c->seq_len ? window + BATCH - 1 : c->seq_len;
}

// kv_type: TYPE_F32 or TYPE_F16, the KV cache's; layers: the model's (their
// windows bound their caches), or NULL for full-length caches.
static int alloc_run_state(RunState *s, const Config *c, const LayerWeights *layers, int kv_type) {
    size_t kv = 0, rows = BATCH;
    s->cache_start = zeros_aligned((size_t)c->n_layers, sizeof(size_t));
    s->cache_len = zeros_aligned((size_t)c->n_layers, sizeof(int));
    if (!s->cache_start || !s->cache_len) return -1;
    for (int l = 0; l < c->n_layers; l++) {
        s->cache_start[l] = kv;
        s->cache_len[l] = layer_cache_len(c, layers, l);
        kv += (size_t)s->cache_len[l] * kv_dim(c);
    }
    size_t q_dim = (size_t)c->n_heads * c->head_size, widest = q_dim > (size_t)c->dim ? q_dim : (size_t)c->dim;
    s->x = zeros_aligned(rows * c->dim, sizeof(float));
    s->xb = zeros_aligned(rows * widest, sizeof(float));
    s->xb2 = zeros_aligned(rows * c->dim, sizeof(float));
    s->hb = zeros_aligned(rows * c->hidden_dim, sizeof(float));
    s->hb2 = zeros_aligned(rows * c->hidden_dim, sizeof(float));
    s->q = zeros_aligned(rows * c->n_heads * c->head_size, sizeof(float));
    s->k = zeros_aligned(rows * kv_dim(c), sizeof(float));
    s->v = zeros_aligned(rows * kv_dim(c), sizeof(float));
    s->rope_cos = zeros_aligned(2 * rows * c->head_size / 2, sizeof(float));
    s->rope_sin = zeros_aligned(2 * rows * c->head_size / 2, sizeof(float));
    s->att = zeros_aligned((size_t)c->n_heads * QUERY_TILE * c->seq_len, sizeof(float));
    s->q_tile = zeros_aligned(q_dim * QUERY_TILE, sizeof(float));
    s->out_tile = zeros_aligned(q_dim * QUERY_TILE, sizeof(float));
    s->logits = zeros_aligned((size_t)c->vocab_size, sizeof(float));
    int f16 = kv_type == TYPE_F16;
    size_t kv_size = f16 ? sizeof(uint16_t) : sizeof(float);
    void *keys = cache_aligned(kv, kv_size, &s->key_block), *values = cache_aligned(kv, kv_size, &s->value_block);
    s->key_cache = f16 ? NULL : keys;
    s->value_cache = f16 ? NULL : values;
    s->key_cache_f16 = f16 ? keys : NULL;
    s->value_cache_f16 = f16 ? values : NULL;
    if (c->n_experts > 0) {
        size_t used = rows * c->n_experts_used;
        s->router = zeros_aligned(rows * c->n_experts, sizeof(float));
        s->chosen = zeros_aligned(used, sizeof(int));
        s->chosen_weight = zeros_aligned(used, sizeof(float));
        s->expert_in = zeros_aligned(rows * c->dim, sizeof(float));
        s->expert_out = zeros_aligned(rows * c->dim, sizeof(float));
        if (!s->router || !s->chosen || !s->chosen_weight || !s->expert_in || !s->expert_out) return -1;
    }
    int max_cols = c->hidden_dim > (int)widest ? c->hidden_dim : (int)widest;
    if (!s->x || !s->xb || !s->xb2 || !s->hb || !s->hb2 || !s->q || !s->k || !s->v || !s->rope_cos ||
        !s->rope_sin || !s->att || !s->q_tile || !s->out_tile || !s->logits || !keys || !values || alloc_matmul_scratch(&s->mm, max_cols) != 0)
        return -1;
    return 0;
}

static void free_run_state(RunState *s) {
    free(s->x); free(s->xb); free(s->xb2); free(s->hb); free(s->hb2); free(s->q); free(s->k); free(s->v);
    free(s->rope_cos); free(s->rope_sin); free(s->att); free(s->q_tile); free(s->out_tile); free(s->logits);
    free(s->router); free(s->chosen); free(s->chosen_weight); free(s->expert_in); free(s->expert_out);
    free(s->key_block); free(s->value_block); free(s->cache_start); free(s->cache_len); free_matmul_scratch(&s->mm);
    memset(s, 0, sizeof *s);
}

/* ----------------------------------------------------------------------------
   The math. Plain C, each function the definition that the engine room's
   fast kernels are tested against. */

// The squares are summed in double and the mean rounded to float, as ggml
// does: with a float sum the scale could differ from llama.cpp's in its
// last bit, which moves every value and, through the 8-bit activations of
// the quantized products, now and then one value's rounding.
static void rmsnorm(float *out, const float *x, const float *weight, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    float mean = (float)(ss / n);
    float scale = 1.0f / sqrtf(mean + eps);
    for (int i = 0; i < n; i++) out[i] = weight[i] * (scale * x[i]);
}

static void softmax(float *x, int n) {
    float max = max_row(x, n);
    float sum = exp_row(x, n, max);
    for (int i = 0; i < n; i++) x[i] /= sum;
}

// softmax with one more logit, the sink, in the sum but not in x (an
// attention head's sink: it takes a share of the weight and adds no value);
// a sink of -infinity is plain softmax.
static void softmax_sink(float *x, int n, float sink) {
    float max = max_row(x, n);
    max = sink > max ? sink : max;
    float sum = exp_row(x, n, max) + expf(sink - max);
    for (int i = 0; i < n; i++) x[i] /= sum;
}

// hb = silu(hb) * hb2, the SwiGLU gate; silu(g) = g / (1 + e^-g).
static void swiglu_plain(float *hb, const float *hb2, int n) {
    for (int i = 0; i < n; i++) {
        float g = hb[i];
        hb[i] = g / (1.0f + expf(-g)) * hb2[i];
    }
}

// hb = gelu(hb) * hb2, the GeGLU gate (gemma3), with GELU's tanh form:
// gelu(g) = g/2 (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3), which is
// g / (1 + e^(-2u)), SwiGLU's shape with another argument. Exact: llama.cpp
// rounds GELU's input and output to fp16 (a table), which moves logits by
// about 1e-3 of their range.
static void geglu_plain(float *hb, const float *hb2, int n) {
    for (int i = 0; i < n; i++) {
        float g = hb[i], u = 0.7978845608f * (g + 0.044715f * g * g * g);
        hb[i] = g / (1.0f + expf(-2.0f * u)) * hb2[i];
    }
}

// hb = g sigmoid(1.702 g) (u + 1) with g = min(hb, 7), u = hb2 clamped to
// [-7, 7]: gpt-oss's gate, a SwiGLU bounded so that no activation explodes.
static void swiglu_clamped_plain(float *hb, const float *hb2, int n) {
    for (int i = 0; i < n; i++) {
        float g = hb[i] < 7.0f ? hb[i] : 7.0f, u = hb2[i] < -7.0f ? -7.0f : hb2[i] > 7.0f ? 7.0f : hb2[i];
        hb[i] = g / (1.0f + expf(-1.702f * g)) * (u + 1.0f);
    }
}

// out (rows) = w (rows, cols) @ x (cols): the plain matrix product, which
// every fast one is tested against. Sums in order, one row at a time.
static void matmul_f32_plain(float *out, const float *x, const float *w, int rows, int cols) {
    int i;
    #pragma omp parallel for private(i)
    for (i = 0; i < rows; i++) {
        const float *row = w + (size_t)i * cols;
        float sum = 0.0f;
        for (int j = 0; j < cols; j++) sum += row[j] * x[j];
        out[i] = sum;
    }
}

// YaRN (gpt-oss): which pairs keep their angle (extrapolate) and which are
// interpolated by the scale. Pair i turns about rotations(i) = context /
// (2 pi theta^(2i/hs)) times over the trained context; pairs that turn more
// than 32 times keep their angles, those that turn less than once are
// interpolated, and a linear ramp over the pairs between mixes the two
// (as llama.cpp computes it, the ends rounded outwards to whole pairs).
static float yarn_extrapolation(int i, int hs, float theta, int context) {
    double low = floor(hs * log(context / (32 * 2 * M_PI)) / (2 * log(theta)));
    double high = ceil(hs * log(context / (1 * 2 * M_PI)) / (2 * log(theta)));
    low = low > 0 ? low : 0;
    high = high < hs - 1 ? high : hs - 1;
    double y = (i - low) / (high - low > 0.001 ? high - low : 0.001);
    return (float)(1.0 - (y < 0 ? 0 : y > 1 ? 1 : y));
}

// The rotation angles for position pos, computed in double so that long
// contexts keep their precision: pair i of a head of hs turns by
// pos * scale * theta^(-2i/hs), divided by freq_factors[i] when the model
// has them (Llama 3.1's rope scaling). With YaRN (yarn_context > 0) the
// angle mixes the scaled and the unscaled one, and cos and sin grow by
// 1 + 0.1 ln(1 / scale).
static void rope_angles(float *cos_out, float *sin_out, int pos, int hs, float theta, float scale, int yarn_context,
                        const float *freq_factors) {
    double magnitude = yarn_context > 0 ? 1.0 + 0.1 * log(1.0 / scale) : 1.0;
    for (int i = 0; i < hs / 2; i++) {
        double unscaled = pos * pow(theta, -2.0 * i / hs), angle = unscaled * scale;
        if (yarn_context > 0) {
            double keep = yarn_extrapolation(i, hs, theta, yarn_context);
            angle = angle * (1 - keep) + unscaled * keep;
        }
        if (freq_factors) angle /= freq_factors[i];
        cos_out[i] = (float)(cos(angle) * magnitude);
        sin_out[i] = (float)(sin(angle) * magnitude);
    }
}

// Rotates pair i of each of n_heads heads: (x[2i], x[2i+1]), or with neox
// (x[i], x[i + head_size/2]), the "rotate half" layout.
static void rope(float *x, int n_heads, int head_size, int neox, const float *cos_t, const float *sin_t) {
    int half = head_size / 2, step = neox ? 1 : 2, other = neox ? half : 1;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_size;
        for (int i = 0; i < half; i++) {
            float *p = v + i * step, a = p[0], b = p[other];
            p[0] = a * cos_t[i] - b * sin_t[i];
            p[other] = a * sin_t[i] + b * cos_t[i];
        }
    }
}

// x += bias over each of n rows of width values; no bias, nothing to do.
static void add_bias(float *x, const float *bias, int n, int width) {
    if (!bias) return;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < width; i++) x[(size_t)r * width + i] += bias[i];
}

/* ----------------------------------------------------------------------------
   Forward: forward() runs one token at position pos and returns the logits
   (vocab_size); forward_batch() runs a block of positions at once (prompts).
   Callers feed positions 0, 1, 2, ... in order; pos < seq_len. */

// Where the cache holds the key (or value) of kv head kv_head at position
// pos of a layer. Each head's positions lie together, head_size apart, so
// attention reads them in a row (a position's heads side by side, kv_dim
// apart, were 1 KB or more from one key to the next, and the keys of a
// head landed in a few L1 sets that could not hold them). A sliding-window
// layer's cache is a ring: position pos is in slot pos % cache_len.
static size_t kv_at(const RunState *s, const Config *c, int layer, int kv_head, int pos) {
    int len = s->cache_len[layer];
    return s->cache_start[layer] + ((size_t)kv_head * len + pos % len) * c->head_size;
}

// Keys per block of attention scores: about 16 KB of them, which stay in L1
// while each query head that shares them takes its scores for the block.
static int score_block(int head_size) {
    int keys = 16384 / (head_size * (int)sizeof(float)) / 16 * 16; // whole 16-key steps
    return keys > 16 ? keys : 16;
}

// The scores of `rows` queries (q: head_size apart) against the keys in
// slots slot..slot+count-1 of one kv head's cache (at: its slot 0), into
// columns col.. of their rows of att (seq_len apart). The rows take each
// block of keys in turn: one read of the keys from memory or L2 for all of
// them, not one per row.
static void head_scores(const RunState *s, const Config *c, size_t at, int slot, int count, int rows, const float *q, float *att, int col,
                        float scale) {
    int hs = c->head_size, block = score_block(hs), end = slot + count;
    size_t row = (size_t)hs * (s->key_cache ? sizeof(float) : sizeof(uint16_t)); // bytes of a key or value
    const char *keys = s->key_cache ? (const char *)(s->key_cache + at) : (const char *)(s->key_cache_f16 + at);
    const char *values = s->value_cache ? (const char *)(s->value_cache + at) : (const char *)(s->value_cache_f16 + at);
    for (int p = slot; p < end; p += block) {
        int m = end - p < block ? end - p : block, next = end - p - m < block ? end - p - m : block;
        // while the rows score this block, 16 keys at a time, the next
        // block's keys (into L1) and this block's values (into L2) are
        // fetched, a share before each 16
        size_t key_lines = (size_t)next * row / 64, value_lines = (size_t)m * row / 64;
        for (int k = 0; k < m; k += 16) {
            int keys_now = m - k < 16 ? m - k : 16;
            for (size_t i = key_lines * k / m; i < key_lines * (k + keys_now) / m; i++)
                __builtin_prefetch(keys + (size_t)(p + m) * row + 64 * i, 0, 3);
            for (size_t i = value_lines * k / m; i < value_lines * (k + keys_now) / m; i++)
                __builtin_prefetch(values + (size_t)p * row + 64 * i, 0, 2);
            float *a = att + col + (p + k - slot);
            size_t first = at + (size_t)(p + k) * hs;
            if (s->key_cache) attention_scores(a, c->seq_len, q, rows, s->key_cache + first, (size_t)hs, keys_now, hs, scale);
            else attention_scores_f16(a, c->seq_len, q, rows, s->key_cache_f16 + first, (size_t)hs, keys_now, hs, scale);
        }
    }
}

// out (rows of head_size) += the values in slots slot..slot+count-1 of one
// kv head's cache (at: its slot 0), weighted by each row's scores in
// columns col.. of att (seq_len apart); row r (of position r / n_q) takes
// only the columns lo[r / n_q]..hi[r / n_q]-1 (the position's). Block by
// block of values, each taken by every row while it is in L1: one read of
// the values for the rows, not one per row. Each output adds its terms in
// slot order.
static void heads_values(const RunState *s, const Config *c, size_t at, int slot, int count, int rows, int n_q, const int *lo,
                         const int *hi, const float *att, int col, float *out) {
    int hs = c->head_size, block = score_block(hs), end = slot + count;
    for (int p = slot; p < end; p += block) {
        int m = end - p < block ? end - p : block, first = col + (p - slot); // this block's columns: first..first+m-1
        for (int r = 0; r < rows; r++) {
            int i = r / n_q, from = lo[i] > first ? lo[i] : first, to = hi[i] < first + m ? hi[i] : first + m;
            if (from >= to) continue;
            const float *a = att + (size_t)r * c->seq_len + from;
            size_t v = at + (size_t)(p + from - first) * hs;
            float *o = out + (size_t)r * hs;
            if (s->value_cache) attention_values(o, a, s->value_cache + v, (size_t)hs, to - from, hs);
            else attention_values_f16(o, a, s->value_cache_f16 + v, (size_t)hs, to - from, hs);
        }
    }
}

// The first position that the query at pos sees in a layer with this
// window (0: all of them).
static int first_seen(int window, int pos) {
    return window > 0 && pos >= window ? pos - window + 1 : 0;
}

// Causal self-attention of the n_q query heads h0.., which share one kv
// head, at the n_pos positions pos.. (q: position i's heads at q + i *
// q_stride, head_size apart), each over the positions it sees in this
// layer's cache (0..pos, or the last `window` of them); the results go to
// out likewise (out_stride). The tile's rows (position i, head j: row i *
// n_q + j) score the keys that any of them sees, each row then taking its
// own: one read of the cache for the tile. A ring's positions lie in at
// most two runs of slots.
static void attention_heads(const Transformer *t, int layer, int h0, int n_q, int pos, int n_pos, const float *q, size_t q_stride, float *out,
                            size_t out_stride) {
    const Config *c = &t->config;
    const RunState *s = &t->state;
    int hs = c->head_size, window = t->weights.layers[layer].window, len = s->cache_len[layer], rows = n_pos * n_q;
    float *att = s->att + (size_t)h0 * QUERY_TILE * c->seq_len, *qt = s->q_tile + (size_t)h0 * QUERY_TILE * hs,
          *ot = s->out_tile + (size_t)h0 * QUERY_TILE * hs; // these heads' share of the scratch
    int first = first_seen(window, pos), n = pos + n_pos - first; // the positions any row sees
    int slot = first % len, n1 = n < len - slot ? n : len - slot;   // slots slot..slot+n1-1, then 0..n-n1-1
    int lo[QUERY_TILE], hi[QUERY_TILE];                               // each position's columns of att
    size_t at = kv_at(s, c, layer, h0 / (c->n_heads / c->n_kv_heads), 0); // this kv head's slot 0
    float scale = c->query_scale > 0 ? c->query_scale : 1.0f / sqrtf((float)hs);
    for (int i = 0; i < n_pos; i++) memcpy(qt + (size_t)i * n_q * hs, q + (size_t)i * q_stride, (size_t)n_q * hs * sizeof(float));
    head_scores(s, c, at, slot, n1, rows, qt, att, 0, scale);
    if (n1 < n) head_scores(s, c, at, 0, n - n1, rows, qt, att, n1, scale);
    const float *sinks = t->weights.layers[layer].sinks;
    for (int i = 0; i < n_pos; i++) {
        lo[i] = first_seen(window, pos + i) - first;
        hi[i] = pos + i + 1 - first;
    }
    for (int r = 0; r < rows; r++)
        softmax_sink(att + (size_t)r * c->seq_len + lo[r / n_q], hi[r / n_q] - lo[r / n_q], sinks ? sinks[h0 + r % n_q] : -INFINITY);
    memset(ot, 0, (size_t)rows * hs * sizeof(float));
    heads_values(s, c, at, slot, n1, rows, n_q, lo, hi, att, 0, ot);
    if (n1 < n) heads_values(s, c, at, 0, n - n1, rows, n_q, lo, hi, att, n1, ot);
    for (int i = 0; i < n_pos; i++) memcpy(out + (size_t)i * out_stride, ot + (size_t)i * n_q * hs, (size_t)n_q * hs * sizeof(float));
}

// Attention of every query head at the n positions pos.. of layer l: q (n,
// n_heads * head_size), the results into out (rows out_stride apart). Each
// thread takes an equal run of consecutive heads, as a static schedule
// would, and within it the heads of one kv head together, QUERY_TILE
// positions at a time.
static void attention_layer(const Transformer *t, int l, int pos, int n, const float *q, float *out, size_t out_stride) {
    const Config *c = &t->config;
    int hs = c->head_size, group = c->n_heads / c->n_kv_heads;
    size_t q_dim = (size_t)c->n_heads * hs;
    #pragma omp parallel
    {
        int me = 0, nt = 1;
#ifdef _OPENMP
        me = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        int h = (int)((int64_t)c->n_heads * me / nt), end = (int)((int64_t)c->n_heads * (me + 1) / nt);
        while (h < end) {
            int next = (h / group + 1) * group < end ? (h / group + 1) * group : end; // this kv head's last, or the run's
            for (int i = 0; i < n; i += QUERY_TILE)
                attention_heads(t, l, h, next - h, pos + i, n - i < QUERY_TILE ? n - i : QUERY_TILE, q + (size_t)i * q_dim + (size_t)h * hs,
                                q_dim, out + (size_t)i * out_stride + (size_t)h * hs, out_stride);
            h = next;
        }
    }
}

// Stores n positions' keys and values k, v (n, kv_dim) into the cache of
// layer l at positions pos.., each head's part where kv_at puts it.
static void store_kv(RunState *s, const Config *c, int l, int pos, const float *k, const float *v, int n) {
    int hs = c->head_size, kvd = kv_dim(c);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < c->n_kv_heads; h++) {
            size_t at = kv_at(s, c, l, h, pos + i), from = (size_t)i * kvd + (size_t)h * hs;
            if (s->key_cache) {
                memcpy(s->key_cache + at, k + from, (size_t)hs * sizeof(float));
                memcpy(s->value_cache + at, v + from, (size_t)hs * sizeof(float));
            } else {
                f32_to_f16_row(s->key_cache_f16 + at, k + from, (size_t)hs);
                f32_to_f16_row(s->value_cache_f16 + at, v + from, (size_t)hs);
            }
        }
}

// x += y over n values.
static void add_rows(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

// rmsnorm of each of n rows of dim values, the rows split across the
// threads when there are several (one row, generation's, starts no team).
static void rmsnorm_rows(float *out, const float *x, const float *weight, int n, int dim, float eps) {
    int i;
    if (n == 1) { rmsnorm(out, x, weight, dim, eps); return; }
    #pragma omp parallel for private(i) schedule(static)
    for (i = 0; i < n; i++) rmsnorm(out + (size_t)i * dim, x + (size_t)i * dim, weight, dim, eps);
}

// The feed-forward's gate (GATE_*) on each of n rows of hidden_dim
// values, likewise.
static void gate_rows(float *hb, const float *hb2, int n, int hidden_dim, int kind) {
    int i;
    void (*gate)(float *, const float *, int) = kind == GATE_GELU ? geglu : kind == GATE_CLAMPED ? swiglu_clamped : swiglu;
    if (n == 1) { gate(hb, hb2, hidden_dim); return; }
    #pragma omp parallel for private(i) schedule(static)
    for (i = 0; i < n; i++) gate(hb + (size_t)i * hidden_dim, hb2 + (size_t)i * hidden_dim, hidden_dim);
}

// x = cap * tanh(x / cap) over n values, a soft bound on the logits; none
// when cap is 0.
static void soft_cap(float *x, size_t n, float cap) {
    for (size_t i = 0; cap > 0 && i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

// RMSNorm of each of count heads of head_size values in x, in place, with
// one weight for all; nothing when weight is NULL (only qwen3 has these).
static void rmsnorm_heads(float *x, const float *weight, int count, int head_size, float eps) {
    for (int h = 0; weight && h < count; h++) rmsnorm(x + (size_t)h * head_size, x + (size_t)h * head_size, weight, head_size, eps);
}

// RoPE on each of n positions' queries and keys, likewise, with the
// angles of table 0 or 1 (rope_cos).
static void rope_rows(RunState *s, const Config *c, int n, int table) {
    int hs = c->head_size, q_dim = c->n_heads * hs, kvd = kv_dim(c), i;
    size_t first = (size_t)table * BATCH * hs / 2;
    #pragma omp parallel for private(i) schedule(static) if (n > 1) // (one row: the if starts no team)
    for (i = 0; i < n; i++) {
        const float *cos_t = s->rope_cos + first + (size_t)i * hs / 2, *sin_t = s->rope_sin + first + (size_t)i * hs / 2;
        rope(s->q + (size_t)i * q_dim, c->n_heads, hs, c->rope_neox, cos_t, sin_t);
        rope(s->k + (size_t)i * kvd, c->n_kv_heads, hs, c->rope_neox, cos_t, sin_t);
    }
}

// The experts each of n positions runs, from the router's scores of s->xb
// (plus its bias, gpt-oss): softmax over all experts, the top
// n_experts_used, their probabilities divided by their sum (as llama.cpp
// routes Mixtral and Qwen3-MoE; gpt-oss's softmax over the top k's scores
// is the same weights).
static void route(Transformer *t, const LayerWeights *lw, int n) {
    const Config *c = &t->config;
    RunState *s = &t->state;
    int n_exp = c->n_experts, k = c->n_experts_used;
    matmul(s->router, s->xb, n, &lw->router, &s->mm);
    add_bias(s->router, lw->router_bias, n, n_exp);
    for (int i = 0; i < n; i++) {
        float *p = s->router + (size_t)i * n_exp, sum = 0.0f;
        int *chosen = s->chosen + (size_t)i * k;
        float *weight = s->chosen_weight + (size_t)i * k;
        softmax(p, n_exp);
        for (int j = 0; j < k; j++) { // the j-th largest, the lowest index on ties
            int best = -1;
            for (int e = 0; e < n_exp; e++) {
                int taken = 0;
                for (int m = 0; m < j; m++) taken |= chosen[m] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            chosen[j] = best;
            weight[j] = p[best];
            sum += p[best];
        }
        for (int j = 0; j < k; j++) weight[j] /= sum;
    }
}

// For each of m gated rows r of h (hidden_dim each): out row rows[r] (dim)
// += weights[r] * expert e's down projection of row r, and its bias where
// it has one.
static void add_expert_output(Transformer *t, const LayerWeights *lw, int e, const float *h, int m, const int *rows,
                              const float *weights, float *out) {
    const Config *c = &t->config;
    RunState *s = &t->state;
    int dim = c->dim;
    matmul(s->expert_out, h, m, &lw->experts[3 * e + 1], &s->mm);
    add_bias(s->expert_out, lw->expert_b2 ? lw->expert_b2 + (size_t)e * dim : NULL, m, dim);
    for (int r = 0; r < m; r++) {
        float *o = out + (size_t)rows[r] * dim;
        const float *y = s->expert_out + (size_t)r * dim;
        for (int d = 0; d < dim; d++) o[d] += weights[r] * y[d];
    }
}

// The experts of one position (generation), s->xb into s->xb2: its k
// experts all take that row, so their gate and up products run in one
// parallel region, as a dense layer's do, not one region each; expert j's
// rows go to row j of hb and hb2.
static void experts_of_one(Transformer *t, const LayerWeights *lw) {
    const Config *c = &t->config;
    RunState *s = &t->state;
    int k = c->n_experts_used;
    size_t hidden = (size_t)c->hidden_dim;
    const Matrix *ms[2 * BATCH];
    float *outs[2 * BATCH];
    for (int j = 0; j < k; j++) {
        int e = s->chosen[j];
        ms[2 * j] = &lw->experts[3 * e], ms[2 * j + 1] = &lw->experts[3 * e + 2];
        outs[2 * j] = s->hb + j * hidden, outs[2 * j + 1] = s->hb2 + j * hidden;
    }
    matmul_shared(outs, ms, 2 * k, s->xb, 1, &s->mm);
    for (int j = 0; j < k; j++) {
        add_bias(outs[2 * j], lw->expert_b1 ? lw->expert_b1 + s->chosen[j] * hidden : NULL, 1, c->hidden_dim);
        add_bias(outs[2 * j + 1], lw->expert_b3 ? lw->expert_b3 + s->chosen[j] * hidden : NULL, 1, c->hidden_dim);
    }
    gate_rows(s->hb, s->hb2, k, c->hidden_dim, c->gate);
    memset(s->xb2, 0, (size_t)c->dim * sizeof(float));
    for (int j = 0; j < k; j++) add_expert_output(t, lw, s->chosen[j], s->hb + j * hidden, 1, (const int[]){0}, &s->chosen_weight[j], s->xb2);
}

// A mixture of experts over n positions, s->xb into s->xb2: each expert's
// SwiGLU feed-forward runs once, on the rows of all the positions routed to
// it, so an expert's weights are read once per block, and an expert no
// position chose is not read at all.
static void mixture_of_experts(Transformer *t, const LayerWeights *lw, int n) {
    const Config *c = &t->config;
    RunState *s = &t->state;
    int dim = c->dim, k = c->n_experts_used, rows[BATCH];
    float weights[BATCH];
    route(t, lw, n);
    if (n == 1 && k <= BATCH) { experts_of_one(t, lw); return; }
    memset(s->xb2, 0, (size_t)n * dim * sizeof(float));
    for (int e = 0; e < c->n_experts; e++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < k; j++)
                if (s->chosen[(size_t)i * k + j] == e) {
                    rows[m] = i;
                    weights[m] = s->chosen_weight[(size_t)i * k + j];
                    memcpy(s->expert_in + (size_t)m++ * dim, s->xb + (size_t)i * dim, (size_t)dim * sizeof(float));
                }
        if (m == 0) continue;
        const Matrix *w1 = &lw->experts[3 * e], *w3 = &lw->experts[3 * e + 2];
        size_t hidden = (size_t)c->hidden_dim;
        matmul_shared((float *[]){s->hb, s->hb2}, (const Matrix *[]){w1, w3}, 2, s->expert_in, m, &s->mm);
        add_bias(s->hb, lw->expert_b1 ? lw->expert_b1 + e * hidden : NULL, m, c->hidden_dim);
        add_bias(s->hb2, lw->expert_b3 ? lw->expert_b3 + e * hidden : NULL, m, c->hidden_dim);
        gate_rows(s->hb, s->hb2, m, c->hidden_dim, c->gate);
        add_expert_output(t, lw, e, s->hb, m, rows, weights, s->xb2);
    }
}

/* The forward pass over n <= BATCH positions at pos..pos+n-1: one in
   generation, a block of the prompt in prefill. Every matrix multiplies
   the whole block at once, so its weights are read once per block; each
   position attends causally to the cache, which already holds the block's
   earlier positions. Each row of the buffers is one position.
   logits_out: NULL, or (n, vocab_size) for every position's logits;
   want_last: the last position's logits go to state.logits (when
   logits_out is NULL). */
static void forward_block(Transformer *t, const int *tokens, int n, int pos, float *logits_out, int want_last) {
    const Config *c = &t->config;
    const TransformerWeights *w = &t->weights;
    RunState *s = &t->state;
    int dim = c->dim, hs = c->head_size, kvd = kv_dim(c), q_dim = c->n_heads * hs;
    t->n_forward += n;
    threads_begin(&t->threads[n > 1]); // how many threads: the engine room times the steps
    size_t local = (size_t)BATCH * hs / 2; // where the second table of angles starts
    for (int i = 0; i < n; i++) {
        float *x = s->x + (size_t)i * dim, *cos_t = s->rope_cos + (size_t)i * hs / 2, *sin_t = s->rope_sin + (size_t)i * hs / 2;
        if (t->trace) fprintf(t->trace, "%d\n", tokens[i]);
        dequantize_row(x, &w->token_embedding, tokens[i]);
        for (int d = 0; c->embed_scale > 0 && d < dim; d++) x[d] *= c->embed_scale;
        rope_angles(cos_t, sin_t, pos + i, hs, c->rope_theta, c->rope_scale, c->rope_yarn_context, w->rope_freqs);
        if (c->rope_theta_local > 0)
            rope_angles(cos_t + local, sin_t + local, pos + i, hs, c->rope_theta_local, 1.0f, 0, NULL);
    }

    for (int l = 0; l < c->n_layers; l++) {
        const LayerWeights *lw = &w->layers[l];

        // attention: q, k, v for every position; k and v then go into the cache
        rmsnorm_rows(s->xb, s->x, lw->rms_att, n, dim, c->norm_eps);
        matmul_shared((float *[]){s->q, s->k, s->v}, (const Matrix *[]){&lw->wq, &lw->wk, &lw->wv}, 3, s->xb, n, &s->mm);
        add_bias(s->q, lw->bq, n, q_dim);
        add_bias(s->k, lw->bk, n, kvd);
        add_bias(s->v, lw->bv, n, kvd);
        rmsnorm_heads(s->q, lw->q_norm, n * c->n_heads, hs, c->norm_eps);
        rmsnorm_heads(s->k, lw->k_norm, n * c->n_kv_heads, hs, c->norm_eps);
        rope_rows(s, c, n, lw->window > 0 && c->rope_theta_local > 0);
        store_kv(s, c, l, pos, s->k, s->v, n);
        attention_layer(t, l, pos, n, s->q, s->xb, (size_t)q_dim);
        matmul(s->xb2, s->xb, n, &lw->wo, &s->mm);
        add_bias(s->xb2, lw->bo, n, dim);
        if (lw->post_att_norm) rmsnorm_rows(s->xb2, s->xb2, lw->post_att_norm, n, dim, c->norm_eps);
        add_rows(s->x, s->xb2, (size_t)n * dim);

        // feed-forward: w2 (silu(w1 x) * w3 x) (gelu for silu in GeGLU), or a mixture of such experts
        rmsnorm_rows(s->xb, s->x, lw->rms_ffn, n, dim, c->norm_eps);
        if (lw->experts) {
            mixture_of_experts(t, lw, n);
        } else {
            matmul_shared((float *[]){s->hb, s->hb2}, (const Matrix *[]){&lw->w1, &lw->w3}, 2, s->xb, n, &s->mm);
            gate_rows(s->hb, s->hb2, n, c->hidden_dim, c->gate);
            matmul(s->xb2, s->hb, n, &lw->w2, &s->mm);
        }
        if (lw->post_ffn_norm) rmsnorm_rows(s->xb2, s->xb2, lw->post_ffn_norm, n, dim, c->norm_eps);
        add_rows(s->x, s->xb2, (size_t)n * dim);
    }

    // the classifier only where logits are wanted
    if (logits_out) {
        rmsnorm_rows(s->x, s->x, w->rms_final, n, dim, c->norm_eps);
        matmul(logits_out, s->x, n, &w->wcls, &s->mm);
        soft_cap(logits_out, (size_t)n * c->vocab_size, c->logit_softcap);
    } else if (want_last) {
        rmsnorm(s->xb, s->x + (size_t)(n - 1) * dim, w->rms_final, dim, c->norm_eps);
        matmul(s->logits, s->xb, 1, &w->wcls, &s->mm);
        soft_cap(s->logits, (size_t)c->vocab_size, c->logit_softcap);
    }
    threads_end(&t->threads[n > 1], n);
}

// Feeds tokens[0..n) at positions pos..pos+n-1 (pos + n <= seq_len), BATCH
// at a time, and returns the last position's logits. logits_out: NULL, or
// (n, vocab_size) when every position's logits are wanted (the return value
// then points at its last row).
float *forward_batch(Transformer *t, const int *tokens, int n, int pos, float *logits_out) {
    size_t vocab = (size_t)t->config.vocab_size;
    for (int done = 0; done < n; done += BATCH) {
        int block = n - done < BATCH ? n - done : BATCH;
        forward_block(t, tokens + done, block, pos + done, logits_out ? logits_out + done * vocab : NULL,
                      done + block == n);
    }
    return logits_out ? logits_out + (size_t)(n - 1) * vocab : t->state.logits;
}

// One token at position pos (generation): its logits.
float *forward(Transformer *t, int token, int pos) {
    return forward_batch(t, &token, 1, pos, NULL);
}

/* ----------------------------------------------------------------------------
   Tokenizer: SentencePiece BPE over llama2.c's tokenizer.bin, exact.

   tokenizer.bin: int32 max_token_length, then for each of vocab_size tokens:
   float32 score, int32 byte length, the piece's bytes (spaces, not U+2581).

   Encoding follows SentencePiece: take out the user-defined tokens (GGUF
   files, such as Gemma's), prepend the dummy-prefix space (unless the file
   says not to), split into UTF-8 characters, repeatedly merge the adjacent
   pair whose concatenation is the highest-scoring piece (leftmost on ties),
   then spell whatever is not a piece as <0xXX> byte tokens. */

// Token kinds, numbered as SentencePiece and GGUF number them. User-defined
// tokens (GGUF files) are found whole in the text before it is split.
enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER_DEFINED = 4, TOKEN_UNUSED = 5,
       TOKEN_BYTE = 6 };

// One merge of byte-level BPE, known by what it makes: token merged, of
// which the left part is left_len bytes long. Lower ranks merge first.
// merged < 0 marks an empty slot of the merge table.
typedef struct { int merged, left_len, rank; } BpePair;

// A node of the trie of user-defined tokens: the byte that leads to it
// from its parent, its first child and next sibling (-1: none), and the
// token spelled by the path to it (-1: none).
typedef struct { int child, sibling, id; unsigned char byte; } UserNode;

#define MAX_EOG 16 // end-of-generation tokens a model may have

// Chat templates (see the chat section): the one a GGUF file's
// tokenizer.chat_template is recognized as, or NONE (no template: Llama 2's
// format is used) or UNKNOWN (the user must choose one).
enum { TEMPLATE_NONE = -1, TEMPLATE_LLAMA2, TEMPLATE_LLAMA3, TEMPLATE_CHATML, TEMPLATE_ZEPHYR, TEMPLATE_MISTRAL,
       TEMPLATE_GEMMA, TEMPLATE_QWEN3, TEMPLATE_HARMONY, TEMPLATE_DEEPSEEK_R1, TEMPLATE_UNKNOWN };

typedef struct {
    char **vocab;          // (vocab_size) pieces, NUL-terminated (byte-level BPE: raw bytes)
    int *piece_len;        // (vocab_size) byte lengths
    float *scores;         // (vocab_size) merge priority
    unsigned char *kind;   // (vocab_size) TOKEN_*; only normal pieces take part in merges
    int vocab_size;
    int bos_id, eos_id, unk_id; // bos_id -1: the model has none
    int add_dummy_prefix;  // SentencePiece normalizer flags
    int remove_extra_spaces;
    int add_bos;           // prompts start with BOS
    int chat_template;     // TEMPLATE_*: the file's chat template
    int template_early;    // the file's template is an earlier version of chat_template's (deepseek-r1:
                           // January 2025's, see deepseek_r1_early)
    int ids_known;         // BOS/EOS ids came from the file (GGUF), not from the model
    int byte_token[256];   // id of <0xXX> (byte-level BPE: of the one-byte token), or -1
    int *table;            // (table_size) piece hash table of ids, -1 = empty
    size_t table_size;     // a power of two
    int eog[MAX_EOG];      // tokens that end generation besides BOS and EOS (GGUF: EOT, ...;
                           // see ends_generation)
    int n_eog;
    int *user_tokens;      // (n_user_tokens) the user-defined tokens (GGUF)
    int n_user_tokens;
    UserNode *user_trie;   // (n_user_nodes) their spellings in the text as a trie; node 0 is the root
    int n_user_nodes;
    // byte-level BPE (GPT-2, Llama 3, Qwen 2) only:
    int byte_level;        // 1: byte-level BPE, 0: SentencePiece
    int pre;               // PRE_*: the pre-tokenizer that splits text into words
    int ignore_merges;     // a word that is a token is taken whole (Llama 3)
    BpePair *pairs;        // (pairs_size) hash table of merges by (merged, left_len)
    size_t pairs_size;     // a power of two
} Tokenizer;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    return h;
}

// Id of the normal piece s[0..n), or -1.
static int lookup_piece(const Tokenizer *tk, const char *s, size_t n) {
    size_t mask = tk->table_size - 1;
    for (size_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int id = tk->table[i];
        if (id < 0) return -1;
        if ((size_t)tk->piece_len[id] == n && memcmp(tk->vocab[id], s, n) == 0) return id;
    }
}

static int is_byte_piece(const char *p, int len) {
    return len == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && isxdigit((unsigned char)p[3]) &&
           isxdigit((unsigned char)p[4]) && p[5] == '>';
}

// tokenizer.bin has no token kinds; recover them from the pieces as
// llama2.c's exporter wrote them.
static unsigned char guess_kind(const char *p, int len) {
    if (is_byte_piece(p, len)) return TOKEN_BYTE;
    if (!strcmp(p, "<unk>")) return TOKEN_UNKNOWN;
    if (!strcmp(p, "\n<s>\n") || !strcmp(p, "\n</s>\n") || !strcmp(p, "<s>") || !strcmp(p, "</s>"))
        return TOKEN_CONTROL;
    return TOKEN_NORMAL;
}

// Fills the hash table with the normal pieces (SentencePiece: and the
// user-defined ones, which merge like them); the first of two equal pieces
// wins, as in SentencePiece. Empties the byte table.
static int index_pieces(Tokenizer *tk) {
    tk->table_size = 16;
    while (tk->table_size < 2 * (size_t)tk->vocab_size) tk->table_size *= 2;
    tk->table = malloc(tk->table_size * sizeof(int));
    if (!tk->table) return -1;
    memset(tk->table, 0xff, tk->table_size * sizeof(int));
    for (int b = 0; b < 256; b++) tk->byte_token[b] = -1;
    for (int id = 0; id < tk->vocab_size; id++) {
        const char *p = tk->vocab[id];
        int merges = tk->kind[id] == TOKEN_NORMAL || (tk->kind[id] == TOKEN_USER_DEFINED && !tk->byte_level);
        if (!merges || lookup_piece(tk, p, (size_t)tk->piece_len[id]) >= 0) continue;
        size_t mask = tk->table_size - 1, i = hash_bytes(p, (size_t)tk->piece_len[id]) & mask;
        while (tk->table[i] >= 0) i = (i + 1) & mask;
        tk->table[i] = id;
    }
    return 0;
}

// Indexes a SentencePiece vocabulary: its pieces, byte tokens and flags.
static int index_vocab(Tokenizer *tk) {
    if (index_pieces(tk) != 0) return -1;
    tk->unk_id = 0;
    tk->add_dummy_prefix = 1;
    // tokenizer.bin does not record SentencePiece's remove_extra_whitespaces.
    // A vocabulary trained with it never saw two spaces in a row, so it has
    // no piece holding them (Llama 2's has "  ", tok512's has none).
    tk->remove_extra_spaces = 1;
    for (int id = 0; id < tk->vocab_size; id++)
        if ((tk->kind[id] == TOKEN_NORMAL || tk->kind[id] == TOKEN_USER_DEFINED) && strstr(tk->vocab[id], "  "))
            tk->remove_extra_spaces = 0;
    for (int id = 0; id < tk->vocab_size; id++) {
        if (tk->kind[id] == TOKEN_BYTE) {
            int b = (int)strtol(tk->vocab[id] + 3, NULL, 16);
            if (tk->byte_token[b] < 0) tk->byte_token[b] = id;
        }
        if (tk->kind[id] == TOKEN_UNKNOWN) tk->unk_id = id;
    }
    return 0;
}

void tokenizer_close(Tokenizer *tk) {
    if (tk->vocab)
        for (int i = 0; i < tk->vocab_size; i++) free(tk->vocab[i]);
    free(tk->vocab); free(tk->piece_len); free(tk->scores); free(tk->kind); free(tk->table);
    free(tk->pairs); free(tk->user_tokens); free(tk->user_trie);
    memset(tk, 0, sizeof *tk);
}

static int tokenizer_alloc(Tokenizer *tk, int vocab_size) {
    memset(tk, 0, sizeof *tk);
    tk->vocab_size = vocab_size;
    tk->vocab = calloc((size_t)vocab_size, sizeof(char *));
    tk->piece_len = calloc((size_t)vocab_size, sizeof(int));
    tk->scores = calloc((size_t)vocab_size, sizeof(float));
    tk->kind = calloc((size_t)vocab_size, 1);
    tk->bos_id = 1;
    tk->eos_id = 2;
    tk->add_bos = 1;
    tk->chat_template = TEMPLATE_NONE;
    return tk->vocab && tk->piece_len && tk->scores && tk->kind ? 0 : -1;
}

// Bytes in the UTF-8 character that starts with byte c (1 for a stray byte).
static int utf8_length(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 1;
}

// Length of the valid UTF-8 character at s[0..n), or 1 for an invalid one.
static int utf8_char(const unsigned char *s, size_t n) {
    int len = utf8_length(s[0]);
    if ((size_t)len > n) return 1;
    for (int i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 1;
    if (len == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0))) return 1;
    if (len == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))) return 1;
    return len;
}

// A symbol is a span of the text; merged symbols absorb their right neighbour.
typedef struct { int start, len, prev, next; } Symbol;
// A candidate merge of symbols left and left's next, scored by the merged piece.
typedef struct { float score; int left, len; } Merge;

static int merge_before(const Merge *a, const Merge *b) { // higher score first, then leftmost
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(Merge *heap, int *n, Merge m) {
    int i = (*n)++;
    while (i > 0 && merge_before(&m, &heap[(i - 1) / 2])) { heap[i] = heap[(i - 1) / 2]; i = (i - 1) / 2; }
    heap[i] = m;
}

static Merge heap_pop(Merge *heap, int *n) {
    Merge top = heap[0], last = heap[--*n];
    int i = 0;
    for (;;) {
        int child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && merge_before(&heap[child + 1], &heap[child])) child++;
        if (!merge_before(&heap[child], &last)) break;
        heap[i] = heap[child];
        i = child;
    }
    heap[i] = last;
    return top;
}

// Queues the merge of symbol left with its right neighbour if that makes a piece.
static void queue_merge(const Tokenizer *tk, const char *text, const Symbol *sym, int left, Merge *heap,
                        int *n_heap) {
    if (left < 0 || sym[left].next < 0) return;
    int len = sym[left].len + sym[sym[left].next].len;
    int id = lookup_piece(tk, text + sym[left].start, (size_t)len);
    if (id >= 0) heap_push(heap, n_heap, (Merge){.score = tk->scores[id], .left = left, .len = len});
}

// SentencePiece's normalizer (identity rules), writing into out (room for
// 3 * len + 1 bytes); returns the length. The space symbol U+2581 is written
// as ' ', as tokenizer.bin spells it, whether it came from a space or from a
// literal U+2581. A malformed byte becomes U+FFFD. With remove_extra_spaces,
// leading and trailing spaces go and runs of spaces become one.
static size_t normalize(const Tokenizer *tk, const char *text, size_t len, int prefix, char *out) {
    static const char space_symbol[] = "\xE2\x96\x81", replacement[] = "\xEF\xBF\xBD";
    size_t i = 0, n = 0;
    if (tk->remove_extra_spaces)
        while (i < len && text[i] == ' ') i++;
    if (i == len) return 0;
    if (prefix) out[n++] = ' ';
    int prev_space = tk->remove_extra_spaces;
    while (i < len) {
        int clen = utf8_char((const unsigned char *)text + i, len - i);
        int valid = clen > 1 || (unsigned char)text[i] < 0x80;
        if (text[i] == ' ' && prev_space) { i++; continue; }
        if (!valid) { memcpy(out + n, replacement, 3); n += 3; }
        else if (clen == 3 && memcmp(text + i, space_symbol, 3) == 0) out[n++] = ' ';
        else { memcpy(out + n, text + i, (size_t)clen); n += (size_t)clen; }
        prev_space = tk->remove_extra_spaces && text[i] == ' ';
        i += (size_t)clen;
    }
    if (tk->remove_extra_spaces)
        while (n > 0 && out[n - 1] == ' ') n--;
    return n;
}

// Appends SentencePiece's pieces of text[0..len), which holds no
// user-defined token, with the dummy prefix if prefix.
static int encode_sentencepiece_text(Tokenizer *tk, const char *text, size_t len, int prefix, int *tokens,
                                     int *n_tokens) {
    char *s = malloc(3 * len + 2);
    Symbol *sym = malloc((3 * len + 2) * sizeof(Symbol));
    Merge *heap = malloc((3 * len + 2) * 3 * sizeof(Merge)); // n initial + 2 per merge
    if (!s || !sym || !heap) { free(s); free(sym); free(heap); return fail("out of memory encoding a prompt"); }
    size_t n = normalize(tk, text, len, prefix, s);
    int n_sym = 0, n_heap = 0;
    for (size_t i = 0; i < n; n_sym++) { // one symbol per UTF-8 character
        int clen = utf8_char((const unsigned char *)s + i, n - i);
        sym[n_sym] = (Symbol){.start = (int)i, .len = clen, .prev = n_sym - 1, .next = n_sym + 1};
        i += (size_t)clen;
    }
    if (n_sym > 0) sym[n_sym - 1].next = -1;
    for (int i = 0; i < n_sym; i++) queue_merge(tk, s, sym, i, heap, &n_heap);
    while (n_heap > 0) {
        Merge m = heap_pop(heap, &n_heap);
        Symbol *left = &sym[m.left];
        // stale if either side has changed since this merge was queued
        if (left->len == 0 || left->next < 0 || left->len + sym[left->next].len != m.len) continue;
        Symbol *right = &sym[left->next];
        left->len += right->len;
        left->next = right->next;
        if (right->next >= 0) sym[right->next].prev = m.left;
        right->len = 0;
        queue_merge(tk, s, sym, left->prev, heap, &n_heap);
        queue_merge(tk, s, sym, m.left, heap, &n_heap);
    }
    for (int i = n_sym > 0 ? 0 : -1; i >= 0; i = sym[i].next) {
        int id = lookup_piece(tk, s + sym[i].start, (size_t)sym[i].len);
        if (id >= 0) { tokens[(*n_tokens)++] = id; continue; }
        for (int j = 0; j < sym[i].len; j++) { // byte fallback
            int b = tk->byte_token[(unsigned char)s[sym[i].start + j]];
            tokens[(*n_tokens)++] = b >= 0 ? b : tk->unk_id;
        }
    }
    free(s); free(sym); free(heap);
    return 0;
}

// The longest user-defined token that text[0..len) starts with, or -1; *n
// is how many bytes of text it takes. One walk down the trie.
static int user_token_at(const Tokenizer *tk, const char *text, size_t len, size_t *n) {
    int node = 0, found = -1;
    for (size_t i = 0; i < len; i++) {
        int c = tk->user_trie[node].child;
        while (c >= 0 && tk->user_trie[c].byte != (unsigned char)text[i]) c = tk->user_trie[c].sibling;
        if (c < 0) break;
        node = c;
        if (tk->user_trie[node].id >= 0) { found = tk->user_trie[node].id; *n = i + 1; }
    }
    return found;
}

// SentencePiece's encoding of text[0..len) (see encode). User-defined
// tokens (GGUF) are taken out of the raw text first, longest at each place,
// as SentencePiece, llama.cpp and Hugging Face do: a literal U+2581 U+2581 is
// Gemma's user-defined token, while two spaces become pieces by merging.
// The dummy prefix goes only before text that starts the prompt.
static int encode_sentencepiece(Tokenizer *tk, const char *text, size_t len, int add_bos, int add_eos, int *tokens,
                                int *n_tokens) {
    *n_tokens = 0;
    if (add_bos) tokens[(*n_tokens)++] = tk->bos_id;
    if (len > (size_t)INT_MAX / 4) return fail("prompt of %zu bytes is too long", len);
    for (size_t start = 0, i = 0; i <= len; i++) { // pieces between user-defined tokens
        size_t n = 0;
        int id = i < len && tk->n_user_tokens > 0 ? user_token_at(tk, text + i, len - i, &n) : -1;
        if (id < 0 && i < len) continue;
        if (i > start && encode_sentencepiece_text(tk, text + start, i - start, tk->add_dummy_prefix && start == 0,
                                                   tokens, n_tokens) != 0)
            return -1;
        if (id >= 0) {
            tokens[(*n_tokens)++] = id;
            i += n - 1;
            start = i + 1;
        }
    }
    if (add_eos) tokens[(*n_tokens)++] = tk->eos_id;
    return 0;
}

// The bytes that token prints after prev_token: byte tokens give their one
// raw byte, control tokens nothing, and a SentencePiece piece's leading
// space is dropped right after BOS when it is the dummy prefix (Gemma adds
// none: its spaces are the text's). A byte-level
// BPE token gives its raw bytes, perhaps part of a UTF-8 character.
const char *decode(Tokenizer *tk, int prev_token, int token, size_t *len) {
    static char byte_piece[256][2];
    if (token < 0 || token >= tk->vocab_size || tk->kind[token] == TOKEN_CONTROL) { *len = 0; return ""; }
    const char *p = tk->vocab[token];
    *len = (size_t)tk->piece_len[token];
    if (tk->kind[token] == TOKEN_BYTE) {
        int b = (int)strtol(p + 3, NULL, 16);
        byte_piece[b][0] = (char)b;
        *len = 1;
        return byte_piece[b];
    }
    if (prev_token == tk->bos_id && p[0] == ' ' && !tk->byte_level && tk->add_dummy_prefix) { p++; (*len)--; }
    return p;
}

// Whether generation stops at token: BOS (llama2.c's models end a text
// with it), EOS, and the model's other end-of-generation tokens (GGUF).
static int ends_generation(const Tokenizer *tk, int token) {
    if (token == tk->bos_id || token == tk->eos_id) return 1;
    for (int i = 0; i < tk->n_eog; i++)
        if (token == tk->eog[i]) return 1;
    return 0;
}

/* ----------------------------------------------------------------------------
   Tokenizer: byte-level BPE (GPT-2, Llama 3, Qwen 2), loaded from GGUF (see
   gguf_vocab_bpe in the engine room), which turns every token back into its
   raw bytes: encoding and decoding work on raw bytes.

   Encoding first takes out the user-defined tokens the text spells (as
   llama.cpp and Hugging Face do; never a control token: those only come
   from templates, by id). Each piece of text in between is split into
   words by a hand-written matcher for the model's pre-tokenizer, the
   regular expression of its tokenizer.json. Within each word, starting from
   one symbol per byte, the lowest-ranked merge applies first (leftmost on
   ties), with the heap of the SentencePiece path: a merge's score is minus
   its rank. */

// The pre-tokenizers, by the expression each model's tokenizer.json gives:
// PRE_LLAMA3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//             ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// PRE_QWEN2   the same with \p{N} (one digit) for \p{N}{1,3}
// PRE_GPT2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// PRE_DIGITS  every \p{N} alone first, then GPT-2's expression on the rest
// PRE_O200K   tiktoken's o200k_base (gpt-oss, GPT-4o), with A = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
//             and B = [\p{Ll}\p{Lm}\p{Lo}\p{M}], C = (?i:'s|'t|'re|'ve|'m|'ll|'d):
//             [^\r\n\p{L}\p{N}]?A*B+C?|[^\r\n\p{L}\p{N}]?A+B*C?|\p{N}{1,3}|
//              ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
enum { PRE_LLAMA3, PRE_QWEN2, PRE_GPT2, PRE_DIGITS, PRE_O200K };

// Code point classes for the pre-tokenizers (\p{L}, \p{N}, \s), from the
// Unicode tables at the end of this file.
enum { CHAR_OTHER, CHAR_LETTER, CHAR_NUMBER, CHAR_SPACE };
static int unicode_class(uint32_t c);
// o200k's classes A and B above, as bits: a capital (Lu Lt) is only in A, a
// lowercase letter (Ll) only in B, other letters (Lm Lo) and marks in both.
enum { IN_A = 1, IN_B = 2 };
static int unicode_case(uint32_t c);

// The code point of the valid UTF-8 character s[0..len).
static uint32_t utf8_decode(const unsigned char *s, int len) {
    if (len == 1) return s[0];
    uint32_t c = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) c = c << 6 | (s[i] & 0x3F);
    return c;
}

// Where the merge making token merged from a left part of left_len bytes
// sits in the merge table, or the empty slot it would take.
static size_t pair_slot(const Tokenizer *tk, int merged, int left_len) {
    uint64_t h = ((uint64_t)(uint32_t)merged << 32 | (uint32_t)left_len) * 0x9E3779B97F4A7C15ull;
    size_t mask = tk->pairs_size - 1, i = (size_t)(h >> 32) & mask;
    while (tk->pairs[i].merged >= 0 && (tk->pairs[i].merged != merged || tk->pairs[i].left_len != left_len))
        i = (i + 1) & mask;
    return i;
}

// The merge of the adjacent spans s[0..left_len) and s[left_len..len), or
// NULL if they do not merge.
static const BpePair *bpe_pair(const Tokenizer *tk, const char *s, int left_len, int len) {
    int merged = lookup_piece(tk, s, (size_t)len);
    if (merged < 0) return NULL;
    const BpePair *p = &tk->pairs[pair_slot(tk, merged, left_len)];
    return p->merged >= 0 ? p : NULL;
}

/* Pre-tokenizers. Text is a sequence of units: a valid UTF-8 character, or
   one byte that starts no valid character. A bad byte counts as a
   non-letter, non-number, non-space unit, as the U+FFFD that llama.cpp puts
   in its place, but keeps its own byte, so that decoding gives back exactly
   the text. Each matcher returns the length in units of the pattern's
   match at pos, end being where the text (or its digit-free chunk) ends. */

typedef struct {
    uint32_t *cp;       // (n + 1) code points, U+FFFD for a bad byte
    unsigned char *cls; // (n + 1) CHAR_* classes
    int *at;            // (n + 1) byte offsets; at[n] is the text's length
    size_t n;
} Units;

static int is_newline(uint32_t c) { return c == '\r' || c == '\n'; }

// Unicode's simple case folding, as far as it reaches s t r e v m l d:
// A-Z, and U+017F LONG S, which folds to s.
static uint32_t fold_case(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
    return c == 0x17F ? 's' : c;
}

// 's|'t|'re|'ve|'m|'ll|'d, any_case for Llama 3's (?i:...). Case-insensitive
// as the regex engines are, so "'\u017F" counts too (llama.cpp's rewrite
// '[sS]|'[tT]|... misses just that one).
static size_t match_contraction(const Units *u, size_t pos, size_t end, int any_case) {
    if (u->cp[pos] != '\'' || pos + 1 >= end) return 0;
    uint32_t a = u->cp[pos + 1], c = pos + 2 < end ? u->cp[pos + 2] : 0;
    if (any_case) { a = fold_case(a); c = fold_case(c); }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && c == 'e') || (a == 'v' && c == 'e') || (a == 'l' && c == 'l')) return 3;
    return 0;
}

// \s+(?!\S)|\s+ at a space: the run of spaces but its last one when a
// non-space follows (that one starts the next word), all of it at the end.
static size_t match_spaces(const Units *u, size_t pos, size_t end) {
    size_t i = pos;
    while (i < end && u->cls[i] == CHAR_SPACE) i++;
    return i - pos > 1 && i < end ? i - pos - 1 : i - pos;
}

// \s*[\r\n]+|\s+(?!\S)|\s+ at a space: the run of spaces up to its last
// newline if it has one, else as match_spaces.
static size_t match_space_runs(const Units *u, size_t pos, size_t end) {
    size_t last_newline = 0;
    for (size_t i = pos; i < end && u->cls[i] == CHAR_SPACE; i++)
        if (is_newline(u->cp[i])) last_newline = i + 1;
    if (last_newline > 0) return last_newline - pos;
    size_t n = match_spaces(u, pos, end);
    return n > 0 ? n : 1; // every unit matches before this; 1 keeps progress certain
}

// Llama 3's expression, or Qwen 2's when max_digits is 1.
static size_t match_llama3(const Units *u, size_t pos, size_t end, size_t max_digits) {
    const unsigned char *k = u->cls;
    size_t i = pos, n = match_contraction(u, pos, end, 1);
    if (n > 0) return n;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    int lead = !is_newline(u->cp[i]) && k[i] != CHAR_NUMBER; // may stand before the letters
    if (k[i] == CHAR_LETTER || (lead && i + 1 < end && k[i + 1] == CHAR_LETTER)) {
        for (i++; i < end && k[i] == CHAR_LETTER; i++) {}
        return i - pos;
    }
    // \p{N}{1,3}
    if (k[i] == CHAR_NUMBER) {
        while (i < end && k[i] == CHAR_NUMBER && i - pos < max_digits) i++;
        return i - pos;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    if (u->cp[i] == ' ' && i + 1 < end) i++;
    if (k[i] == CHAR_OTHER) {
        while (i < end && k[i] == CHAR_OTHER) i++;
        while (i < end && is_newline(u->cp[i])) i++;
        return i - pos;
    }
    return match_space_runs(u, pos, end);
}

// IN_A | IN_B bits of unit i (0 for a bad byte, number or space).
static int unit_case(const Units *u, size_t i) {
    return u->cls[i] == CHAR_LETTER || u->cls[i] == CHAR_OTHER ? unicode_case(u->cp[i]) : 0;
}

// Units that A*B+ (a_only 0) or A+B* (a_only 1) match from s, 0 if none.
// A* backtracks as the regex engine does: it gives back units until one
// in B follows.
static size_t match_cased(const Units *u, size_t s, size_t end, int a_only) {
    size_t a = s;
    while (a < end && (unit_case(u, a) & IN_A)) a++;
    if (a_only) {
        if (a == s) return 0;
        while (a < end && (unit_case(u, a) & IN_B)) a++;
        return a - s;
    }
    for (size_t j = a + 1; j-- > s;) // B+ from the last unit of B at or before a
        if (j < end && (unit_case(u, j) & IN_B)) {
            size_t b = j + 1;
            while (b < end && (unit_case(u, b) & IN_B)) b++;
            return b - s;
        }
    return 0;
}

// tiktoken's o200k_base expression.
static size_t match_o200k(const Units *u, size_t pos, size_t end) {
    // [^\r\n\p{L}\p{N}]?A*B+C? then [^\r\n\p{L}\p{N}]?A+B*C?, each first with the lead unit
    int lead = !is_newline(u->cp[pos]) && u->cls[pos] != CHAR_LETTER && u->cls[pos] != CHAR_NUMBER;
    for (int a_only = 0; a_only < 2; a_only++)
        for (int skip = lead; skip >= 0; skip--) {
            size_t n = match_cased(u, pos + (size_t)skip, end, a_only);
            if (n == 0) continue;
            size_t e = pos + (size_t)skip + n;
            return e - pos + (e < end ? match_contraction(u, e, end, 1) : 0);
        }
    const unsigned char *k = u->cls;
    size_t i = pos;
    // \p{N}{1,3}
    if (k[i] == CHAR_NUMBER) {
        while (i < end && k[i] == CHAR_NUMBER && i - pos < 3) i++;
        return i - pos;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
    if (u->cp[i] == ' ' && i + 1 < end) i++;
    if (k[i] == CHAR_OTHER) {
        while (i < end && k[i] == CHAR_OTHER) i++;
        while (i < end && (is_newline(u->cp[i]) || u->cp[i] == '/')) i++;
        return i - pos;
    }
    return match_space_runs(u, pos, end);
}

// GPT-2's expression.
static size_t match_gpt2(const Units *u, size_t pos, size_t end) {
    size_t i = pos, n = match_contraction(u, pos, end, 0);
    if (n > 0) return n;
    if (u->cp[i] == ' ' && i + 1 < end && u->cls[i + 1] != CHAR_SPACE) i++; // ' ?' before a letter, number or other
    int cls = u->cls[i];
    if (cls != CHAR_SPACE) { // ' ?\p{L}+', ' ?\p{N}+' or ' ?[^\s\p{L}\p{N}]+'
        while (i < end && u->cls[i] == cls) i++;
        return i - pos;
    }
    return match_spaces(u, pos, end);
}

// Length in units of the next pre-token at pos, before end.
static size_t pre_token(int pre, const Units *u, size_t pos, size_t end) {
    switch (pre) {
    case PRE_LLAMA3: return match_llama3(u, pos, end, 3);
    case PRE_QWEN2: return match_llama3(u, pos, end, 1);
    case PRE_O200K: return match_o200k(u, pos, end);
    default: return match_gpt2(u, pos, end);
    }
}

// Splits text[0..len) into units, into u's arrays (room for len + 1).
static void split_units(Units *u, const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    size_t n = 0;
    for (size_t i = 0; i < len; n++) {
        int clen = utf8_char(s + i, len - i);
        int bad = clen == 1 && s[i] >= 0x80;
        u->cp[n] = bad ? 0xFFFD : utf8_decode(s + i, clen);
        u->cls[n] = bad ? CHAR_OTHER : (unsigned char)unicode_class(u->cp[n]);
        u->at[n] = (int)i;
        i += (size_t)clen;
    }
    u->at[n] = (int)len;
    u->n = n;
}

/* Merging. Symbols are spans of the text's bytes, indexed by where they
   start, with ids[start] the span's token; a word's symbols are linked only
   to each other, so merges never cross words and one heap serves the whole
   text. */

// Queues the merge of symbol left with its right neighbour if there is one.
static void bpe_queue_merge(const Tokenizer *tk, const char *text, const Symbol *sym, const int *ids, int left,
                            Merge *heap, int *n_heap) {
    if (left < 0 || sym[left].next < 0 || ids[left] < 0 || ids[sym[left].next] < 0) return;
    int len = sym[left].len + sym[sym[left].next].len;
    const BpePair *p = bpe_pair(tk, text + left, sym[left].len, len);
    if (p) heap_push(heap, n_heap, (Merge){.score = -(float)p->rank, .left = left, .len = len});
}

// Makes symbols of the word text[from..to): the whole of it if it is a
// token and the model ignores merges for those, else one per byte.
static void start_word(const Tokenizer *tk, const char *text, int from, int to, Symbol *sym, int *ids, Merge *heap,
                       int *n_heap) {
    if (tk->ignore_merges) {
        int id = lookup_piece(tk, text + from, (size_t)(to - from));
        if (id >= 0) {
            sym[from] = (Symbol){.start = from, .len = to - from, .prev = -1, .next = -1};
            ids[from] = id;
            return;
        }
    }
    for (int i = from; i < to; i++) {
        sym[i] = (Symbol){.start = i, .len = 1, .prev = i > from ? i - 1 : -1, .next = i + 1 < to ? i + 1 : -1};
        ids[i] = tk->byte_token[(unsigned char)text[i]]; // -1 (never merged, dropped) if the vocabulary lacks it
    }
    for (int i = from; i + 1 < to; i++) bpe_queue_merge(tk, text, sym, ids, i, heap, n_heap);
}

// Splits text[0..len) into words, merges within each word and appends the
// resulting ids to tokens. u, sym, ids and heap are scratch for len bytes.
static void bpe_merge_text(const Tokenizer *tk, const char *text, size_t len, Units *u, Symbol *sym, int *ids,
                           Merge *heap, int *tokens, int *n_tokens) {
    int n_heap = 0;
    split_units(u, text, len);
    for (size_t pos = 0; pos < u->n;) {
        size_t end = u->n; // PRE_DIGITS: a digit alone, or the run up to the next digit
        if (tk->pre == PRE_DIGITS)
            for (end = pos + 1; u->cls[pos] != CHAR_NUMBER && end < u->n && u->cls[end] != CHAR_NUMBER; end++) {}
        while (pos < end) {
            size_t n = pre_token(tk->pre, u, pos, end);
            start_word(tk, text, u->at[pos], u->at[pos + n], sym, ids, heap, &n_heap);
            pos += n;
        }
    }
    while (n_heap > 0) {
        Merge m = heap_pop(heap, &n_heap);
        Symbol *left = &sym[m.left];
        // stale if either side has changed since this merge was queued (spans only grow)
        if (left->len == 0 || left->next < 0 || left->len + sym[left->next].len != m.len) continue;
        Symbol *right = &sym[left->next];
        ids[m.left] = bpe_pair(tk, text + m.left, left->len, m.len)->merged;
        left->len += right->len;
        left->next = right->next;
        if (right->next >= 0) sym[right->next].prev = m.left;
        right->len = 0;
        bpe_queue_merge(tk, text, sym, ids, left->prev, heap, &n_heap);
        bpe_queue_merge(tk, text, sym, ids, m.left, heap, &n_heap);
    }
    for (int i = 0; i < (int)len; i += sym[i].len)
        if (ids[i] >= 0) tokens[(*n_tokens)++] = ids[i];
}

// Byte-level BPE's encoding of text[0..len) (see encode).
static int encode_bpe(const Tokenizer *tk, const char *text, size_t len, int add_bos, int add_eos, int *tokens,
                      int *n_tokens) {
    *n_tokens = 0;
    if (add_bos && tk->bos_id >= 0) tokens[(*n_tokens)++] = tk->bos_id;
    if (len > (size_t)INT_MAX / 4) return fail("prompt of %zu bytes is too long", len);
    Units u = {.cp = malloc((len + 1) * sizeof *u.cp), .cls = malloc(len + 1), .at = malloc((len + 1) * sizeof *u.at)};
    Symbol *sym = malloc((len + 1) * sizeof *sym);
    int *ids = malloc((len + 1) * sizeof *ids);
    Merge *heap = malloc((len + 1) * 3 * sizeof *heap); // n initial + 2 per merge
    int ok = u.cp && u.cls && u.at && sym && ids && heap;
    for (size_t start = 0, i = 0; ok && i <= len; i++) { // pieces between user-defined tokens
        size_t n = 0;
        int id = i < len && tk->n_user_tokens > 0 ? user_token_at(tk, text + i, len - i, &n) : -1;
        if (id < 0 && i < len) continue;
        bpe_merge_text(tk, text + start, i - start, &u, sym, ids, heap, tokens, n_tokens);
        if (id >= 0) {
            tokens[(*n_tokens)++] = id;
            i += n - 1;
            start = i + 1;
        }
    }
    if (ok && add_eos && tk->eos_id >= 0) tokens[(*n_tokens)++] = tk->eos_id;
    free(u.cp); free(u.cls); free(u.at); free(sym); free(ids); free(heap);
    return ok ? 0 : fail("out of memory encoding a prompt");
}

// Encodes text[0..len) into tokens, which has room for 3 * len + 3 ids,
// always as plain text: no control token comes from what the text spells.
// 0 ok, -1 with error_message.
int encode(Tokenizer *tk, const char *text, size_t len, int add_bos, int add_eos, int *tokens, int *n_tokens) {
    if (tk->byte_level) return encode_bpe(tk, text, len, add_bos, add_eos, tokens, n_tokens);
    return encode_sentencepiece(tk, text, len, add_bos, add_eos, tokens, n_tokens);
}

/* ----------------------------------------------------------------------------
   Sampler. Order: repetition penalty, temperature (0 = greedy argmax), softmax,
   top-k, top-p, min-p, renormalize, draw. */

typedef struct {
    float temperature;    // 0 = greedy
    float top_p;          // >= 1 = off
    int top_k;            // 0 = off
    float min_p;          // 0 = off
    float repeat_penalty; // 1 = off
    int repeat_last_n;    // how many recent tokens the penalty looks at
} SamplerParams;

typedef struct { float prob; int index; } ProbIndex;

typedef struct {
    SamplerParams params;
    int vocab_size;
    ProbIndex *candidates; // (vocab_size) the tokens still in the running
    int n_candidates;
    uint64_t rng_state;
    unsigned char *seen;   // (vocab_size) scratch for the repetition penalty
} Sampler;

static uint64_t splitmix64(uint64_t x) { // spreads any seed, 0 included, over the state
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint32_t random_u32(uint64_t *state) { // xorshift64*
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

static double random_unit(uint64_t *state) { // [0, 1) with 53 random bits
    uint64_t hi = random_u32(state) >> 5, lo = random_u32(state) >> 6;
    return (double)(hi * 67108864.0 + lo) / 9007199254740992.0;
}

int sampler_init(Sampler *s, int vocab_size, SamplerParams params, uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->params = params;
    s->vocab_size = vocab_size;
    s->rng_state = splitmix64(seed);
    if (s->rng_state == 0) s->rng_state = 1; // xorshift's one fixed point
    s->candidates = malloc((size_t)vocab_size * sizeof(ProbIndex));
    s->seen = calloc((size_t)vocab_size, 1);
    return s->candidates && s->seen ? 0 : -1;
}

void sampler_free(Sampler *s) {
    free(s->candidates);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

// llama.cpp's penalty: each distinct recent token once, positive logits
// divided by the penalty and negative ones multiplied.
static void apply_repeat_penalty(Sampler *s, float *logits, const int *recent, int n_recent) {
    float penalty = s->params.repeat_penalty;
    if (penalty == 1.0f || n_recent <= 0) return;
    int first = n_recent > s->params.repeat_last_n ? n_recent - s->params.repeat_last_n : 0;
    for (int i = first; i < n_recent; i++) {
        int t = recent[i];
        if (t < 0 || t >= s->vocab_size || s->seen[t]) continue;
        s->seen[t] = 1;
        logits[t] = logits[t] > 0 ? logits[t] / penalty : logits[t] * penalty;
    }
    for (int i = first; i < n_recent; i++)
        if (recent[i] >= 0 && recent[i] < s->vocab_size) s->seen[recent[i]] = 0;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

static int compare_prob_desc(const void *a, const void *b) { // ties: lower id first
    const ProbIndex *x = a, *y = b;
    if (x->prob != y->prob) return x->prob < y->prob ? 1 : -1;
    return x->index - y->index;
}

// Penalty, temperature and softmax: logits become probabilities in place.
static void to_probabilities(Sampler *s, float *logits, const int *recent, int n_recent) {
    apply_repeat_penalty(s, logits, recent, n_recent);
    for (int i = 0; i < s->vocab_size; i++) logits[i] /= s->params.temperature;
    softmax(logits, s->vocab_size);
}

// Leaves the tokens that may be drawn in s->candidates[0..n), sorted by
// probability (descending) and renormalized; returns n. Modifies logits.
int sampler_candidates(Sampler *s, float *logits, const int *recent, int n_recent) {
    const SamplerParams *p = &s->params;
    int n = s->vocab_size;
    to_probabilities(s, logits, recent, n_recent);
    float p_max = logits[argmax(logits, n)];
    // Cheap pre-filter before sorting: a token with probability <= (1-top_p)/n
    // can never be inside the nucleus, nor one under min_p * p_max.
    float cutoff = 0.0f;
    if (p->top_p < 1.0f) cutoff = (1.0f - p->top_p) / n * 0.999f;
    if (p->min_p > 0.0f && p->min_p * p_max > cutoff) cutoff = p->min_p * p_max;
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (logits[i] >= cutoff) s->candidates[kept++] = (ProbIndex){.prob = logits[i], .index = i};
    qsort(s->candidates, (size_t)kept, sizeof(ProbIndex), compare_prob_desc);
    if (p->top_k > 0 && p->top_k < kept) kept = p->top_k;
    if (p->top_p < 1.0f) { // the smallest prefix whose mass reaches top_p
        double mass = 0.0;
        for (int i = 0; i < kept; i++) {
            mass += s->candidates[i].prob;
            if (mass >= p->top_p) { kept = i + 1; break; }
        }
    }
    if (p->min_p > 0.0f)
        while (kept > 1 && s->candidates[kept - 1].prob < p->min_p * p_max) kept--;
    double total = 0.0;
    for (int i = 0; i < kept; i++) total += s->candidates[i].prob;
    for (int i = 0; i < kept; i++) s->candidates[i].prob = (float)(s->candidates[i].prob / total);
    s->n_candidates = kept;
    return kept;
}

// The next token: argmax at temperature 0, else a draw from the candidates.
int sample(Sampler *s, float *logits, const int *recent, int n_recent) {
    if (s->params.temperature < 1e-6f) { // the limit of a vanishing temperature is argmax
        apply_repeat_penalty(s, logits, recent, n_recent);
        return argmax(logits, s->vocab_size);
    }
    const SamplerParams *p = &s->params;
    double coin = random_unit(&s->rng_state), cdf = 0.0;
    if (p->top_k == 0 && p->top_p >= 1.0f && p->min_p == 0.0f) { // nothing to cut: no sort needed
        to_probabilities(s, logits, recent, n_recent);
        for (int i = 0; i < s->vocab_size; i++) {
            cdf += logits[i];
            if (coin < cdf) return i;
        }
        return argmax(logits, s->vocab_size); // rounding left coin just above the total
    }
    int n = sampler_candidates(s, logits, recent, n_recent);
    for (int i = 0; i < n; i++) {
        cdf += s->candidates[i].prob;
        if (coin < cdf) return s->candidates[i].index;
    }
    return n > 0 ? s->candidates[n - 1].index : argmax(logits, s->vocab_size); // none: non-finite logits
}

// Generation stops on NaN or infinite logits: a broken model, not text.
static int logits_finite(const float *logits, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(logits[i])) return 0;
    return 1;
}

/* ----------------------------------------------------------------------------
   Output. Text goes to stdout as valid UTF-8: a character the model spells in
   byte tokens is held until complete, an invalid sequence becomes U+FFFD, and
   control characters (C0 other than tab and newlines, DEL, C1) are dropped:
   a model must not drive the terminal. */

typedef struct {
    FILE *out;
    unsigned char pending[4]; // the start of a multi-byte character
    int n_pending;
} TextOut;

static void text_put_byte(TextOut *o, unsigned char c) {
    static const char replacement[] = "\xEF\xBF\xBD";
    if (o->n_pending > 0) {
        if ((c & 0xC0) == 0x80) {
            o->pending[o->n_pending++] = c;
            int need = utf8_length(o->pending[0]);
            if (o->n_pending < need) return;
            int c1_control = o->pending[0] == 0xC2 && o->pending[1] < 0xA0; // U+0080..U+009F, e.g. CSI
            if (utf8_char(o->pending, (size_t)need) != need) fputs(replacement, o->out);
            else if (!c1_control) fwrite(o->pending, 1, (size_t)need, o->out);
            o->n_pending = 0;
            return;
        }
        fputs(replacement, o->out); // the character was cut short
        o->n_pending = 0;
    }
    if (c < 0x80) {
        if (c >= 0x20 ? c != 0x7F : (c == '\n' || c == '\t' || c == '\r')) fputc(c, o->out);
    } else if (utf8_length(c) > 1) {
        o->pending[o->n_pending++] = c;
    } else {
        fputs(replacement, o->out);
    }
}

static void text_put(TextOut *o, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) text_put_byte(o, (unsigned char)bytes[i]);
}

// The errno of the first flush of output that failed: at the end, a
// closed pipe (EPIPE, when SIGPIPE is ignored) is told from a full disk.
static int output_errno;

static void flush_output(FILE *out) {
    if (fflush(out) != 0 && !output_errno) output_errno = errno;
}

static void text_finish(TextOut *o) {
    if (o->n_pending > 0) fputs("\xEF\xBF\xBD", o->out);
    o->n_pending = 0;
    flush_output(o->out);
}

// Ctrl-C sets this; generation stops at the next token (a second Ctrl-C exits).
static volatile sig_atomic_t interrupted = 0;

// The temporary file an output (-o) is being written to, until it is renamed
// into place: a second Ctrl-C or a SIGTERM removes it before exiting.
static char *volatile unfinished_output = NULL;

void on_interrupt(int sig) {
    (void)sig;
    if (interrupted) {
        if (unfinished_output) unlink(unfinished_output);
        _exit(130);
    }
    interrupted = 1;
}

void on_terminate(int sig) {
    if (unfinished_output) unlink(unfinished_output);
    _exit(128 + sig);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ----------------------------------------------------------------------------
   The loops: generate, tokenize, logits (here) and chat (after them). */

// 1 if the two paths name the same existing file.
int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// Encodes text, with BOS if the model adds one, into a new array (caller
// frees). NULL on failure.
static int *encode_new(Tokenizer *tk, const char *text, size_t len, int *n_tokens) {
    int *tokens = len < SIZE_MAX / 16 ? malloc((3 * len + 3) * sizeof(int)) : NULL;
    if (!tokens) { fail("out of memory for a prompt of %zu bytes", len); return NULL; }
    if (encode(tk, text, len, tk->add_bos, 0, tokens, n_tokens) != 0) { free(tokens); return NULL; }
    return tokens;
}

// encode_new for a prompt the model is to run: it may not be empty.
static int *encode_prompt(Tokenizer *tk, const char *text, size_t len, int *n_tokens) {
    int *tokens = encode_new(tk, text, len, n_tokens);
    if (tokens && *n_tokens == 0) {
        free(tokens);
        fail("the prompt is empty and this model's tokenizer adds no BOS, so there is nothing to start from: "
             "give a prompt with -i or -f");
        return NULL;
    }
    return tokens;
}

// llama2.c's generate: steps counts positions, prompt included (BOS is
// position 0; 0 = up to the context length); the prompt is echoed;
// generation ends at BOS, EOS or another end-of-generation token, or after
// steps positions. A final newline goes to out, then the timing to stderr.
// 0 on success, -1 with error_message (steps shorter than the prompt is
// refused: llama2.c would cut the prompt short).
int generate(Transformer *t, Tokenizer *tk, Sampler *s, const char *prompt, int steps, FILE *out) {
    const Config *c = &t->config;
    int n_prompt;
    int *tokens = encode_prompt(tk, prompt, strlen(prompt), &n_prompt);
    if (!tokens) return -1;
    if (n_prompt > c->seq_len) {
        free(tokens);
        return fail("prompt: %d tokens do not fit the context of %d positions", n_prompt, c->seq_len);
    }
    if (steps <= 0 || steps > c->seq_len) steps = c->seq_len;
    if (steps < n_prompt) {
        free(tokens);
        return fail("-n %d is less than the prompt's %d tokens: -n counts positions, the prompt's included; "
                    "give a larger -n, or -n 0 to run up to the context length", steps, n_prompt);
    }
    int *history = malloc((size_t)(steps + 1) * sizeof(int));
    if (!history) { free(tokens); return fail("out of memory"); }

    // the prompt in blocks (positions 0..n_prompt-1), then echoed: from its
    // first token when the tokenizer adds no BOS (Qwen 2), decoded as if
    // after BOS (SentencePiece drops the first piece's leading space)
    TextOut text = {.out = out};
    double start = now_seconds();
    float *logits = forward_batch(t, tokens, n_prompt, 0, NULL);
    double prompt_done = now_seconds();
    memcpy(history, tokens, (size_t)n_prompt * sizeof(int));
    for (int i = 0; i < n_prompt; i++) {
        size_t len;
        const char *piece = decode(tk, i > 0 ? tokens[i - 1] : tk->bos_id, tokens[i], &len);
        text_put(&text, piece, len);
    }
    flush_output(out);

    int pos = n_prompt - 1, token = tokens[pos], n_generated = 0, err = 0;
    while (pos < steps && !interrupted && !ferror(out)) { // a closed pipe ends it quietly
        if (n_generated > 0) logits = forward(t, token, pos);
        if (!logits_finite(logits, c->vocab_size)) {
            err = fail("the model's logits at position %d are not finite (NaN or infinity)", pos);
            break;
        }
        int next = sample(s, logits, history, pos + 1);
        n_generated++;
        if (ends_generation(tk, next)) break;
        size_t len;
        const char *piece = decode(tk, token, next, &len);
        text_put(&text, piece, len);
        flush_output(out);
        history[++pos] = next;
        token = next;
    }
    text_finish(&text);
    double end = now_seconds();
    if (!ferror(out)) { fputc('\n', out); flush_output(out); } // before the timing, which a terminal shows next
    fprintf(stderr, "prompt: %d tokens, %.1f tok/s; generated: %d tokens, %.1f tok/s\n", n_prompt,
            n_prompt / (prompt_done - start + 1e-9), n_generated, n_generated / (end - prompt_done + 1e-9));
    free(tokens);
    free(history);
    return err;
}

// Prints the ids of text, one line (an empty one for no ids).
int tokenize_mode(Tokenizer *tk, const char *text, size_t len) {
    int n;
    int *tokens = encode_new(tk, text, len, &n);
    if (!tokens) return -1;
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", tokens[i]);
    printf("\n");
    free(tokens);
    return 0;
}

// Reads whitespace-separated token ids for the logits mode.
static int *read_ids(const char *path, const char *text, int vocab_size, int max_ids, int *n_ids) {
    int *ids = malloc(((size_t)max_ids + 1) * sizeof(int));
    if (!ids) { fail("%s: out of memory", path); return NULL; }
    *n_ids = 0;
    for (const char *p = text;;) {
        while (isspace((unsigned char)*p)) p++;
        if (*p == '\0') break;
        char *end;
        errno = 0;
        long id = strtol(p, &end, 10);
        int word = (int)strcspn(p, " \t\n\r\f\v"); // for messages: this word only
        if (word > 20) word = 20;
        if (end == p || (*end && !isspace((unsigned char)*end))) {
            free(ids);
            fail("%s: '%.*s' is not a token id", path, word, p);
            return NULL;
        }
        if (errno || id < 0 || id >= vocab_size) {
            free(ids);
            fail("%s: token id %.*s is outside the vocabulary (0..%d)", path, word, p, vocab_size - 1);
            return NULL;
        }
        if (*n_ids == max_ids) {
            free(ids);
            fail("%s: more than %d ids do not fit the context", path, max_ids);
            return NULL;
        }
        ids[(*n_ids)++] = (int)id;
        p = end;
    }
    if (*n_ids == 0) { free(ids); fail("%s: holds no token ids", path); return NULL; }
    return ids;
}

/* Output files. An output path may name a new file or a regular file; a
   symlink, FIFO, device or directory there is refused and left as it is
   (lstat, so nothing is opened: opening a FIFO would block). A file is
   written beside its path and renamed over it when complete, so a failed
   run leaves the old file whole. */

static int check_output(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : fail("%s: cannot check: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) return 0;
    const char *kind = S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISDIR(st.st_mode) ? "a directory" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : "not a regular file";
    return fail("%s: is %s, which run.c does not replace; give the name of a new or regular file", path, kind);
}

typedef struct {
    FILE *f;          // the file being written
    char *tmp;        // its name, beside path
    const char *path; // where it goes when complete
} Output;

static int output_open(Output *out, const char *path) {
    *out = (Output){.path = path};
    if (check_output(path) != 0) return -1;
    size_t len = strlen(path) + 32;
    if (!(out->tmp = malloc(len))) return fail("out of memory");
    // path.tmpPID beside it; a name too long to take the suffix (file
    // systems allow 255 bytes) is written as .run.tmpPID in its folder
    const char *slash = strrchr(path, '/');
    size_t folder = slash ? (size_t)(slash - path) + 1 : 0;
    if (strlen(path) - folder + 16 > 255) snprintf(out->tmp, len, "%.*s.run.tmp%d", (int)folder, path, (int)getpid());
    else snprintf(out->tmp, len, "%s.tmp%d", path, (int)getpid());
    if (!(out->f = fopen(out->tmp, "wb"))) {
        int e = errno;
        free(out->tmp);
        return fail("%s: cannot write: %s", path, strerror(e));
    }
    unfinished_output = out->tmp;
    return 0;
}

// Closes out and renames it into place, or (err, or a failed write) removes
// it. Returns err, or -1 with error_message.
static int output_close(Output *out, int err) {
    if (fclose(out->f) != 0 && !err) err = fail("%s: write failed: %s", out->path, strerror(errno));
    unfinished_output = NULL;
    if (!err && rename(out->tmp, out->path) != 0) err = fail("%s: cannot rename into place: %s", out->path, strerror(errno));
    if (err) remove(out->tmp);
    free(out->tmp);
    return err;
}

// Feeds ids from position 0, a block at a time, and writes every position's
// logits (float32).
int logits_mode(Transformer *t, const char *ids_path, const char *ids_text, const char *out_path) {
    const Config *c = &t->config;
    int n;
    int *ids = read_ids(ids_path, ids_text, c->vocab_size, c->seq_len, &n);
    if (!ids) return -1;
    float *logits = malloc((size_t)BATCH * c->vocab_size * sizeof(float)); // (BATCH, vocab_size)
    Output out;
    if (!logits || output_open(&out, out_path) != 0) {
        free(ids);
        free(logits);
        return logits ? -1 : fail("out of memory");
    }
    int err = 0;
    for (int pos = 0; pos < n && !err; pos += BATCH) {
        int block = n - pos < BATCH ? n - pos : BATCH;
        size_t values = (size_t)block * c->vocab_size;
        forward_batch(t, ids + pos, block, pos, logits);
        if (fwrite(logits, sizeof(float), values, out.f) != values)
            err = fail("%s: write failed: %s", out_path, strerror(errno));
        if (interrupted) err = fail("%s: interrupted (Ctrl-C); nothing written", out_path);
    }
    err = output_close(&out, err);
    free(logits);
    free(ids);
    return err;
}

/* ----------------------------------------------------------------------------
   Chat, in the model's own template. A turn is rendered as the model's Jinja
   template renders it (control tokens inserted by id, the text between them
   encoded as plain text), and each reply ends with the template's
   end-of-turn in the context:
     llama2   BOS "[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST]" {reply} EOS,
              later turns BOS "[INST] {user} [/INST]" (Meta strips each message)
     mistral  BOS "[INST] {system}\n\n{user} [/INST]" {reply} EOS, later "[INST] {user} [/INST]"
     llama3   BOS <|start_header_id|>system<|end_header_id|>"\n\n{system}"<|eot_id|>
              <|start_header_id|>user<|end_header_id|>"\n\n{user}"<|eot_id|>
              <|start_header_id|>assistant<|end_header_id|>"\n\n" {reply}<|eot_id|>
              (messages trimmed, as the template's | trim does)
     chatml   <|im_start|>"system\n{system}"<|im_end|>"\n"<|im_start|>"user\n{user}"<|im_end|>"\n"
              <|im_start|>"assistant\n" {reply}<|im_end|>"\n"
     zephyr   "<|system|>\n{system}" EOS "\n<|user|>\n{user}" EOS "\n<|assistant|>\n" {reply} EOS,
              later turns "\n<|user|>\n{user}" EOS "\n<|assistant|>\n"
     gemma    BOS <start_of_turn>"user\n{system}\n\n{user}"<end_of_turn>"\n"<start_of_turn>"model\n"
              {reply}<end_of_turn>"\n" (the system prompt folded into the first message,
              which is trimmed, as Gemma 3's template does)
     qwen3    chatml; with --reasoning off (enable_thinking false) the assistant's
              header is followed by an empty <think>"\n\n"</think>"\n\n"
     harmony  <|start|>"system"<|message|>"{identity, dates, Reasoning: LEVEL, channels}"<|end|>
              <|start|>"developer"<|message|>"# Instructions\n\n{system}\n\n"<|end|>
              <|start|>"user"<|message|>"{user}"<|end|><|start|>"assistant" {reply}<|end|>
              (gpt-oss). A reply runs through channels, <|channel|>"analysis"
              <|message|>...<|end|><|start|>"assistant"<|channel|>"final"<|message|>...
              <|return|>, and is kept in the context as the template renders an
              earlier reply: <|channel|>"final"<|message|>{answer}<|end|>. So is
              Qwen3's: its <think>...</think> part dropped.
     deepseek-r1  BOS "{system}"<｜User｜>"{user}"<｜Assistant｜><think>"\n" {reply}<｜end▁of▁sentence｜>
              (the R1 distills; no marker before the system prompt). The prompt
              opens the reasoning; an earlier reply is kept as
              <｜Assistant｜>"{what follows its last </think>}"<｜end▁of▁sentence｜>.
              Their template of January 2025 (as GGUF files made then carry it)
              ends the prompt at <｜Assistant｜>: the model opens <think> itself.
   (chatml and zephyr start with BOS when the model adds one). The first turn
   in the context carries the system prompt. Reasoning (harmony's analysis
   channel, <think>...</think>) is printed between [reasoning] and
   [/reasoning], or not at all with --hide-reasoning. The KV cache holds the
   conversation, so a turn costs only its own tokens. When a turn does not
   fit, the oldest whole turns are dropped and what is kept is evaluated
   again. */

static const char *const template_names[] = {"llama2", "llama3", "chatml", "zephyr", "mistral", "gemma", "qwen3",
                                             "harmony", "deepseek-r1"};
#define TEMPLATE_CHOICES "llama2, llama3, chatml, zephyr, mistral, gemma, qwen3, harmony, deepseek-r1"

// DeepSeek's markers are spelled with U+FF5C (a full-width bar) and U+2581.
#define FULL_BAR "\xEF\xBD\x9C"
#define DEEPSEEK_USER "<" FULL_BAR "User" FULL_BAR ">"
#define DEEPSEEK_ASSISTANT "<" FULL_BAR "Assistant" FULL_BAR ">"
#define DEEPSEEK_END "<" FULL_BAR "end\xE2\x96\x81of\xE2\x96\x81sentence" FULL_BAR ">"

// --reasoning: the template's default, or what the user chose.
enum { REASONING_DEFAULT, REASONING_OFF, REASONING_ON, REASONING_LOW, REASONING_MEDIUM, REASONING_HIGH };
static const char *const reasoning_names[] = {"default", "off", "on", "low", "medium", "high"};

static int contains(const char *s, size_t len, const char *word) {
    size_t n = strlen(word);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(s + i, word, n) == 0) return 1;
    return 0;
}

// The R1 distills' template of January 2025, before DeepSeek's update of
// February 2025: the same text but for the generation prompt, <｜Assistant｜>
// alone (the model writes <think> itself). It renders an earlier reply as
// '<｜Assistant｜>' + content, cut after its last </think>; DeepSeek V3's
// renders it whole, and V3.1's has other prompts.
static int deepseek_r1_early(const char *jinja, size_t len) {
    return contains(jinja, len, DEEPSEEK_USER) && contains(jinja, len, "{{'" DEEPSEEK_ASSISTANT "'}}") &&
           contains(jinja, len, "'" DEEPSEEK_ASSISTANT "' + content") &&
           contains(jinja, len, "content.split('</think>')[-1]") &&
           !contains(jinja, len, DEEPSEEK_ASSISTANT "<think>\\n");
}

// Which template a Jinja chat template is, by distinctive substrings, as
// llama.cpp's llm_chat_detect_template tells them apart.
static int recognize_template(const char *jinja, size_t len) {
    if (contains(jinja, len, "<|start|>") && contains(jinja, len, "<|channel|>")) return TEMPLATE_HARMONY;
    if (contains(jinja, len, "<start_of_turn>")) return TEMPLATE_GEMMA;
    if (contains(jinja, len, "<|im_start|>"))
        return contains(jinja, len, "enable_thinking") ? TEMPLATE_QWEN3 : TEMPLATE_CHATML;
    if (contains(jinja, len, "[SYSTEM_PROMPT]")) return TEMPLATE_UNKNOWN; // Mistral's v7, not rendered here
    if (contains(jinja, len, "[INST]")) return contains(jinja, len, "<<SYS>>") ? TEMPLATE_LLAMA2 : TEMPLATE_MISTRAL;
    if (contains(jinja, len, "<|start_header_id|>") && contains(jinja, len, "<|end_header_id|>"))
        return TEMPLATE_LLAMA3;
    if (contains(jinja, len, "<|user|>")) return TEMPLATE_ZEPHYR;
    // the R1 distills' template, whose generation prompt opens the reasoning,
    // or its January 2025 version (DeepSeek V3's and later templates are neither)
    if (contains(jinja, len, DEEPSEEK_USER) && contains(jinja, len, DEEPSEEK_ASSISTANT "<think>\\n"))
        return TEMPLATE_DEEPSEEK_R1;
    if (deepseek_r1_early(jinja, len)) return TEMPLATE_DEEPSEEK_R1;
    return TEMPLATE_UNKNOWN;
}

// TEMPLATE_* by name (--chat-template), or -1.
static int template_by_name(const char *name) {
    for (int i = 0; i < (int)(sizeof template_names / sizeof *template_names); i++)
        if (!strcmp(name, template_names[i])) return i;
    return -1;
}

// Whether the character at s[0..n) is whitespace to strip: Python's
// str.strip() set (Unicode White_Space and U+001C..U+001F), as Meta's
// reference and the Jinja trim filter strip. *len: the character's length.
static int strip_space_at(const char *s, size_t n, int *len) {
    *len = utf8_char((const unsigned char *)s, n);
    uint32_t c = utf8_decode((const unsigned char *)s, *len);
    return (*len > 1 || (unsigned char)s[0] < 0x80) && (unicode_class(c) == CHAR_SPACE || (c >= 0x1C && c <= 0x1F));
}

// text without its leading and trailing whitespace, in a new string.
static char *strip_copy(const char *text) {
    size_t n = strlen(text), start = 0, end = 0;
    int len, seen = 0;
    for (size_t i = 0; i < n; i += (size_t)len) {
        int space = strip_space_at(text + i, n - i, &len);
        if (!space && !seen) { start = i; seen = 1; }
        if (!space) end = i + (size_t)len;
    }
    char *out = malloc(end - start + 1);
    if (out) { memcpy(out, text + start, end - start); out[end - start] = '\0'; }
    return out;
}

typedef struct {
    char *user;  // the user's message
    int *reply;  // the reply's ids, the template's end-of-turn last
    int n_reply;
} Turn;

#define MAX_END 4 // ids in a template's end-of-turn

typedef struct {
    Transformer *t;
    Tokenizer *tk;
    Sampler *sampler;
    const char *system; // NULL or "" for none
    int max_reply;      // tokens per reply, the end-of-turn excluded
    int template;       // TEMPLATE_*
    int reasoning;      // REASONING_*: --reasoning, as the template takes it (harmony: a level; qwen3: on or off)
    int hide_reasoning; // --hide-reasoning: reasoning is not printed
    char date[16];      // harmony: the current date, YYYY-MM-DD
    int start_header, end_header, eot, im_start, im_end; // the template's control tokens, or -1 (im_start and
                                                          // im_end: Gemma's <start_of_turn> and <end_of_turn>)
    int start, message, channel, end_message, stop, call; // harmony's <|start|>, <|message|>, <|channel|>,
                                                          // <|end|>, <|return|>, <|call|>; or -1
    int think, end_think; // <think> and </think> when the vocabulary has them, or -1
    int user, assistant, end_sentence; // deepseek-r1's <｜User｜>, <｜Assistant｜>, <｜end▁of▁sentence｜>; or -1
    int think_prompt;   // deepseek-r1: the generation prompt opens <think>\n (the current template); 0: the
                        // January 2025 one, <｜Assistant｜> alone, after which the model opens <think> itself
    int n_gen_only;     // ids that end every prompt but not an earlier reply's rendering (the current
                        // deepseek-r1 template's <think>\n): a finished reply takes their place
    int end[MAX_END];   // what ends a reply in the context
    int n_end;
    Turn *turns;        // (n_turns) every turn so far
    int n_turns;
    int first_kept;     // turns before this one were dropped from the context
    int *context;       // (seq_len) ids in the context, in order
    int n_context;      // ids in context[]
    int pos;            // context[0..pos) have been fed to the model
} Chat;

// A growing list of ids, rendered piece by piece; err is set on failure.
typedef struct { Tokenizer *tk; int *ids; int n, cap, err; } Rendering;

static void put_id(Rendering *r, int id) {
    if (r->err || id < 0) return;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        int *grown = realloc(r->ids, (size_t)cap * sizeof(int));
        if (!grown) { r->err = fail("out of memory"); return; }
        r->ids = grown;
        r->cap = cap;
    }
    r->ids[r->n++] = id;
}

// Encodes a piece of text (built from format) as plain text, no BOS.
static void put_text(Rendering *r, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int len = vsnprintf(NULL, 0, format, args);
    va_end(args);
    char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
    int *ids = text ? malloc((3 * (size_t)len + 3) * sizeof(int)) : NULL;
    int n = 0;
    if (!ids || r->err) { free(text); if (!r->err) r->err = fail("out of memory"); return; }
    va_start(args, format);
    vsnprintf(text, (size_t)len + 1, format, args);
    va_end(args);
    if (encode(r->tk, text, (size_t)len, 0, 0, ids, &n) != 0) r->err = -1;
    for (int i = 0; i < n; i++) put_id(r, ids[i]);
    free(text);
    free(ids);
}

// Llama 3's header: <|start_header_id|>{role}<|end_header_id|>.
static void put_header(Rendering *r, const Chat *chat, const char *role) {
    put_id(r, chat->start_header);
    put_text(r, "%s", role);
    put_id(r, chat->end_header);
}

// The Llama 2 turn, as Meta's chat_completion renders it: the system block
// and the message are stripped together.
static void render_llama2(Rendering *r, const char *sys, const char *user) {
    size_t size = strlen(user) + (sys ? strlen(sys) : 0) + 32;
    char *text = malloc(size);
    if (!text) { r->err = fail("out of memory"); return; }
    if (sys) snprintf(text, size, "<<SYS>>\n%s\n<</SYS>>\n\n%s", sys, user);
    else snprintf(text, size, "%s", user);
    char *stripped = strip_copy(text);
    if (stripped) put_text(r, "[INST] %s [/INST]", stripped);
    else r->err = fail("out of memory");
    free(stripped);
    free(text);
}

// Llama 3's messages, each trimmed.
static void render_llama3(Rendering *r, const Chat *chat, const char *sys, const char *user) {
    const char *roles[] = {"system", "user"}, *messages[] = {sys, user};
    for (int i = 0; i < 2; i++) {
        if (!messages[i]) continue;
        char *trimmed = strip_copy(messages[i]);
        if (!trimmed) { r->err = fail("out of memory"); return; }
        put_header(r, chat, roles[i]);
        put_text(r, "\n\n%s", trimmed);
        put_id(r, chat->eot);
        free(trimmed);
    }
    put_header(r, chat, "assistant");
    put_text(r, "\n\n");
}

// Gemma's turn: the system prompt folded into the message, the message trimmed.
static void render_gemma(Rendering *r, const Chat *chat, const char *sys, const char *user) {
    char *trimmed = strip_copy(user);
    if (!trimmed) { r->err = fail("out of memory"); return; }
    put_id(r, chat->im_start);
    put_text(r, "user\n%s%s%s", sys ? sys : "", sys ? "\n\n" : "", trimmed);
    put_id(r, chat->im_end);
    put_text(r, "\n");
    put_id(r, chat->im_start);
    put_text(r, "model\n");
    free(trimmed);
}

// Harmony's message header: <|start|>{role}<|message|>.
static void put_harmony_header(Rendering *r, const Chat *chat, const char *role) {
    put_id(r, chat->start);
    put_text(r, "%s", role);
    put_id(r, chat->message);
}

// gpt-oss's turn; the first carries the system message (with the date and
// the reasoning level) and the user's system prompt as the developer's.
static void render_harmony(Rendering *r, const Chat *chat, const char *sys, const char *user, int first) {
    if (first) {
        put_harmony_header(r, chat, "system");
        put_text(r, "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n"
                 "Current date: %s\n\nReasoning: %s\n\n# Valid channels: analysis, commentary, final. "
                 "Channel must be included for every message.", chat->date, reasoning_names[chat->reasoning]);
        put_id(r, chat->end_message);
        if (sys) {
            put_harmony_header(r, chat, "developer");
            put_text(r, "# Instructions\n\n%s\n\n", sys);
            put_id(r, chat->end_message);
        }
    }
    put_harmony_header(r, chat, "user");
    put_text(r, "%s", user);
    put_id(r, chat->end_message);
    put_id(r, chat->start);
    put_text(r, "assistant");
}

// The prompt of one turn into a new array; first: the turn starts the
// context, and so carries BOS and the system prompt. NULL on failure.
static int *render_turn(Chat *chat, const char *user, int first, int *n) {
    const Tokenizer *tk = chat->tk;
    const char *sys = first && chat->system && chat->system[0] ? chat->system : NULL;
    Rendering r = {.tk = chat->tk};
    int bos = tk->bos_id;
    switch (chat->template) {
    case TEMPLATE_LLAMA3:
        if (first) put_id(&r, bos);
        render_llama3(&r, chat, sys, user);
        break;
    case TEMPLATE_CHATML:
    case TEMPLATE_QWEN3:
        if (first && tk->add_bos) put_id(&r, bos);
        if (sys) { put_id(&r, chat->im_start); put_text(&r, "system\n%s", sys); put_id(&r, chat->im_end); put_text(&r, "\n"); }
        put_id(&r, chat->im_start);
        put_text(&r, "user\n%s", user);
        put_id(&r, chat->im_end);
        put_text(&r, "\n");
        put_id(&r, chat->im_start);
        put_text(&r, "assistant\n");
        if (chat->template == TEMPLATE_QWEN3 && chat->reasoning == REASONING_OFF) { // thinking skipped
            put_id(&r, chat->think);
            put_text(&r, "\n\n");
            put_id(&r, chat->end_think);
            put_text(&r, "\n\n");
        }
        break;
    case TEMPLATE_GEMMA:
        if (first) put_id(&r, bos);
        render_gemma(&r, chat, sys, user);
        break;
    case TEMPLATE_HARMONY:
        render_harmony(&r, chat, sys, user, first);
        break;
    case TEMPLATE_ZEPHYR:
        if (first && tk->add_bos) put_id(&r, bos);
        if (sys) { put_text(&r, "<|system|>\n%s", sys); put_id(&r, tk->eos_id); }
        put_text(&r, "%s<|user|>\n%s", first && !sys ? "" : "\n", user);
        put_id(&r, tk->eos_id);
        put_text(&r, "\n<|assistant|>\n");
        break;
    case TEMPLATE_DEEPSEEK_R1: // the system prompt starts the text, with no marker
        if (first) put_id(&r, bos);
        if (sys) put_text(&r, "%s", sys);
        put_id(&r, chat->user);
        put_text(&r, "%s", user);
        put_id(&r, chat->assistant);
        if (chat->think_prompt) { // the reply starts in its reasoning
            put_id(&r, chat->think);
            put_text(&r, "\n");
        }
        break;
    case TEMPLATE_MISTRAL:
        if (first) put_id(&r, bos);
        put_text(&r, "[INST] %s%s%s [/INST]", sys ? sys : "", sys ? "\n\n" : "", user);
        break;
    default: // Llama 2: every turn starts with BOS
        put_id(&r, bos);
        render_llama2(&r, sys, user);
    }
    if (r.err) { free(r.ids); return NULL; }
    *n = r.n;
    return r.ids;
}

// The template's control token written text, or -1 with error_message.
static int template_token(const Tokenizer *tk, const char *text, int template) {
    for (int id = 0; id < tk->vocab_size; id++)
        if (tk->kind[id] == TOKEN_CONTROL && !strcmp(tk->vocab[id], text)) return id;
    return fail("the %s chat template needs the token %s, which this vocabulary lacks (choose another with "
                "--chat-template)", template_names[template], text);
}

// The id of the token spelled text, of any kind, or -1.
static int token_spelled(const Tokenizer *tk, const char *text) {
    for (int id = 0; id < tk->vocab_size; id++)
        if (!strcmp(tk->vocab[id], text)) return id;
    return -1;
}

// Harmony's current date: RUN_DATE (YYYY-MM-DD, for reproducible
// renderings) or today's. -1 with error_message.
static int harmony_date(char date[16]) {
    const char *given = getenv("RUN_DATE");
    if (given) {
        int ok = strlen(given) == 10 && given[4] == '-' && given[7] == '-';
        for (int i = 0; ok && i < 10; i++) ok = i == 4 || i == 7 || isdigit((unsigned char)given[i]);
        if (!ok) return fail("RUN_DATE: '%.40s' is not a date YYYY-MM-DD (or unset it for today's)", given);
        snprintf(date, 16, "%s", given);
        return 0;
    }
    time_t now = time(NULL);
    struct tm day;
    if (!localtime_r(&now, &day) || strftime(date, 16, "%Y-%m-%d", &day) == 0) return fail("cannot tell today's date");
    return 0;
}

// --reasoning as the template takes it: harmony a level (medium by
// default, and no off), qwen3 thinking on or off, the others none.
static int reasoning_for_template(Chat *chat, int template) {
    int r = chat->reasoning;
    if (template == TEMPLATE_HARMONY) {
        if (r == REASONING_OFF)
            return fail("--reasoning off: gpt-oss always reasons; choose low, medium or high (--hide-reasoning "
                        "keeps its reasoning off the screen)");
        chat->reasoning = r == REASONING_DEFAULT || r == REASONING_ON ? REASONING_MEDIUM : r;
    } else if (template == TEMPLATE_QWEN3) {
        chat->reasoning = r == REASONING_OFF ? REASONING_OFF : REASONING_ON; // Qwen3 has no levels
    } else if (template == TEMPLATE_DEEPSEEK_R1) {
        if (r != REASONING_DEFAULT && r != REASONING_ON)
            return fail("--reasoning %s: the deepseek-r1 chat template always reasons (%s) and has no setting; "
                        "--hide-reasoning keeps the reasoning off the screen", reasoning_names[r],
                        chat->think_prompt ? "its prompt opens <think>" : "the model opens <think> itself");
    } else if (r != REASONING_DEFAULT) {
        return fail("--reasoning %s: the %s chat template has no reasoning setting (qwen3's and harmony's have)",
                    reasoning_names[r], template_names[template]);
    }
    return 0;
}

// Sets up the chat's template: the tokenizer's own, Llama 2's when the
// model has none; its control tokens and end-of-turn. -1 with error_message.
static int chat_template_init(Chat *chat) {
    const Tokenizer *tk = chat->tk;
    int template = tk->chat_template == TEMPLATE_NONE ? TEMPLATE_LLAMA2 : tk->chat_template;
    if (template == TEMPLATE_UNKNOWN)
        return fail("the model's chat template (tokenizer.chat_template) is not one run.c recognizes; "
                    "choose the model's format with --chat-template NAME (" TEMPLATE_CHOICES ")");
    // [INST] as a control token (Mistral v0.3 on) comes with other spacing
    // and system placement than these two render: refused, not fed as text
    if ((template == TEMPLATE_MISTRAL || template == TEMPLATE_LLAMA2) && template_token(tk, "[INST]", template) >= 0)
        return fail("this vocabulary has [INST] as a control token (Mistral v0.3 and later), whose chat format run.c "
                    "does not render; -m generate runs the model");
    if (tk->chat_template == TEMPLATE_NONE && chat->t->is_gguf) // a llama2.c checkpoint never has one: no notice there
        fprintf(stderr, "run: the model has no chat template (tokenizer.chat_template); chatting in Llama 2's format "
                "(--chat-template NAME picks another: " TEMPLATE_CHOICES ")\n");
    chat->template = template;
    chat->start_header = chat->end_header = chat->eot = chat->im_start = chat->im_end = -1;
    chat->start = chat->message = chat->channel = chat->end_message = chat->stop = chat->call = -1;
    chat->user = chat->assistant = chat->end_sentence = -1;
    chat->n_end = chat->n_gen_only = 0;
    chat->think_prompt = template == TEMPLATE_DEEPSEEK_R1 && !tk->template_early;
    if (reasoning_for_template(chat, template) != 0) return -1;
    chat->think = template == TEMPLATE_HARMONY ? -1 : token_spelled(tk, "<think>");
    chat->end_think = chat->think < 0 ? -1 : token_spelled(tk, "</think>");
    if (chat->end_think < 0) chat->think = -1;
    if (template == TEMPLATE_QWEN3 && chat->reasoning == REASONING_OFF && chat->think < 0)
        return fail("--reasoning off: this vocabulary lacks Qwen3's <think> and </think> tokens");
    if (template == TEMPLATE_GEMMA && ((chat->im_start = template_token(tk, "<start_of_turn>", template)) < 0 ||
                                       (chat->im_end = template_token(tk, "<end_of_turn>", template)) < 0))
        return -1;
    if (template == TEMPLATE_HARMONY &&
        ((chat->start = template_token(tk, "<|start|>", template)) < 0 ||
         (chat->message = template_token(tk, "<|message|>", template)) < 0 ||
         (chat->channel = template_token(tk, "<|channel|>", template)) < 0 ||
         (chat->end_message = template_token(tk, "<|end|>", template)) < 0 ||
         (chat->stop = template_token(tk, "<|return|>", template)) < 0 || harmony_date(chat->date) != 0))
        return -1;
    if (template == TEMPLATE_HARMONY) chat->call = token_spelled(tk, "<|call|>");
    if (template == TEMPLATE_LLAMA3 &&
        ((chat->start_header = template_token(tk, "<|start_header_id|>", template)) < 0 ||
         (chat->end_header = template_token(tk, "<|end_header_id|>", template)) < 0 ||
         (chat->eot = template_token(tk, "<|eot_id|>", template)) < 0))
        return -1;
    if ((template == TEMPLATE_CHATML || template == TEMPLATE_QWEN3) &&
        ((chat->im_start = template_token(tk, "<|im_start|>", template)) < 0 ||
         (chat->im_end = template_token(tk, "<|im_end|>", template)) < 0))
        return -1;
    if (template == TEMPLATE_DEEPSEEK_R1 &&
        ((chat->user = template_token(tk, DEEPSEEK_USER, template)) < 0 ||
         (chat->assistant = template_token(tk, DEEPSEEK_ASSISTANT, template)) < 0 ||
         (chat->end_sentence = template_token(tk, DEEPSEEK_END, template)) < 0))
        return -1;
    if (template == TEMPLATE_DEEPSEEK_R1) {
        int newline[8], n = 0;
        if (chat->think < 0)
            return fail("the deepseek-r1 chat template needs the tokens <think> and </think>, which this vocabulary "
                        "lacks (choose another with --chat-template)");
        if (encode(chat->tk, "\n", 1, 0, 0, newline, &n) != 0) return -1;
        chat->n_gen_only = chat->think_prompt ? 1 + n : 0; // <think> and the newline after it
    }
    if (template == TEMPLATE_LLAMA3) chat->end[chat->n_end++] = chat->eot;
    else if (template == TEMPLATE_DEEPSEEK_R1) chat->end[chat->n_end++] = chat->end_sentence;
    else if (template == TEMPLATE_HARMONY) chat->end[chat->n_end++] = chat->end_message;
    else if (template == TEMPLATE_CHATML || template == TEMPLATE_QWEN3 || template == TEMPLATE_GEMMA) {
        // <|im_end|> (Gemma's <end_of_turn>) and the newline after it
        int newline[8], n = 0;
        chat->end[chat->n_end++] = chat->im_end;
        if (encode(chat->tk, "\n", 1, 0, 0, newline, &n) != 0) return -1;
        for (int i = 0; i < n && chat->n_end < MAX_END; i++) chat->end[chat->n_end++] = newline[i];
    } else chat->end[chat->n_end++] = tk->eos_id;
    return 0;
}

// Appends ids to the context; -1 if they do not fit.
static int context_append(Chat *chat, const int *ids, int n) {
    if (chat->n_context + n > chat->t->config.seq_len) return -1;
    memcpy(chat->context + chat->n_context, ids, (size_t)n * sizeof(int));
    chat->n_context += n;
    return 0;
}

// Ids that turns first..n_turns-1 take in the context, the first one with
// the system prompt; written to context[] when write is set. -1 on error.
static int kept_turns(Chat *chat, int first, int write) {
    int total = 0;
    for (int i = first; i < chat->n_turns; i++) {
        int n;
        int *prompt = render_turn(chat, chat->turns[i].user, i == first, &n);
        if (!prompt) return -1;
        n -= chat->n_gen_only; // the reply that follows takes the place of the prompt's end
        if (write) {
            memcpy(chat->context + total, prompt, (size_t)n * sizeof(int));
            memcpy(chat->context + total + n, chat->turns[i].reply, (size_t)chat->turns[i].n_reply * sizeof(int));
        }
        total += n + chat->turns[i].n_reply;
        free(prompt);
    }
    return total;
}

// Feeds context[pos..n_context) in blocks and returns the last logits
// (NULL when nothing was left to feed).
static float *feed_context(Chat *chat) {
    if (chat->pos >= chat->n_context) return NULL;
    float *logits = forward_batch(chat->t, chat->context + chat->pos, chat->n_context - chat->pos, chat->pos, NULL);
    chat->pos = chat->n_context;
    return logits;
}

// Makes room for a new turn by dropping the fewest oldest turns; what is
// kept is evaluated again from position 0 by the next feed. 0 ok; 1 if the
// message cannot fit even alone (nothing changes); -1 on error.
static int make_room(Chat *chat, const char *user, int need_after) {
    int seq_len = chat->t->config.seq_len, n = 0, n_alone;
    int *alone = render_turn(chat, user, 1, &n_alone); // the turn with no other before it
    if (!alone) return -1;
    free(alone);
    for (int first = chat->first_kept + 1; first <= chat->n_turns && n_alone + need_after <= seq_len; first++) {
        int *prompt = render_turn(chat, user, first == chat->n_turns, &n);
        if (!prompt) return -1;
        free(prompt);
        int kept = kept_turns(chat, first, 0);
        if (kept < 0) return -1;
        if (kept + n + need_after > seq_len) continue;
        int dropped = first - chat->first_kept;
        fflush(stdout); // the transcript so far first, so the notice lands in order
        if (kept == 0) fprintf(stderr, "run: context full: dropped the %d oldest turn(s); the context starts afresh\n",
                               dropped);
        else fprintf(stderr, "run: context full: dropped the %d oldest turn(s); the %d tokens of the turns kept are "
                     "evaluated again\n", dropped, kept);
        chat->n_context = kept_turns(chat, first, 1);
        chat->first_kept = first;
        chat->pos = 0;
        return 0;
    }
    fail("message not sent: its turn takes %d tokens (the message in the chat template%s) and %d more are kept for "
         "the reply, more than the context of %d tokens", n_alone, chat->system && chat->system[0] ? ", the system prompt" : "",
         need_after, seq_len);
    return 1;
}

/* A reply on the screen. Reasoning (harmony's analysis and commentary
   channels, <think>...</think>) is printed between [reasoning] and
   [/reasoning], or not at all with --hide-reasoning; the answer as it comes.
   The whitespace around each part goes; harmony's headers are not printed. */
enum { PART_ANSWER, PART_REASONING, PART_HEADER };

typedef struct {
    const Chat *chat;
    TextOut text;
    int part;            // PART_*: what the next tokens are
    int skip_space;      // 1: the first piece's leading space goes (as after "Assistant:" there is one);
                         // 2: leading whitespace goes (a part's start)
    int open;            // "[reasoning]" is printed and not yet closed
    int newline;         // a part was closed: a newline comes before the next text
    char held[32];       // reasoning's trailing whitespace so far, printed only if text follows
    int n_held;
    char name[16];       // harmony: the channel the header names so far
    int n_name;
} ReplyView;

static void reply_view_init(ReplyView *v, const Chat *chat, FILE *out) {
    *v = (ReplyView){.chat = chat, .text = {.out = out}, .skip_space = 1,
                     .part = chat->template == TEMPLATE_HARMONY ? PART_HEADER : PART_ANSWER};
    if (chat->think_prompt) { v->part = PART_REASONING; v->skip_space = 2; } // the prompt opened <think>
}

// Ends the current part and starts the next.
static void reply_part(ReplyView *v, int part) {
    if (v->open) { text_put(&v->text, " [/reasoning]", 13); v->open = 0; v->newline = 1; }
    v->n_held = 0;
    v->n_name = 0;
    v->part = part;
    v->skip_space = 2;
}

// Prints a piece of text of the current part.
static void reply_text(ReplyView *v, const char *piece, size_t len) {
    if (v->part == PART_HEADER) { // harmony: the channel's name, kept to tell the part
        for (size_t i = 0; i < len && v->n_name + 1 < (int)sizeof v->name; i++) v->name[v->n_name++] = piece[i];
        v->name[v->n_name] = '\0';
        return;
    }
    if (v->part == PART_REASONING && v->chat->hide_reasoning) return;
    if (v->skip_space == 1) {
        if (len > 0 && piece[0] == ' ') piece++, len--;
        v->skip_space = 0;
    }
    if (v->skip_space == 2) {
        while (len > 0 && isspace((unsigned char)piece[0])) piece++, len--;
        if (len == 0) return;
        v->skip_space = 0;
    }
    size_t text_len = len; // reasoning's trailing whitespace is held back
    if (v->part == PART_REASONING)
        while (text_len > 0 && isspace((unsigned char)piece[text_len - 1])) text_len--;
    if (text_len > 0) {
        if (v->newline) { text_put(&v->text, "\n", 1); v->newline = 0; }
        if (v->part == PART_REASONING && !v->open) { text_put(&v->text, "[reasoning] ", 12); v->open = 1; }
        text_put(&v->text, v->held, (size_t)v->n_held);
        v->n_held = 0;
        text_put(&v->text, piece, text_len);
    }
    for (size_t i = text_len; i < len; i++) {
        if (v->n_held == (int)sizeof v->held) { text_put(&v->text, v->held, (size_t)v->n_held); v->n_held = 0; }
        v->held[v->n_held++] = piece[i];
    }
}

// Whether harmony's header names the final channel ("final", maybe with
// a constraint after a space).
static int names_final(const char *name) {
    return !strncmp(name, "final", 5) && (name[5] == '\0' || name[5] == ' ');
}

// Takes the reply's next token (prev: the one before, -1 for none) and
// prints what it shows; 1 if it ends the reply instead (it is not part of
// it): EOS and the model's other end-of-generation tokens; for harmony
// <|return|>, <|call|> and the <|end|> of a final message (an <|end|>
// after analysis lets the reply go on to its answer).
static int reply_take(ReplyView *v, int prev, int token) {
    const Chat *chat = v->chat;
    if (chat->template == TEMPLATE_HARMONY) {
        if (token == chat->stop || token == chat->call) return 1;
        if (token == chat->end_message) {
            int answered = v->part == PART_ANSWER;
            reply_part(v, PART_HEADER);
            return answered;
        }
        if (token == chat->start) { reply_part(v, PART_HEADER); return 0; }
        if (token == chat->channel) { v->n_name = 0; v->name[0] = '\0'; return 0; }
        if (token == chat->message && v->part == PART_HEADER) {
            reply_part(v, names_final(v->name) ? PART_ANSWER : PART_REASONING);
            return 0;
        }
    }
    if (ends_generation(chat->tk, token)) return 1;
    if (token == chat->think) { reply_part(v, PART_REASONING); return 0; }
    if (token == chat->end_think) { reply_part(v, PART_ANSWER); return 0; }
    size_t len;
    const char *piece = decode(chat->tk, prev, token, &len);
    reply_text(v, piece, len);
    return 0;
}

static void reply_finish(ReplyView *v) {
    if (v->open) text_put(&v->text, " [/reasoning]", 13);
    v->open = 0;
    text_finish(&v->text);
}

// What of a harmony reply (reply[0..n), no end-of-turn) the context keeps,
// as the template renders an earlier reply: the final message alone,
// <|channel|>"final"<|message|>{answer}; the reply as it is when it has
// none. A new array with room for the end-of-turn; NULL when out of memory.
static int *harmony_kept(const Chat *chat, const int *reply, int n, int *n_kept) {
    int answer = -1, answer_end = n; // the final message's first id, and its end
    for (int i = 0; i < n; i++) {
        if (reply[i] != chat->channel) continue;
        char name[16];
        int len = 0, j = i + 1;
        for (; j < n && reply[j] != chat->message && reply[j] != chat->channel && reply[j] != chat->start &&
               reply[j] != chat->end_message; j++) { // other control tokens (<|constrain|>) spell nothing
            size_t piece_len;
            const char *piece = decode(chat->tk, -1, reply[j], &piece_len);
            for (size_t k = 0; k < piece_len && len + 1 < (int)sizeof name; k++) name[len++] = piece[k];
        }
        name[len] = '\0';
        if (j < n && reply[j] == chat->message && names_final(name)) answer = j + 1;
    }
    for (int i = answer < 0 ? n : answer; i < n; i++)
        if (reply[i] == chat->end_message || reply[i] == chat->stop || reply[i] == chat->call) { answer_end = i; break; }
    Rendering r = {.tk = chat->tk};
    if (answer < 0) {
        for (int i = 0; i < n; i++) put_id(&r, reply[i]);
    } else {
        put_id(&r, chat->channel);
        put_text(&r, "final");
        put_id(&r, chat->message);
        for (int i = answer; i < answer_end; i++) put_id(&r, reply[i]);
    }
    for (int i = 0; i < MAX_END; i++) put_id(&r, 0); // room for the end-of-turn
    if (r.err) { free(r.ids); return NULL; }
    *n_kept = r.n - MAX_END;
    return r.ids;
}

// What of a Qwen3 reply the context keeps, as its template renders an
// earlier reply: what follows the last </think>, its leading newlines
// dropped (Qwen's pre-tokenizer keeps newlines in tokens of their own); the
// reply as it is without </think>. A new array as harmony_kept's.
static int *qwen3_kept(const Chat *chat, const int *reply, int n, int *n_kept) {
    int from = 0;
    for (int i = 0; i < n; i++)
        if (reply[i] == chat->end_think) from = i + 1;
    for (; from > 0 && from < n; from++) { // from > 0: there was a </think>
        size_t len;
        const char *piece = decode(chat->tk, -1, reply[from], &len);
        if (len == 0 || strspn(piece, "\n") < len) break;
    }
    int *kept = malloc(((size_t)(n - from) + MAX_END) * sizeof(int));
    if (!kept) return NULL;
    memcpy(kept, reply + from, (size_t)(n - from) * sizeof(int));
    *n_kept = n - from;
    return kept;
}

// What of a DeepSeek-R1 reply the context keeps, as its template renders an
// earlier reply: what follows the last </think>, newlines and all; the
// reply as it is without </think>. A new array as harmony_kept's.
static int *deepseek_kept(const Chat *chat, const int *reply, int n, int *n_kept) {
    int from = 0;
    for (int i = 0; i < n; i++)
        if (reply[i] == chat->end_think) from = i + 1;
    int *kept = malloc(((size_t)(n - from) + MAX_END) * sizeof(int));
    if (!kept) return NULL;
    memcpy(kept, reply + from, (size_t)(n - from) * sizeof(int));
    *n_kept = n - from;
    return kept;
}

// What of a reply (reply[0..n), no end-of-turn) the context keeps: a new
// array with room for the end-of-turn, or NULL when out of memory.
static int *reply_kept(const Chat *chat, const int *reply, int n, int *n_kept) {
    if (chat->template == TEMPLATE_HARMONY) return harmony_kept(chat, reply, n, n_kept);
    if (chat->template == TEMPLATE_QWEN3 && chat->end_think >= 0) return qwen3_kept(chat, reply, n, n_kept);
    if (chat->template == TEMPLATE_DEEPSEEK_R1) return deepseek_kept(chat, reply, n, n_kept);
    int *kept = malloc(((size_t)n + MAX_END) * sizeof(int));
    if (!kept) return NULL;
    memcpy(kept, reply, (size_t)n * sizeof(int));
    *n_kept = n;
    return kept;
}

// Puts the kept form of the reply (kept[0..n)) in the context after the
// prompt (from start); what changed is fed again with the next turn.
static void context_replace_reply(Chat *chat, int start, const int *kept, int n) {
    if (start + n > chat->t->config.seq_len) return; // cannot: it stays as generated
    int same = 0;
    while (same < n && start + same < chat->n_context && chat->context[start + same] == kept[same]) same++;
    memcpy(chat->context + start, kept, (size_t)n * sizeof(int));
    chat->n_context = start + n;
    if (chat->pos > start + same) chat->pos = start + same;
}

// A finished reply (reply[0..*n), no end-of-turn, fed from context position
// start) as the context keeps it: for harmony, Qwen3 and deepseek-r1 the
// form the template gives an earlier reply, put in the context in its
// place; the others as generated. Takes reply; returns an array with room
// for the end-of-turn, or NULL when out of memory.
static int *keep_reply(Chat *chat, int start, int *reply, int *n) {
    if (chat->template != TEMPLATE_HARMONY && chat->template != TEMPLATE_QWEN3 && chat->template != TEMPLATE_DEEPSEEK_R1)
        return reply;
    int *kept = reply_kept(chat, reply, *n, n);
    free(reply);
    if (kept) context_replace_reply(chat, start - chat->n_gen_only, kept, *n);
    return kept;
}

// Streams a reply to stdout; returns its ids as the context keeps them,
// the template's end-of-turn last (NULL on failure).
static int *chat_reply(Chat *chat, float *logits, int *n_reply) {
    const Config *c = &chat->t->config;
    int limit = chat->max_reply > 0 && chat->max_reply < c->seq_len ? chat->max_reply : c->seq_len; // no reply outgrows the context
    int *reply = malloc(((size_t)limit + MAX_END) * sizeof(int));
    if (!reply) { fail("out of memory"); return NULL; }
    ReplyView view;
    reply_view_init(&view, chat, stdout);
    int n = 0, prev = -1, start = chat->n_context; // prev -1: no BOS before, the piece comes whole
    while (n < limit && !interrupted) {
        if (!logits_finite(logits, c->vocab_size)) {
            fprintf(stderr, "\nrun: the model's logits are not finite (NaN or infinity); reply ended\n");
            break;
        }
        int next = sample(chat->sampler, logits, chat->context, chat->n_context);
        if (reply_take(&view, prev, next)) break;
        flush_output(stdout);
        reply[n++] = prev = next;
        if (chat->n_context == c->seq_len) { fprintf(stderr, "\nrun: context full; reply cut\n"); break; }
        chat->context[chat->n_context++] = next;
        if (n < limit) logits = feed_context(chat);
    }
    reply_finish(&view);
    interrupted = 0; // Ctrl-C ends the reply, not the chat
    if (!(reply = keep_reply(chat, start, reply, &n))) { fail("out of memory"); return NULL; }
    // however it ended, the reply ends with the end-of-turn, fed with the next turn
    for (int i = 0; i < chat->n_end; i++) reply[n++] = chat->end[i];
    *n_reply = n;
    return reply;
}

// Positions a turn keeps free for its reply: -n's, up to a quarter of the context.
static int reply_room(const Chat *chat) {
    int seq_len = chat->t->config.seq_len, limit = chat->max_reply > 0 ? chat->max_reply : seq_len;
    return limit < seq_len / 4 ? limit : seq_len / 4;
}

// One turn: render, make room, feed, reply. 0 ok, 1 message refused, -1 error.
static int chat_turn(Chat *chat, const char *user) {
    const Config *c = &chat->t->config;
    int reserve = reply_room(chat);
    int n;
    int *prompt = render_turn(chat, user, chat->first_kept == chat->n_turns, &n);
    if (!prompt) return -1;
    if (chat->n_context + n + reserve > c->seq_len) {
        free(prompt);
        int err = make_room(chat, user, reserve);
        if (err) return err;
        prompt = render_turn(chat, user, chat->first_kept == chat->n_turns, &n);
        if (!prompt) return -1;
    }
    Turn *grown = realloc(chat->turns, (size_t)(chat->n_turns + 1) * sizeof(Turn));
    char *saved = strdup(user);
    if (!grown || !saved) { free(prompt); free(saved); if (grown) chat->turns = grown; return fail("out of memory"); }
    chat->turns = grown;
    context_append(chat, prompt, n); // fits: checked above
    free(prompt);
    float *logits = feed_context(chat);
    if (chat->t->trace) fflush(chat->t->trace); // a trace to read while the chat waits
    printf("Assistant: ");
    Turn *turn = &chat->turns[chat->n_turns];
    *turn = (Turn){.user = saved};
    turn->reply = chat_reply(chat, logits, &turn->n_reply);
    if (!turn->reply) { free(saved); return -1; }
    chat->n_turns++;
    // the end-of-turn; if it does not fit, the next turn drops old turns and rebuilds
    context_append(chat, turn->reply + turn->n_reply - chat->n_end, chat->n_end);
    printf("\n");
    return 0;
}

#define LINE_MAX_BYTES ((size_t)16 << 20) // far more text than any context holds

// Reads one line without its line ending into *line (caller frees). 1: a
// line (*ended: it ended with a newline, not at end of input); 0: end of
// input (or Ctrl-C); -1 with error_message: a line past LINE_MAX_BYTES (not
// a conversation: /dev/zero would otherwise fill the memory), or out of
// memory. A line holding a NUL byte comes back empty, with a message: it
// cannot be sent whole.
static int read_line(FILE *in, char **line, int *ended) {
    size_t n = 0, cap = 256;
    int c, nul = 0;
    char *buf = malloc(cap);
    if (!buf) return fail("out of memory for a line of input");
    while ((c = getc(in)) != EOF && c != '\n') {
        if (n + 1 == cap) {
            char *bigger = cap < LINE_MAX_BYTES ? realloc(buf, cap * 2) : NULL;
            if (!bigger) {
                free(buf);
                return cap < LINE_MAX_BYTES ? fail("out of memory for a line of input")
                                            : fail("stdin: a line of more than %zu MiB; not a conversation", LINE_MAX_BYTES >> 20);
            }
            buf = bigger;
            cap *= 2;
        }
        nul |= c == '\0';
        buf[n++] = (char)c;
    }
    if (c == EOF && ferror(in) && !interrupted) {
        int e = errno;
        free(buf);
        return fail("stdin: cannot read: %s", strerror(e));
    }
    if (c == EOF && (n == 0 || interrupted)) { free(buf); return 0; }
    *ended = c == '\n';
    while (n > 0 && buf[n - 1] == '\r') n--;
    buf[n] = '\0';
    if (nul) {
        fflush(stdout);
        fprintf(stderr, "run: the line holds a NUL byte; not sent\n");
        buf[0] = '\0';
    }
    *line = buf;
    return 1;
}

// Whether a line holds nothing but whitespace (a chat line to skip).
static int blank(const char *line) {
    size_t n = strlen(line);
    int len;
    for (size_t i = 0; i < n; i += (size_t)len)
        if (!strip_space_at(line + i, n - i, &len)) return 0;
    return 1;
}

// Reads a line from stdin after a label. On a terminal the label is the
// prompt; through a pipe the line is echoed after its label, so a scripted
// conversation reads like a typed one, and with skip_blank blank lines are
// skipped without a trace.
// 1, 0 or -1 as read_line.
static int ask(const char *label, int skip_blank, char **line) {
    int tty = isatty(STDIN_FILENO), ended = 0;
    if (tty) { printf("%s", label); fflush(stdout); }
    for (;;) {
        int got = read_line(stdin, line, &ended);
        if (got <= 0) return got;
        if (tty && !ended) printf("\n"); // end of input after a line without its Enter
        if (!tty && skip_blank && blank(*line)) { free(*line); continue; }
        if (!tty) printf("%s%s\n", label, *line);
        return 1;
    }
}

static void free_chat(Chat *chat) {
    for (int i = 0; i < chat->n_turns; i++) { free(chat->turns[i].user); free(chat->turns[i].reply); }
    free(chat->turns);
    free(chat->context);
}

// The interactive loop; ends cleanly (0) at end of input.
// reasoning: a REASONING_* (--reasoning); hide_reasoning: --hide-reasoning.
int chat_mode(Transformer *t, Tokenizer *tk, Sampler *sampler, const char *system,
                     const char *first_message, int max_reply, int reasoning, int hide_reasoning) {
    Chat chat = {.t = t, .tk = tk, .sampler = sampler, .system = system, .max_reply = max_reply,
                 .reasoning = reasoning, .hide_reasoning = hide_reasoning};
    if (chat_template_init(&chat) != 0) return -1;
    chat.context = malloc((size_t)t->config.seq_len * sizeof(int));
    if (!chat.context) return fail("out of memory");
    char *asked_system = NULL;
    int err = 0, input_ended = 0;
    if (!system) {
        int got = ask("System prompt (Enter for none): ", 0, &asked_system);
        err = got < 0 ? -1 : 0;
        input_ended = got == 0; // none; a first message from -i is still answered (not after a Ctrl-C)
        if (input_ended && interrupted) first_message = NULL;
        if (asked_system && blank(asked_system)) asked_system[0] = '\0'; // none, as Enter alone
        chat.system = asked_system;
    }
    if (!err && chat.system && chat.system[0]) { // a system prompt no message could follow ends the chat at once
        int n, *first = render_turn(&chat, "", 1, &n);
        if (!first) err = -1;
        else if (n + reply_room(&chat) > t->config.seq_len)
            err = fail("the system prompt does not fit: with the chat template it takes %d tokens, and %d more are kept "
                       "for the reply, more than the context of %d tokens; give a shorter one", n, reply_room(&chat),
                       t->config.seq_len);
        free(first);
    }
    for (int turn = 0; !err; turn++) {
        char *user = NULL;
        if (turn == 0 && first_message) {
            if (!(user = strdup(first_message))) { err = fail("out of memory"); break; }
            if (!blank(user)) printf("User: %s\n", user);
        } else {
            if (input_ended) break;
            int got = ask("User: ", 1, &user);
            if (got <= 0) { err = got; break; } // end of input, or an error
        }
        if (!blank(user)) err = chat_turn(&chat, user); // a blank line is skipped
        free(user);
        if (err > 0) fflush(stdout), fprintf(stderr, "run: %s\n", error_message); // refused; the chat goes on
        if (err < 0) break;
        err = 0;
    }
    printf("\n");
    free(asked_system);
    free_chat(&chat);
    return err;
}

/* ============================================================================
   PART 2: THE ENGINE ROOM
   The figures in its comments were measured on random-weight models of
   public shapes, named as tools/mkmodel.c names them: tl1b is
   TinyLlama-1.1B's shape, s110m stories110M's (BENCHMARKS.md has the rest).
   ============================================================================ */

/* ----------------------------------------------------------------------------
   Capabilities: the SIMD instructions this build may use, from the
   compiler's target (make passes -march=native). Every SIMD region below
   tests these names and nothing else, and each has a portable fallback.
     HAVE_AVX2         AVX2 + FMA + F16C (x86-64-v3): the packed integer
                       kernels, 8 rows a vector
     HAVE_AVX512       AVX-512 F, BW and VL, on top of AVX2
     HAVE_AVX512_VNNI  AVX-512 VNNI: the packed kernels, 16 rows a vector
     HAVE_AVX_VNNI     the 256-bit VNNI of AVX-VNNI (Alder Lake on)
     HAVE_AMX          AMX tiles with int8 products (and AVX-512 VBMI):
                       prefill of the K-quants, where Linux allows it
     HAVE_NEON         ARM64's Advanced SIMD
     HAVE_DOTPROD      ARM's SDOT (armv8.2-a+dotprod)
   and one for the operating system:
     HAVE_LINUX        Linux's extras: huge pages and giving pages back on
                       request (madvise), AMX's permission, /proc. Without
                       them (other systems, or -DNO_LINUX to check that
                       build on Linux) run.c is plain POSIX. */

#if defined(__linux__) && !defined(NO_LINUX)
#define HAVE_LINUX 1
#else
#define HAVE_LINUX 0
#endif

// Huge pages for memory the kernels stream (with 4 KB pages each page costs
// a TLB miss); Linux gives them on request. A hint: nothing else changes.
static void ask_huge_pages(void *p, size_t bytes) {
#if HAVE_LINUX
    madvise(p, bytes, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

// Lets the pages of a mapped file leave memory (they come back if read).
static void give_back_pages(void *p, size_t bytes) {
#if HAVE_LINUX
    madvise(p, bytes, MADV_DONTNEED);
#else
    (void)p, (void)bytes;
#endif
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define HAVE_AVX2 1
#include <immintrin.h>
#else
#define HAVE_AVX2 0
#endif
#if HAVE_AVX2 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define HAVE_AVX512 1
#else
#define HAVE_AVX512 0
#endif
#if HAVE_AVX512 && defined(__AVX512VNNI__)
#define HAVE_AVX512_VNNI 1
#else
#define HAVE_AVX512_VNNI 0
#endif
#if HAVE_AVX2
#include <cpuid.h>
#endif
#if HAVE_LINUX && HAVE_AVX512_VNNI && defined(__AVX512VBMI__) && defined(__AMX_TILE__) && defined(__AMX_INT8__)
#define HAVE_AMX 1
#include <sys/syscall.h>
#else
#define HAVE_AMX 0
#endif
#if HAVE_AVX2 && defined(__AVXVNNI__)
#define HAVE_AVX_VNNI 1
#else
#define HAVE_AVX_VNNI 0
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define HAVE_NEON 1
#include <arm_neon.h>
#else
#define HAVE_NEON 0
#endif
#if HAVE_NEON && defined(__ARM_FEATURE_DOTPROD)
#define HAVE_DOTPROD 1
#else
#define HAVE_DOTPROD 0
#endif

// Blocks are read through typed structs, and GGUF is little-endian.
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "run.c reads little-endian files on a little-endian host");

// 1: every matrix product runs the plain twins (the benchmark's "before",
// and the tests).
static int use_plain_kernels = 0;

/* ----------------------------------------------------------------------------
   Number formats: IEEE half precision (fp16) and bfloat16, the scales of
   quantized blocks and the values of F16/BF16 weights and the fp16 KV cache.
   Conversions to half round to nearest even. */

// IEEE half precision to float, portably (denormals, infinities, NaN).
static float f16_to_f32_plain(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
    if (exp == 0x1F) bits = sign | 0x7F800000u | mant << 13;
    else if (exp != 0) bits = sign | (exp + 112) << 23 | mant << 13;
    else if (mant == 0) bits = sign;
    else { // a denormal half is a normal float
        exp = 113;
        while (!(mant & 0x400)) { mant <<= 1; exp--; }
        bits = sign | exp << 23 | (mant & 0x3FF) << 13;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

// The same in one instruction where the build has one (F16C; AArch64
// converts half precision in hardware, denormals included).
static float f16_to_f32(uint16_t h) {
#if HAVE_AVX2
    return _cvtsh_ss(h);
#elif HAVE_NEON
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
#else
    return f16_to_f32_plain(h);
#endif
}

// Float to IEEE half, rounding to nearest even.
static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000, mant = x & 0x7FFFFF;
    int exp = (int)((x >> 23) & 0xFF);
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00 | (mant ? 0x200 : 0));
    int e = exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7C00);
    int shift = 13;
    uint32_t half;
    if (e <= 0) { // a half denormal
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000;
        shift = 14 - e;
        half = mant >> shift;
    } else {
        half = (uint32_t)e << 10 | mant >> 13;
    }
    uint32_t rest = mant & ((1u << shift) - 1), middle = 1u << (shift - 1);
    if (rest > middle || (rest == middle && (half & 1))) half++; // a carry rounds up the exponent
    return (uint16_t)(sign | half);
}

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// Little-endian numbers in files.
static int32_t read_i32(const unsigned char *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return (int32_t)v;
}

static float read_f32(const unsigned char *p) {
    int32_t i = read_i32(p);
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

static uint64_t read_u64(const unsigned char *p) {
    return (uint64_t)(uint32_t)read_i32(p) | (uint64_t)(uint32_t)read_i32(p + 4) << 32;
}

/* ----------------------------------------------------------------------------
   Weight types, in the manner of ggml's type traits. A matrix row is a run
   of blocks of one type, and type_traits[] (after the kernels) has one row
   per type run.c computes with:
     block_size, block_bytes  values and bytes per block (typed block structs
                              below, each with its size asserted)
     act_type                 the format x is put in for this type's dot
                              product, as llama.cpp does: TYPE_F32 (x as it
                              is) or a quantized type (Q8_0 for Q8_0, Q4_0,
                              Q5_0, IQ4_NL, MXFP4; Q8_1 for Q4_1, Q5_1; Q8_K for the
                              K-quants and IQ4_XS)
     dequantize               plain: n values back to floats, the reference
                              of every kernel (and the embedding lookup)
     quantize                 n floats to this type, rounding as GGUF's
                              reference code does (-m quantize, activations)
     dot_plain, dot           dot(row, x) with x in act_type: the plain twin
                              and the fast kernel (SIMD where this build has it)
     dot4                     dot for four rows row_bytes apart, each row's
                              result dot's bits, x's loads shared; NULL: none
     packed                   the type's layout in the packed form of the
                              integer kernels, a named PackedLayout below;
                              NULL: never packed
   Everything that asks "what kind of weight is this" asks the table: adding
   a type is one row plus its kernels.

   The table's functions take whole blocks: n is a multiple of block_size.
   A row of our own format may end in a partial block, stored padded with
   zeros; the callers (dequantize_row, quantize_padded) pad. */

typedef struct {
    int block_size;
    size_t block_bytes;
    int act_type;
    void (*dequantize)(float *out, const void *row, int n);
    void (*quantize)(void *out, const float *x, int n); // NULL: run.c does not write this type
    float (*dot_plain)(const void *row, const void *x, int n);
    float (*dot)(const void *row, const void *x, int n);
    void (*dot4)(float out[4], const void *rows, size_t row_bytes, const void *x, int n);
    const struct PackedLayout *packed;
} TypeTraits;

/* How one block of 16 rows of a type sits in the packed layout (the
   Packing section draws it): one named description per type, read by the
   packing code and the kernels, in the manner of ggml's repack instances.
   A kernel compiled for one type reads its description as constants. */
enum { LOOKUP_NONE, LOOKUP_IQ4NL, LOOKUP_MXFP4 };
typedef struct PackedLayout {
    const char *name;   // the type and the rows that travel together
    size_t quant_bytes; // bytes of quants of one block of 16 rows
    size_t meta_bytes;  // bytes of those 16 rows' scales (and mins)
    int offset;         // subtracted from a stored value to give q
    int mins;           // 1: a min per block (32 values) or sub-block (K: dmin * m_j)
    int lookup;         // LOOKUP_*: q indexes iq4nl_values or mxfp4_values
    int e8m0;           // 1: the row scales are E8M0 bytes (MXFP4), not fp16
    // blocks of 32 values:
    int bits;           // 8: whole bytes; 4: nibbles; 5: nibbles and a plane of fifth bits
    // super-blocks of 256 values (the K-quants, IQ4_XS):
    int planes;         // bit planes used: 4 (4-bit), 2 (2-bit), 1 (1-bit), ORed
    int n_subs;         // sub-blocks per super-block, each with its scale (and min)
    int k4;             // 1: the scales and mins as GGUF's 12 bytes per row (Q4_K, Q5_K)
    int six;            // 1: four chunks in three vectors, not planes (Q6_K; planes still counts its bits)
    int three;          // 1: eight chunks in three vectors, not planes (Q3_K; planes still counts its bits)
} PackedLayout;

// Q8_0: 32 values, value k = d * qs[k].
typedef struct {
    uint16_t d;    // scale, fp16
    int8_t qs[32];
} BlockQ8_0;
_Static_assert(sizeof(BlockQ8_0) == 34, "a Q8_0 block is 34 bytes");

// Q4_0: 32 values, value k = d * (q_k - 8) with q_k in 0..15; byte j holds
// q_j in its low nibble and q_{j+16} in its high one.
typedef struct {
    uint16_t d;    // scale, fp16
    uint8_t qs[16];
} BlockQ4_0;
_Static_assert(sizeof(BlockQ4_0) == 18, "a Q4_0 block is 18 bytes");

#define QK 32 // values per Q8_0 / Q4_0 block

/* F32, F16 and BF16: one value per "block". */

static void dequantize_f32(float *out, const void *row, int n) { memcpy(out, row, (size_t)n * sizeof(float)); }
static void quantize_f32(void *out, const float *x, int n) { memcpy(out, x, (size_t)n * sizeof(float)); }

// dot(a, b), summed in order.
static float dot_f32_plain(const float *a, const float *b, int n) {
    float sum = 0.0f;
    for (int j = 0; j < n; j++) sum += a[j] * b[j];
    return sum;
}
static float dot_f32_row_plain(const void *row, const void *x, int n) { return dot_f32_plain(row, x, n); }
static float dot_f32_row(const void *row, const void *x, int n) { return dot_f32(row, x, n); }

static void dequantize_f16(float *out, const void *row, int n) {
    const uint16_t *h = row;
    for (int j = 0; j < n; j++) out[j] = f16_to_f32_plain(h[j]);
}
static void quantize_f16(void *out, const float *x, int n) {
    uint16_t *h = out;
    for (int j = 0; j < n; j++) h[j] = f32_to_f16(x[j]);
}
static float dot_f32_f16_plain(const float *a, const uint16_t *b, int n) {
    float sum = 0.0f;
    for (int j = 0; j < n; j++) sum += a[j] * f16_to_f32_plain(b[j]);
    return sum;
}
static float dot_f16_row_plain(const void *row, const void *x, int n) { return dot_f32_f16_plain(x, row, n); }
static float dot_f16_row(const void *row, const void *x, int n) { return dot_f32_f16(x, row, n); }

static void dequantize_bf16(float *out, const void *row, int n) {
    const uint16_t *h = row;
    for (int j = 0; j < n; j++) out[j] = bf16_to_f32(h[j]);
}
static float dot_bf16_row_plain(const void *row, const void *x, int n) {
    const uint16_t *h = row;
    const float *xf = x;
    float sum = 0.0f;
    for (int j = 0; j < n; j++) sum += bf16_to_f32(h[j]) * xf[j];
    return sum;
}

/* Q8_0 and Q4_0 (blocks of 32), against x in Q8_0 blocks: integer sums
   per block, as llama.cpp computes them, then the two blocks' scales. */

// Block i of a Q8_0 or Q4_0 row as its 32 integers; returns its scale.
static float block_ints(int8_t q[QK], const void *row, int i, int type) {
    if (type == TYPE_Q8_0) {
        const BlockQ8_0 *b = (const BlockQ8_0 *)row + i;
        memcpy(q, b->qs, QK);
        return f16_to_f32(b->d);
    }
    const BlockQ4_0 *b = (const BlockQ4_0 *)row + i;
    for (int k = 0; k < QK / 2; k++) {
        q[k] = (int8_t)((b->qs[k] & 0xF) - 8);
        q[k + QK / 2] = (int8_t)((b->qs[k] >> 4) - 8);
    }
    return f16_to_f32(b->d);
}

static void dequantize_x32(float *out, const void *row, int n, int type) {
    int8_t q[QK];
    for (int i = 0; i < n / QK; i++) {
        float d = block_ints(q, row, i, type);
        for (int k = 0; k < QK; k++) out[i * QK + k] = d * q[k];
    }
}
static void dequantize_q8_0(float *out, const void *row, int n) { dequantize_x32(out, row, n, TYPE_Q8_0); }
static void dequantize_q4_0(float *out, const void *row, int n) { dequantize_x32(out, row, n, TYPE_Q4_0); }

// dot(row, x) for a Q8_0 or Q4_0 row and x in Q8_0 blocks: each block's
// exact integer sum times both scales, added in order.
static float dot_x32_plain(const void *row, const BlockQ8_0 *x, int n_blocks, int type) {
    int8_t q[QK];
    float sum = 0.0f;
    for (int i = 0; i < n_blocks; i++) {
        float d = block_ints(q, row, i, type);
        int32_t block_sum = 0;
        for (int k = 0; k < QK; k++) block_sum += q[k] * x[i].qs[k];
        sum += d * f16_to_f32(x[i].d) * (float)block_sum;
    }
    return sum;
}
static float dot_q8_0_plain(const void *row, const void *x, int n) { return dot_x32_plain(row, x, n / QK, TYPE_Q8_0); }
static float dot_q4_0_plain(const void *row, const void *x, int n) { return dot_x32_plain(row, x, n / QK, TYPE_Q4_0); }

// Q8_0: d = max|x| / 127, q = round(x / d). 1/d overflows for tiny d: such
// a block quantizes to zeros. Where AVX2 or NEON is built its twin below
// runs instead.
__attribute__((unused)) static void quantize_q8_0_plain(void *out, const float *x, int n) {
    BlockQ8_0 *b = out;
    for (int i = 0; i < n / QK; i++) {
        const float *v = x + (size_t)i * QK;
        float amax = 0.0f;
        for (int k = 0; k < QK; k++) amax = fmaxf(amax, fabsf(v[k]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        if (!isfinite(id)) id = 0.0f;
        b[i].d = f32_to_f16(d);
        for (int k = 0; k < QK; k++) b[i].qs[k] = (int8_t)clamp_int((int)roundf(v[k] * id), -128, 127);
    }
}

// quantize_q8_0_plain's SIMD twin, the same bytes: -m quantize writes every
// Q8_0 weight with it, and the row kernels (NEON) quantize x with it on one
// thread before each product (the plain loop, its roundf and fmaxf calls,
// was a visible share of generation).
// roundf rounds halves away from zero: NEON's vrndaq does that; on AVX2,
// the value truncated, plus its sign where the part cut off (exact in
// float) is at least a half. The saturating packs are the clamp to
// -128..127. Both maxima skip a NaN, as fmaxf does.
#if HAVE_AVX2
// The largest of the 8 lanes.
static float max_m256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// The largest of n (a multiple of 8) values' magnitudes (NaN skipped, as fmaxf does).
static float amax_floats(const float *v, int n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax8 = _mm256_setzero_ps();
    for (int k = 0; k < n; k += 8) amax8 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v + k)), amax8);
    return max_m256(amax8);
}

// Four vectors of 8 int32 (each within -128..127) as 32 bytes, in order:
// the packs work within 128-bit lanes, so bytes come out as 4-value runs
// of q[0..3] per lane, put back in order by the permute.
static __m256i pack_bytes(const __m256i q[4]) {
    __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void quantize_q8_0(void *out, const float *x, int n) {
    BlockQ8_0 *b = out;
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    for (int i = 0; i < n / QK; i++) {
        const float *v = x + (size_t)i * QK;
        float amax = amax_floats(v, QK);
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        if (!isfinite(id)) id = 0.0f;
        b[i].d = f32_to_f16(d);
        __m256i q[4];
        for (int j = 0; j < 4; j++) {
            __m256 y = _mm256_mul_ps(_mm256_loadu_ps(v + 8 * j), _mm256_set1_ps(id));
            __m256 t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            __m256 away = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(y, t)), half, _CMP_GE_OQ);
            __m256 step = _mm256_and_ps(away, _mm256_or_ps(one, _mm256_and_ps(sign, y))); // +-1 or 0
            q[j] = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
        }
        _mm256_storeu_si256((__m256i *)b[i].qs, pack_bytes(q));
    }
}
#elif HAVE_NEON
static void quantize_q8_0(void *out, const float *x, int n) {
    BlockQ8_0 *b = out;
    for (int i = 0; i < n / QK; i++) {
        const float *v = x + (size_t)i * QK;
        float32x4_t amax4 = vdupq_n_f32(0.0f);
        for (int k = 0; k < QK; k += 4) amax4 = vmaxnmq_f32(amax4, vabsq_f32(vld1q_f32(v + k)));
        float amax = vmaxnmvq_f32(amax4);
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        if (!isfinite(id)) id = 0.0f;
        b[i].d = f32_to_f16(d);
        for (int k = 0; k < QK; k += 8) {
            int32x4_t lo = vcvtq_s32_f32(vrndaq_f32(vmulq_n_f32(vld1q_f32(v + k), id)));
            int32x4_t hi = vcvtq_s32_f32(vrndaq_f32(vmulq_n_f32(vld1q_f32(v + k + 4), id)));
            vst1_s8(b[i].qs + k, vqmovn_s16(vcombine_s16(vqmovn_s32(lo), vqmovn_s32(hi))));
        }
    }
}
#else
static void quantize_q8_0(void *out, const float *x, int n) { quantize_q8_0_plain(out, x, n); }
#endif

// Q4_0: d = (the value of largest magnitude) / -8, q = x / d + 8 rounded and
// clamped to 0..15.
static void quantize_q4_0(void *out, const float *x, int n) {
    BlockQ4_0 *b = out;
    for (int i = 0; i < n / QK; i++) {
        const float *v = x + (size_t)i * QK;
        float amax = 0.0f, max = 0.0f;
        for (int k = 0; k < QK; k++)
            if (fabsf(v[k]) > amax) { amax = fabsf(v[k]); max = v[k]; }
        float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
        if (!isfinite(id)) id = 0.0f;
        b[i].d = f32_to_f16(d);
        for (int k = 0; k < QK / 2; k++) {
            int lo = clamp_int((int)(v[k] * id + 8.5f), 0, 15), hi = clamp_int((int)(v[k + QK / 2] * id + 8.5f), 0, 15);
            b[i].qs[k] = (uint8_t)(lo | hi << 4);
        }
    }
}

#if HAVE_AVX2
// The sum of the 8 lanes (the F32 kernels).
static float sum_m256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

/* The fast Q8_0/Q4_0 dot products of the row kernels (NEON; x86 builds run
   every quantized type through the packed kernels): the same integer sums
   per block with SIMD, two float sums so that consecutive blocks do not
   wait for each other (so the result differs from the plain twin only by
   the order of the float additions). */

#if HAVE_NEON
// The 32 products of signed bytes (w0 w1) and (x0 x1), summed into 4 int32
// lanes. SDOT does four products and their sum per lane in one
// instruction; plain NEON widens the products to int16 and adds
// neighbouring pairs into int32 at once, which no input can overflow
// (128 * 128 fits int16, the pairs are summed in int32).
static int32x4_t dot_bytes(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1) {
#if HAVE_DOTPROD
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, x0), w1, x1);
#else
    int32x4_t sums = vpaddlq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)));
    sums = vpadalq_s16(sums, vmull_high_s8(w0, x0));
    sums = vpadalq_s16(sums, vmull_s8(vget_low_s8(w1), vget_low_s8(x1)));
    return vpadalq_s16(sums, vmull_high_s8(w1, x1));
#endif
}

// acc + block i of a Q8_0 or Q4_0 row times Q8_0 block x, in 4 lanes.
static float32x4_t block_dot(const void *row, int i, const BlockQ8_0 *x, int type, float32x4_t acc) {
    int8x16_t w0, w1;
    float d;
    if (type == TYPE_Q8_0) {
        const BlockQ8_0 *b = (const BlockQ8_0 *)row + i;
        w0 = vld1q_s8(b->qs);
        w1 = vld1q_s8(b->qs + 16);
        d = f16_to_f32(b->d);
    } else { // nibbles to bytes: low ones are values 0..15, high ones 16..31; minus 8
        const BlockQ4_0 *b = (const BlockQ4_0 *)row + i;
        uint8x16_t packed = vld1q_u8(b->qs);
        w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
        w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(packed, 4)), vdupq_n_s8(8));
        d = f16_to_f32(b->d);
    }
    int32x4_t sums = dot_bytes(w0, w1, vld1q_s8(x->qs), vld1q_s8(x->qs + 16));
    return vfmaq_n_f32(acc, vcvtq_f32_s32(sums), d * f16_to_f32(x->d));
}

static float dot_x32(const void *row, const BlockQ8_0 *x, int n_blocks, int type) {
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = acc0;
    int i = 0;
    for (; i + 2 <= n_blocks; i += 2) {
        acc0 = block_dot(row, i, x + i, type, acc0);
        acc1 = block_dot(row, i + 1, x + i + 1, type, acc1);
    }
    if (i < n_blocks) acc0 = block_dot(row, i, x + i, type, acc0);
    return vaddvq_f32(vaddq_f32(acc0, acc1));
}

// dot_x32 for four rows row_bytes apart, each row's bits; x loaded once.
static void dot4_x32(float out[4], const unsigned char *rows, size_t row_bytes, const BlockQ8_0 *x, int n_blocks, int type) {
    float32x4_t acc0[4], acc1[4];
    for (int r = 0; r < 4; r++) acc0[r] = acc1[r] = vdupq_n_f32(0.0f);
    int i = 0;
    for (; i + 2 <= n_blocks; i += 2)
        for (int r = 0; r < 4; r++) {
            acc0[r] = block_dot(rows + r * row_bytes, i, x + i, type, acc0[r]);
            acc1[r] = block_dot(rows + r * row_bytes, i + 1, x + i + 1, type, acc1[r]);
        }
    if (i < n_blocks)
        for (int r = 0; r < 4; r++) acc0[r] = block_dot(rows + r * row_bytes, i, x + i, type, acc0[r]);
    for (int r = 0; r < 4; r++) out[r] = vaddvq_f32(vaddq_f32(acc0[r], acc1[r]));
}

#else
static float dot_x32(const void *row, const BlockQ8_0 *x, int n_blocks, int type) {
    return dot_x32_plain(row, x, n_blocks, type);
}

static void dot4_x32(float out[4], const unsigned char *rows, size_t row_bytes, const BlockQ8_0 *x, int n_blocks, int type) {
    for (int r = 0; r < 4; r++) out[r] = dot_x32(rows + r * row_bytes, x, n_blocks, type);
}
#endif

static float dot_q8_0(const void *row, const void *x, int n) { return dot_x32(row, x, n / QK, TYPE_Q8_0); }
static float dot_q4_0(const void *row, const void *x, int n) { return dot_x32(row, x, n / QK, TYPE_Q4_0); }
static void dot4_q8_0(float out[4], const void *rows, size_t row_bytes, const void *x, int n) {
    dot4_x32(out, rows, row_bytes, x, n / QK, TYPE_Q8_0);
}
static void dot4_q4_0(float out[4], const void *rows, size_t row_bytes, const void *x, int n) {
    dot4_x32(out, rows, row_bytes, x, n / QK, TYPE_Q4_0);
}

/* The other types of the GGUF files people download: Q4_1, Q5_0, Q5_1
   (blocks of 32), the K-quants Q2_K .. Q6_K (super-blocks of 256 with
   packed sub-block scales and mins), the non-linear IQ4_NL and IQ4_XS,
   and MXFP4 (4-bit floats with a power-of-two scale), as ggml defines them. For each: the block layout, its dequantization
   (ggml's float operations in ggml's order, so the values are bit for bit
   GGUF's), and a plain integer dot product against x quantized as
   llama.cpp's CPU backend quantizes it for that type (act_type: Q8_K for
   the K-quants and IQ4_XS, Q8_1 for Q4_1 and Q5_1, Q8_0 for Q5_0,
   IQ4_NL and MXFP4). The dot products sum integers per (sub)block, then apply the
   scales in the order of ggml's generic C code. Writers (-m quantize)
   follow llama-quantize without an importance matrix. fp16 fields are read
   in place: every block size is even, so they are 2-byte aligned. */

#define QK_K 256 // values per K-quant super-block

// Q4_1: 32 values x = d * q + m, q in 0..15.
typedef struct {
    uint16_t d;     // fp16 step
    uint16_t m;     // fp16 offset: the value of q = 0 (the block's minimum)
    uint8_t qs[16]; // q: low nibbles hold values 0..15, high nibbles 16..31
} BlockQ4_1;
_Static_assert(sizeof(BlockQ4_1) == 20, "BlockQ4_1 is 20 bytes");

// Q5_0: 32 values x = d * (q - 16), q in 0..31.
typedef struct {
    uint16_t d;     // fp16 step
    uint8_t qh[4];  // bit j of this little-endian uint32 is bit 4 of value j's q
    uint8_t qs[16]; // q's low 4 bits: low nibbles values 0..15, high nibbles 16..31
} BlockQ5_0;
_Static_assert(sizeof(BlockQ5_0) == 22, "BlockQ5_0 is 22 bytes");

// Q5_1: 32 values x = d * q + m, q in 0..31.
typedef struct {
    uint16_t d;     // fp16 step
    uint16_t m;     // fp16 offset (the block's minimum)
    uint8_t qh[4];  // bit 4 of each q, as in Q5_0
    uint8_t qs[16]; // low 4 bits, as in Q5_0
} BlockQ5_1;
_Static_assert(sizeof(BlockQ5_1) == 24, "BlockQ5_1 is 24 bytes");

// Q2_K: 256 values in 16 sub-blocks of 16; value = d * sc * q - dmin * m,
// q in 0..3, sc and m 4-bit per sub-block.
typedef struct {
    uint8_t scales[16]; // sub-block j: sc in the low nibble, m in the high one
    uint8_t qs[64];     // 2-bit q: byte 32 * h + l holds values 128 * h + l + 32 * s in bits 2s, 2s+1 (s = 0..3)
    uint16_t d;         // fp16 step of the sub-block scales
    uint16_t dmin;      // fp16 step of the sub-block mins
} BlockQ2_K;
_Static_assert(sizeof(BlockQ2_K) == 84, "BlockQ2_K is 84 bytes");

// Q3_K: 256 values in 16 sub-blocks of 16; value = d * (sc - 32) * (q - 4),
// q in 0..7, sc 6-bit per sub-block.
typedef struct {
    uint8_t hmask[32];  // bit 2 of q: value k has it in hmask[k % 32], bit k / 32
    uint8_t qs[64];     // q's low 2 bits, packed as Q2_K's qs
    uint8_t scales[12]; // sc of sub-block j: low 4 bits in the low (j < 8) or high (j >= 8) nibble
                        // of byte j % 8, high 2 bits in byte 8 + j % 4 at bit 2 * (j / 4)
    uint16_t d;         // fp16 step of the sub-block scales
} BlockQ3_K;
_Static_assert(sizeof(BlockQ3_K) == 110, "BlockQ3_K is 110 bytes");

// Q4_K: 256 values in 8 sub-blocks of 32; value = d * sc * q - dmin * m,
// q in 0..15, sc and m 6-bit per sub-block.
typedef struct {
    uint16_t d;         // fp16 step of the sub-block scales
    uint16_t dmin;      // fp16 step of the sub-block mins
    uint8_t scales[12]; // sc and m, 6 bits each: see k4_scale_min
    uint8_t qs[128];    // q: byte 32 * h + l holds value 64 * h + l (low nibble) and 64 * h + 32 + l (high)
} BlockQ4_K;
_Static_assert(sizeof(BlockQ4_K) == 144, "BlockQ4_K is 144 bytes");

// Q5_K: as Q4_K with q in 0..31.
typedef struct {
    uint16_t d;         // fp16 step of the sub-block scales
    uint16_t dmin;      // fp16 step of the sub-block mins
    uint8_t scales[12]; // as Q4_K
    uint8_t qh[32];     // bit 4 of q: value k has it in qh[k % 32], bit k / 32
    uint8_t qs[128];    // q's low 4 bits, packed as Q4_K's qs
} BlockQ5_K;
_Static_assert(sizeof(BlockQ5_K) == 176, "BlockQ5_K is 176 bytes");

// Q6_K: 256 values in 16 sub-blocks of 16; value = d * sc * (q - 32),
// q in 0..63, sc int8 per sub-block.
typedef struct {
    uint8_t ql[128];   // q's low 4 bits: in each half h (128 values), byte 64 * h + l holds
                       // values l (low nibble) and l + 64 (high), byte 64 * h + 32 + l values l + 32 and l + 96
    uint8_t qh[64];    // q's high 2 bits: byte 32 * h + l holds values l, l + 32, l + 64, l + 96
                       // of half h in bits 0-1, 2-3, 4-5, 6-7
    int8_t scales[16]; // sc per sub-block
    uint16_t d;        // fp16 step of the sub-block scales
} BlockQ6_K;
_Static_assert(sizeof(BlockQ6_K) == 210, "BlockQ6_K is 210 bytes");

// IQ4_NL: 32 values x = d * iq4nl_values[q], q in 0..15 (a non-uniform grid).
typedef struct {
    uint16_t d;     // fp16 scale
    uint8_t qs[16]; // q: low nibbles values 0..15, high nibbles 16..31
} BlockIQ4_NL;
_Static_assert(sizeof(BlockIQ4_NL) == 18, "BlockIQ4_NL is 18 bytes");

// IQ4_XS: 256 values in 8 sub-blocks of 32; value = d * (ls - 32) * iq4nl_values[q],
// ls 6-bit per sub-block.
typedef struct {
    uint16_t d;         // fp16 step of the sub-block scales
    uint16_t scales_h;  // ls's high 2 bits: sub-block j at bit 2 * j
    uint8_t scales_l[4]; // ls's low 4 bits: sub-block j in byte j / 2, low nibble for even j
    uint8_t qs[128];    // q: 16 bytes per sub-block, low nibbles values 0..15, high 16..31
} BlockIQ4_XS;
_Static_assert(sizeof(BlockIQ4_XS) == 136, "BlockIQ4_XS is 136 bytes");

// MXFP4 (OCP microscaling): 32 values x = E2M1(q) * 2^(e - 127), q a 4-bit
// E2M1 code (sign, 2 exponent bits, 1 mantissa bit). No 16-bit fields, so
// its blocks (17 bytes) may sit at any address.
typedef struct {
    uint8_t e;      // E8M0 scale: 2^(e - 127); 255 is NaN (refused at load)
    uint8_t qs[16]; // q: low nibbles values 0..15, high nibbles 16..31
} BlockMXFP4;
_Static_assert(sizeof(BlockMXFP4) == 17, "BlockMXFP4 is 17 bytes");

// Q8_1 activations (for Q4_1 and Q5_1 weights): 32 values x = d * q.
typedef struct {
    uint16_t d;     // fp16 step
    uint16_t s;     // fp16 of d * sum(q), for the weights' offset m
    int8_t qs[32];
} BlockQ8_1;
_Static_assert(sizeof(BlockQ8_1) == 36, "BlockQ8_1 is 36 bytes");

// Q8_K activations (for the K-quants and IQ4_XS): 256 values x = d * q.
typedef struct {
    float d;           // step (a float, not fp16)
    int8_t qs[QK_K];
    int16_t bsums[16]; // sum of q in each group of 16, for the weights' mins
} BlockQ8_K;
_Static_assert(sizeof(BlockQ8_K) == 292, "BlockQ8_K is 292 bytes");

// IQ4_NL's and IQ4_XS's 16 levels, denser near zero where weights are.
static const int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The 16 E2M1 values doubled, so that they are integers (0, 0.5, 1, 1.5,
// 2, 3, 4, 6 and their negatives); mxfp4_half_scale halves the scale to
// make up (ggml's kvalues_mxfp4 and GGML_E8M0_TO_FP32_HALF).
static const int8_t mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128), the E8M0 scale halved, built from its bits: e 0 and 1 give
// the subnormals 2^-128 and 2^-127. e is not 255 (the loaders refuse it).
static float mxfp4_half_scale(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

// The 32 bits of Q5_0/Q5_1's qh.
static uint32_t read_qh32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// Q3_K's 6-bit scale of sub-block j (0..15), still offset by 32.
static int q3_k_scale(const uint8_t *scales, int j) {
    int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
    int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return low | high << 4;
}

// Q4_K/Q5_K's 6-bit scale and min of sub-block j (0..7): sub-blocks 0..3
// in the low 6 bits of bytes j and j + 4; sub-blocks 4..7 have their low 4
// bits in byte j + 4 (scale low nibble, min high) and their top 2 bits in
// the spare top bits of bytes j - 4 (scale) and j (min).
static void k4_scale_min(const uint8_t *scales, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (scales[j + 4] & 0xF) | (scales[j - 4] >> 6) << 4;
        *m = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
    }
}

/* Dequantization: ggml's dequantize_row_*, the same float operations in the
   same order, so the results are its results bit for bit. */

static void dequantize_q4_1(float *out, const void *row, int n) {
    const BlockQ4_1 *b = row;
    for (int i = 0; i < n / 32; i++, out += 32) {
        float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
        for (int j = 0; j < 16; j++) {
            out[j] = (b[i].qs[j] & 0xF) * d + m;
            out[j + 16] = (b[i].qs[j] >> 4) * d + m;
        }
    }
}

// Q5_0/Q5_1's q (0..31) of the 32 values of a block.
static void q5_values(int q[32], const uint8_t *qs, const uint8_t *qh_bytes) {
    uint32_t qh = read_qh32(qh_bytes);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xF) | ((qh >> j) & 1) << 4;
        q[j + 16] = (qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
    }
}

static void dequantize_q5_0(float *out, const void *row, int n) {
    const BlockQ5_0 *b = row;
    for (int i = 0; i < n / 32; i++, out += 32) {
        float d = f16_to_f32(b[i].d);
        int q[32];
        q5_values(q, b[i].qs, b[i].qh);
        for (int k = 0; k < 32; k++) out[k] = (q[k] - 16) * d;
    }
}

static void dequantize_q5_1(float *out, const void *row, int n) {
    const BlockQ5_1 *b = row;
    for (int i = 0; i < n / 32; i++, out += 32) {
        float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
        int q[32];
        q5_values(q, b[i].qs, b[i].qh);
        for (int k = 0; k < 32; k++) out[k] = q[k] * d + m;
    }
}

// Q2_K's q of value k (0..255) of a block.
static int q2_k_quant(const uint8_t *qs, int k) {
    return (qs[32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3;
}

static void dequantize_q2_k(float *out, const void *row, int n) {
    const BlockQ2_K *b = row;
    for (int i = 0; i < n / QK_K; i++, out += QK_K) {
        float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
        for (int j = 0; j < 16; j++) {
            float dl = d * (b[i].scales[j] & 0xF), ml = dmin * (b[i].scales[j] >> 4);
            for (int k = 16 * j; k < 16 * j + 16; k++) out[k] = dl * q2_k_quant(b[i].qs, k) - ml;
        }
    }
}

// Q3_K's q - 4 of value k (-4..3).
static int q3_k_quant(const BlockQ3_K *b, int k) {
    int high = (b->hmask[k % 32] >> (k / 32)) & 1;
    return q2_k_quant(b->qs, k) - (high ? 0 : 4);
}

static void dequantize_q3_k(float *out, const void *row, int n) {
    const BlockQ3_K *b = row;
    for (int i = 0; i < n / QK_K; i++, out += QK_K) {
        float d = f16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
            float dl = d * (q3_k_scale(b[i].scales, j) - 32);
            for (int k = 16 * j; k < 16 * j + 16; k++) out[k] = dl * q3_k_quant(&b[i], k);
        }
    }
}

// Q4_K's (and Q5_K's low 4 bits of) q of value k.
static int q4_k_quant(const uint8_t *qs, int k) {
    uint8_t byte = qs[32 * (k / 64) + k % 32];
    return (k % 64) < 32 ? byte & 0xF : byte >> 4;
}

static int q5_k_quant(const BlockQ5_K *b, int k) {
    return q4_k_quant(b->qs, k) + ((b->qh[k % 32] >> (k / 32)) & 1) * 16;
}

// Q4_K and Q5_K share their first fields (d, dmin, scales): super-block i
// of a row of either, read through those fields, and its q of value k.
static const BlockQ4_K *k4_block(const void *row, int i, int type) {
    return (const void *)((const unsigned char *)row + (size_t)i * (type == TYPE_Q5_K ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K)));
}
static int k4_quant(const BlockQ4_K *b, int k, int type) {
    return type == TYPE_Q5_K ? q5_k_quant((const BlockQ5_K *)b, k) : q4_k_quant(b->qs, k);
}

static void dequantize_k4(float *out, const void *row, int n, int type) {
    for (int i = 0; i < n / QK_K; i++, out += QK_K) {
        const BlockQ4_K *b = k4_block(row, i, type);
        float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            k4_scale_min(b->scales, j, &sc, &m);
            float dl = d * sc, ml = dmin * m;
            for (int k = 32 * j; k < 32 * j + 32; k++) out[k] = dl * k4_quant(b, k, type) - ml;
        }
    }
}
static void dequantize_q4_k(float *out, const void *row, int n) { dequantize_k4(out, row, n, TYPE_Q4_K); }
static void dequantize_q5_k(float *out, const void *row, int n) { dequantize_k4(out, row, n, TYPE_Q5_K); }

// Q6_K's q - 32 of value k (-32..31).
static int q6_k_quant(const BlockQ6_K *b, int k) {
    int h = k / 128, l = k % 32, quarter = (k % 128) / 32; // quarter s: values l + 32 * s of half h
    uint8_t low = b->ql[64 * h + 32 * (quarter & 1) + l];
    int low4 = quarter < 2 ? low & 0xF : low >> 4;
    int high2 = (b->qh[32 * h + l] >> (2 * quarter)) & 3;
    return (low4 | high2 << 4) - 32;
}

static void dequantize_q6_k(float *out, const void *row, int n) {
    const BlockQ6_K *b = row;
    for (int i = 0; i < n / QK_K; i++, out += QK_K) {
        float d = f16_to_f32(b[i].d);
        for (int k = 0; k < QK_K; k++) out[k] = d * b[i].scales[k / 16] * q6_k_quant(&b[i], k);
    }
}

static void dequantize_iq4_nl(float *out, const void *row, int n) {
    const BlockIQ4_NL *b = row;
    for (int i = 0; i < n / 32; i++, out += 32) {
        float d = f16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
            out[j] = d * iq4nl_values[b[i].qs[j] & 0xF];
            out[j + 16] = d * iq4nl_values[b[i].qs[j] >> 4];
        }
    }
}

static void dequantize_mxfp4(float *out, const void *row, int n) {
    const BlockMXFP4 *b = row;
    for (int i = 0; i < n / 32; i++, out += 32) {
        float d = mxfp4_half_scale(b[i].e);
        for (int j = 0; j < 16; j++) {
            out[j] = mxfp4_values[b[i].qs[j] & 0xF] * d;
            out[j + 16] = mxfp4_values[b[i].qs[j] >> 4] * d;
        }
    }
}

// IQ4_XS's 6-bit scale of sub-block j, still offset by 32.
static int iq4_xs_scale(const BlockIQ4_XS *b, int j) {
    return ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | ((b->scales_h >> (2 * j)) & 3) << 4;
}

static void dequantize_iq4_xs(float *out, const void *row, int n) {
    const BlockIQ4_XS *b = row;
    for (int i = 0; i < n / QK_K; i++, out += QK_K) {
        float d = f16_to_f32(b[i].d);
        for (int j = 0; j < 8; j++) {
            float dl = d * (iq4_xs_scale(&b[i], j) - 32);
            const uint8_t *qs = b[i].qs + 16 * j;
            for (int l = 0; l < 16; l++) {
                out[32 * j + l] = dl * iq4nl_values[qs[l] & 0xF];
                out[32 * j + l + 16] = dl * iq4nl_values[qs[l] >> 4];
            }
        }
    }
}

/* Activations, quantized as llama.cpp's CPU backend does before a dot
   product (ggml's reference quantize_row_q8_K_ref / quantize_row_q8_1_ref).
   The values must be finite. */

// ggml's nearest_int, to the bit: adding 1.5 * 2^23 leaves x rounded (half
// to even) in the low 23 bits, offset by 2^22. Exact for |x| < 2^22 and,
// unlike a cast, defined for every input (inf and NaN give -2^22 and 0),
// so even degenerate blocks come out as ggml's do.
static int nearest_int(float x) {
    float shifted = x + 12582912.0f;
    uint32_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    return (int)(bits & 0x7FFFFF) - 0x400000;
}

// Q8_K: per 256 values, iscale = -127 / (the value of largest magnitude),
// q = round(iscale * x) (at most 127), d = 1 / iscale. Where AVX-512 is
// built its twin below runs instead, and only the tests call this one.
__attribute__((unused)) static void quantize_q8_k_plain(void *out, const float *x, int n) {
    BlockQ8_K *y = out;
    for (int i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int k = 0; k < QK_K; k++)
            if (fabsf(x[k]) > amax) { amax = fabsf(x[k]); max = x[k]; }
        memset(&y[i], 0, sizeof y[i]); // ggml leaves bsums unset here; d = 0 makes them unused
        float iscale = -127.0f / max;
        if (amax == 0.0f || !isfinite(iscale)) continue; // (ggml: undefined for a tiny denormal max) zeros
        for (int k = 0; k < QK_K; k++) {
            int q = nearest_int(iscale * x[k]);
            y[i].qs[k] = (int8_t)(q < 127 ? q : 127);
        }
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int k = 16 * g; k < 16 * g + 16; k++) sum += y[i].qs[k];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

#if HAVE_AVX512
// quantize_q8_k_plain's SIMD twin (the prefill quantizes every position for
// every product): the same operations, 16 values at a time, the same bytes.
static void quantize_q8_k(void *out, const float *x, int n) {
    BlockQ8_K *y = out;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int i = 0; i < n / QK_K; i++, x += QK_K) {
        __m512 amax16 = _mm512_setzero_ps();
        for (int k = 0; k < QK_K; k += 16) amax16 = _mm512_max_ps(amax16, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + k)));
        float amax = _mm512_reduce_max_ps(amax16), max = 0.0f;
        for (int k = 0; k < QK_K; k += 16) { // the first value of that magnitude, the one the plain loop keeps
            __mmask16 at = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + k)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (at) { max = x[k + __builtin_ctz(at)]; break; }
        }
        memset(&y[i], 0, sizeof y[i]);
        float iscale = -127.0f / max;
        if (amax == 0.0f || !isfinite(iscale)) continue;
        for (int g = 0; g < 16; g++) { // rounding to nearest even, as nearest_int
            __m512 v = _mm512_mul_ps(_mm512_set1_ps(iscale), _mm512_loadu_ps(x + 16 * g));
            __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * g), _mm512_cvtepi32_epi8(q));
            y[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[i].d = 1 / iscale;
    }
}
#elif HAVE_AVX2
// The same on AVX2, 8 values at a time, the same bytes.
static void quantize_q8_k(void *out, const float *x, int n) {
    BlockQ8_K *y = out;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = amax_floats(x, QK_K), max = 0.0f;
        for (int k = 0; k < QK_K; k += 8) { // the first value of that magnitude, the one the plain loop keeps
            int at = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (at) { max = x[k + __builtin_ctz((unsigned)at)]; break; }
        }
        memset(&y[i], 0, sizeof y[i]);
        float iscale = -127.0f / max;
        if (amax == 0.0f || !isfinite(iscale)) continue;
        for (int g = 0; g < 16; g++) { // rounding to nearest even, as nearest_int
            __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_set1_ps(iscale), _mm256_loadu_ps(x + 16 * g)));
            __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_set1_ps(iscale), _mm256_loadu_ps(x + 16 * g + 8)));
            q0 = _mm256_min_epi32(q0, _mm256_set1_epi32(127));
            q1 = _mm256_min_epi32(q1, _mm256_set1_epi32(127));
            __m256i halves = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8); // 16 int16 in order
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * g), _mm_packs_epi16(_mm256_castsi256_si128(halves), _mm256_extracti128_si256(halves, 1)));
            __m128i sum = _mm_madd_epi16(_mm_add_epi16(_mm256_castsi256_si128(halves), _mm256_extracti128_si256(halves, 1)), _mm_set1_epi16(1));
            sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4E));
            y[i].bsums[g] = (int16_t)_mm_cvtsi128_si32(_mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xB1)));
        }
        y[i].d = 1 / iscale;
    }
}
#else
static void quantize_q8_k(void *out, const float *x, int n) { quantize_q8_k_plain(out, x, n); }
#endif

// Q8_1: per 32 values, d = amax / 127, q = x * (127 / amax) rounded to
// nearest even, s = d * sum(q) with the unrounded d, both stored as fp16.
// This is ggml's x86 (AVX2) form, which llama.cpp runs on x86 machines: with
// it our Q4_1 logits match the references to 1e-7; with ggml's reference
// form (q = roundf(x / d)), to 3e-4.
static void quantize_q8_1(void *out, const float *x, int n) {
    BlockQ8_1 *y = out;
    for (int i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(x[k]));
        float d = amax / 127, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        if (!isfinite(id)) id = 0.0f; // amax so tiny that 127 / amax overflows: zeros
        int sum = 0;
        for (int k = 0; k < 32; k++) {
            y[i].qs[k] = (int8_t)nearbyintf(x[k] * id);
            sum += y[i].qs[k];
        }
        y[i].d = f32_to_f16(d);
        y[i].s = f32_to_f16(sum * d);
    }
}

// The activation formats as floats (for the tests; nothing else reads them back).
static void dequantize_q8_k(float *out, const void *row, int n) {
    const BlockQ8_K *b = row;
    for (int i = 0; i < n / QK_K; i++)
        for (int k = 0; k < QK_K; k++) out[i * QK_K + k] = b[i].d * b[i].qs[k];
}

static void dequantize_q8_1(float *out, const void *row, int n) {
    const BlockQ8_1 *b = row;
    for (int i = 0; i < n / 32; i++)
        for (int k = 0; k < 32; k++) out[i * 32 + k] = f16_to_f32(b[i].d) * b[i].qs[k];
}

/* Dot products of one weight row (n values) with one quantized activation
   row: exact integer sums per (sub)block, then the scales, in the order of
   ggml's generic C code (ggml_vec_dot_*_q8_*), so the results are its
   results. The K-quants keep, as it does, eight float partial sums over the
   positions k % 8 and add them last. */

static float dot_q4_1_plain(const void *row, const void *act, int n) {
    const BlockQ4_1 *w = row;
    const BlockQ8_1 *a = act;
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += (w[i].qs[j] & 0xF) * a[i].qs[j] + (w[i].qs[j] >> 4) * a[i].qs[j + 16];
        // the offset m times every x: m * (d_x * sum(q_x)) = m * s
        sum += (f16_to_f32(w[i].d) * f16_to_f32(a[i].d)) * sumi + f16_to_f32(w[i].m) * f16_to_f32(a[i].s);
    }
    return sum;
}

// sum(q * x) of a Q5_0/Q5_1 block, less offset * sum(x).
static int q5_block_dot(const uint8_t *qs, const uint8_t *qh, const int8_t *x, int offset) {
    int q[32], sumi = 0;
    q5_values(q, qs, qh);
    for (int k = 0; k < 32; k++) sumi += (q[k] - offset) * x[k];
    return sumi;
}

static float dot_q5_0_plain(const void *row, const void *act, int n) {
    const BlockQ5_0 *w = row;
    const BlockQ8_0 *a = act;
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++)
        sum += (f16_to_f32(w[i].d) * f16_to_f32(a[i].d)) * q5_block_dot(w[i].qs, w[i].qh, a[i].qs, 16);
    return sum;
}

static float dot_q5_1_plain(const void *row, const void *act, int n) {
    const BlockQ5_1 *w = row;
    const BlockQ8_1 *a = act;
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++)
        sum += (f16_to_f32(w[i].d) * f16_to_f32(a[i].d)) * q5_block_dot(w[i].qs, w[i].qh, a[i].qs, 0) +
               f16_to_f32(w[i].m) * f16_to_f32(a[i].s);
    return sum;
}

static float dot_iq4_nl_plain(const void *row, const void *act, int n) {
    const BlockIQ4_NL *w = row;
    const BlockQ8_0 *a = act;
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += iq4nl_values[w[i].qs[j] & 0xF] * a[i].qs[j] + iq4nl_values[w[i].qs[j] >> 4] * a[i].qs[j + 16];
        sum += (f16_to_f32(a[i].d) * f16_to_f32(w[i].d)) * sumi;
    }
    return sum;
}

// ggml's order: the two scales multiplied first, then by the block's sum.
static float dot_mxfp4_plain(const void *row, const void *act, int n) {
    const BlockMXFP4 *w = row;
    const BlockQ8_0 *a = act;
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += mxfp4_values[w[i].qs[j] & 0xF] * a[i].qs[j] + mxfp4_values[w[i].qs[j] >> 4] * a[i].qs[j + 16];
        sum += (f16_to_f32(a[i].d) * mxfp4_half_scale(w[i].e)) * sumi;
    }
    return sum;
}

static float dot_q2_k_plain(const void *row, const void *act, int n) {
    const BlockQ2_K *w = row;
    const BlockQ8_K *a = act;
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int sumi = 0, summ = 0; // sum of sc * q * q_x; of m * q_x, from the group sums
        for (int j = 0; j < 16; j++) {
            int part = 0;
            for (int k = 16 * j; k < 16 * j + 16; k++) part += q2_k_quant(w[i].qs, k) * a[i].qs[k];
            sumi += (w[i].scales[j] & 0xF) * part;
            summ += (w[i].scales[j] >> 4) * a[i].bsums[j];
        }
        float d = a[i].d * f16_to_f32(w[i].d), dmin = a[i].d * f16_to_f32(w[i].dmin);
        sum += d * sumi - dmin * summ;
    }
    return sum;
}

static float dot_q3_k_plain(const void *row, const void *act, int n) {
    const BlockQ3_K *w = row;
    const BlockQ8_K *a = act;
    float lanes[8] = {0};
    for (int i = 0; i < n / QK_K; i++) {
        int32_t lane[8] = {0};
        for (int k = 0; k < QK_K; k++)
            lane[k % 8] += (q3_k_scale(w[i].scales, k / 16) - 32) * (q3_k_quant(&w[i], k) * a[i].qs[k]);
        float d = f16_to_f32(w[i].d) * a[i].d;
        for (int l = 0; l < 8; l++) lanes[l] += d * lane[l];
    }
    float sum = 0.0f;
    for (int l = 0; l < 8; l++) sum += lanes[l];
    return sum;
}

// Q4_K and Q5_K: sum(d * sc * q * x) in eight lanes, and the mins
// subtracted per block from the group sums of Q8_K.
static float dot_k4_plain(const void *row, const BlockQ8_K *a, int n, int type) {
    float lanes[8] = {0}, sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        const BlockQ4_K *w = k4_block(row, i, type);
        int32_t lane[8] = {0};
        int summ = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            k4_scale_min(w->scales, j, &sc, &m);
            for (int k = 32 * j; k < 32 * j + 32; k++) lane[k % 8] += sc * (k4_quant(w, k, type) * a[i].qs[k]);
            summ += m * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
        }
        float d = f16_to_f32(w->d) * a[i].d, dmin = f16_to_f32(w->dmin) * a[i].d;
        for (int l = 0; l < 8; l++) lanes[l] += d * lane[l];
        sum -= dmin * summ;
    }
    for (int l = 0; l < 8; l++) sum += lanes[l];
    return sum;
}
static float dot_q4_k_plain(const void *row, const void *act, int n) { return dot_k4_plain(row, act, n, TYPE_Q4_K); }
static float dot_q5_k_plain(const void *row, const void *act, int n) { return dot_k4_plain(row, act, n, TYPE_Q5_K); }

static float dot_q6_k_plain(const void *row, const void *act, int n) {
    const BlockQ6_K *w = row;
    const BlockQ8_K *a = act;
    float lanes[8] = {0};
    for (int i = 0; i < n / QK_K; i++) {
        int32_t lane[8] = {0};
        for (int k = 0; k < QK_K; k++) lane[k % 8] += w[i].scales[k / 16] * (q6_k_quant(&w[i], k) * a[i].qs[k]);
        float d = f16_to_f32(w[i].d) * a[i].d;
        for (int l = 0; l < 8; l++) lanes[l] += d * lane[l];
    }
    float sum = 0.0f;
    for (int l = 0; l < 8; l++) sum += lanes[l];
    return sum;
}

static float dot_iq4_xs_plain(const void *row, const void *act, int n) {
    const BlockIQ4_XS *w = row;
    const BlockQ8_K *a = act;
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        float d = f16_to_f32(w[i].d) * a[i].d;
        for (int j = 0; j < 8; j++) {
            const uint8_t *qs = w[i].qs + 16 * j;
            const int8_t *x = a[i].qs + 32 * j;
            int sumi = 0;
            for (int l = 0; l < 16; l++)
                sumi += iq4nl_values[qs[l] & 0xF] * x[l] + iq4nl_values[qs[l] >> 4] * x[l + 16];
            sum += (d * (iq4_xs_scale(&w[i], j) - 32)) * sumi;
        }
    }
    return sum;
}

/* Writers, as llama-quantize writes these types without an importance
   matrix (ggml's quantize_row_*_ref and their helpers): per sub-block, a
   scale (and min) fitted to the values, then the sub-block scales quantized
   against one fp16 step per super-block, then every value rounded against
   its sub-block's final scale. Their output is llama-quantize's byte for byte
   only without FP contraction (no a * b + c fused into fma): GCC with
   -std=c11 does not fuse; clang and -std=gnu11 do unless -ffp-contract=off. */

#define GROUP_MAX_EPS 1e-15f // sub-blocks smaller than this are all zero

// Fits x[i] ~ scale * L[i] - min (n <= 32 values, L in 0..nmax, min >= 0)
// minimizing the weighted error sum w * |err| (use_mad) or w * err^2: a
// first guess from the range, then nstep + 1 trial scales around it, each
// refined by weighted least squares; the best fit wins. Returns scale,
// *min_out = min. (ggml: make_qkx2_quants.)
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *min_out, float rmin,
                           float rdelta, int nstep, int use_mad) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0; // the grid always includes zero
    if (max == min) {
        memset(L, 0, (size_t)n);
        *min_out = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        best += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    uint8_t trial[32];
    for (int step = 0; step <= nstep; step++) {
        iscale = (rmin + rdelta * step + nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
            trial[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0)) continue; // (not "det <= 0": NaN skips too, as in ggml)
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0) { // keep zero on the grid: refit the scale alone
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0.0f;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * trial[i] + this_min - x[i];
            err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
        }
        if (err < best) {
            memcpy(L, trial, (size_t)n);
            best = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *min_out = -min;
    return scale;
}

// The first guess of fit_scale and fit_scale_q3: L[i] = x[i] * -nmax / max
// rounded, in -nmax..nmax - 1 (max: the value of largest magnitude), and
// the weighted sums sum_lx = sum w x L, sum_l2 = sum w L^2 with w = x^2.
// Returns max; 0 with L all zero when every |x| is below GROUP_MAX_EPS.
static float first_levels(int n, int nmax, const float *x, int8_t *L, float *sum_lx, float *sum_l2) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    *sum_lx = *sum_l2 = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        *sum_lx += w * x[i] * l;
        *sum_l2 += w * l * l;
    }
    return max;
}

// Fits x[i] ~ scale * (L[i] - nmax), L in 0..2 nmax - 1, weights x^2:
// scale from the value of largest magnitude (which maps to -nmax), then 18
// nearby scales, keeping the best least-squares fit. Returns scale.
// (ggml: make_qx_quants with rmse_type 1 and no weights.)
static float fit_scale(int n, int nmax, const float *x, int8_t *L) {
    float sum_lx, sum_l2, max = first_levels(n, nmax, x, L, &sum_lx, &sum_l2);
    if (max == 0.0f) return 0.0f;
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    float scale = sum_l2 ? sum_lx / sum_l2 : 0.0f, best = scale * sum_lx;
    for (int step = -9; step <= 9; step++) {
        if (step == 0) continue;
        float iscale = -(nmax + 0.1f * step) / max;
        sum_lx = sum_l2 = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sum_lx += w * x[i] * l;
            sum_l2 += w * l * l;
        }
        if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) { // a smaller squared error
            for (int i = 0; i < n; i++) L[i] = (int8_t)(clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1) + nmax);
            scale = sum_lx / sum_l2;
            best = scale * sum_lx;
        }
    }
    return scale;
}

// Packs Q4_K/Q5_K's eight 6-bit scales and mins (k4_scale_min's layout).
static void pack_k4_scales(uint8_t *scales, const uint8_t *ls, const uint8_t *lm) {
    for (int j = 0; j < 4; j++) {
        scales[j] = ls[j];
        scales[j + 4] = lm[j];
    }
    for (int j = 4; j < 8; j++) {
        scales[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
        scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
        scales[j] |= (uint8_t)((lm[j] >> 4) << 6);
    }
}

// Q4_K and Q5_K (nmax 15 or 31): the shared part. Fits each sub-block of
// 32 (weights: rms of the sub-block + |x|), quantizes the scales and mins
// to 6 bits against d = max scale / 63 and dmin = max min / 63, then rounds
// every value against its sub-block's final scale and min into L.
static void quantize_k4_block(const float *x, int nmax, float rmin, int nstep, uint16_t *d_out, uint16_t *dmin_out,
                              uint8_t *scales_out, uint8_t *L) {
    float scales[8], mins[8], w[32], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j;
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; l++) sum_x2 += xj[l] * xj[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xj[l]);
        scales[j] = fit_scale_min(32, nmax, xj, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.0f, inv_min = max_min > 0 ? 63.f / max_min : 0.0f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        // as ggml: the rounded value truncated to 8 bits, then capped at 63
        ls[j] = (uint8_t)nearest_int(inv_scale * scales[j]);
        lm[j] = (uint8_t)nearest_int(inv_min * mins[j]);
        if (ls[j] > 63) ls[j] = 63;
        if (lm[j] > 63) lm[j] = 63;
    }
    memset(scales_out, 0, 12);
    pack_k4_scales(scales_out, ls, lm);
    *d_out = f32_to_f16(max_scale / 63.f);
    *dmin_out = f32_to_f16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_scale_min(scales_out, j, &sc, &m);
        float d = f16_to_f32(*d_out) * sc;
        if (!d) continue; // keep the fit's L
        float dm = f16_to_f32(*dmin_out) * m;
        for (int l = 32 * j; l < 32 * j + 32; l++) L[l] = (uint8_t)clamp_int(nearest_int((x[l] + dm) / d), 0, nmax);
    }
}

static void quantize_q4_k(void *out, const float *x, int n) {
    BlockQ4_K *y = out;
    for (int i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        quantize_k4_block(x, 15, -1.0f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int k = 0; k < 128; k++) {
            int base = 64 * (k / 32) + k % 32; // byte k: values base and base + 32
            y[i].qs[k] = (uint8_t)(L[base] | L[base + 32] << 4);
        }
    }
}

static void quantize_q5_k(void *out, const float *x, int n) {
    BlockQ5_K *y = out;
    for (int i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        quantize_k4_block(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int k = 0; k < 128; k++) {
            int base = 64 * (k / 32) + k % 32;
            y[i].qs[k] = (uint8_t)((L[base] & 0xF) | (L[base + 32] & 0xF) << 4);
        }
        for (int k = 0; k < QK_K; k++) y[i].qh[k % 32] |= (uint8_t)((L[k] >> 4) << (k / 32));
    }
}

static void quantize_q6_k(void *out, const float *x, int n) {
    BlockQ6_K *y = out;
    for (int i = 0; i < n / QK_K; i++, x += QK_K) {
        int8_t L[QK_K]; // q, 0..63
        float scales[16], max_scale = 0.0f, max_abs = 0.0f;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_scale(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs) { max_abs = fabsf(scales[j]); max_scale = scales[j]; }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (max_abs < GROUP_MAX_EPS) continue; // all zero
        float iscale = -128.f / max_scale; // the largest scale maps to -128
        y[i].d = f32_to_f16(1 / iscale);
        for (int j = 0; j < 16; j++) {
            int s = nearest_int(iscale * scales[j]);
            y[i].scales[j] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < 16; j++) {
            float d = f16_to_f32(y[i].d) * y[i].scales[j];
            if (!d) continue; // keep the fit's L
            for (int k = 16 * j; k < 16 * j + 16; k++) L[k] = (int8_t)(clamp_int(nearest_int(x[k] / d), -32, 31) + 32);
        }
        for (int k = 0; k < QK_K; k++) { // the inverse of q6_k_quant
            int h = k / 128, l = k % 32, quarter = (k % 128) / 32;
            y[i].ql[64 * h + 32 * (quarter & 1) + l] |= (uint8_t)((L[k] & 0xF) << (quarter < 2 ? 0 : 4));
            y[i].qh[32 * h + l] |= (uint8_t)((L[k] >> 4) << (2 * quarter));
        }
    }
}

// Q2_K and Q3_K's q: values 128 h + 32 s + l (s = 0..3) share byte 32 h + l.
static void pack_2bit(uint8_t *qs, const uint8_t *L) {
    memset(qs, 0, 64);
    for (int k = 0; k < QK_K; k++) qs[32 * (k / 128) + k % 32] |= (uint8_t)((L[k] & 3) << (2 * ((k % 128) / 32)));
}

// Q2_K: sub-blocks of 16 fitted with scale and min (weights |x|, least
// absolute error), both quantized to 4 bits against d = max scale / 15 and
// dmin = max min / 15.
static void quantize_q2_k(void *out, const float *x, int n) {
    BlockQ2_K *y = out;
    for (int i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        float scales[16], mins[16], w[16], max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        y[i].d = y[i].dmin = f32_to_f16(0.0f);
        if (max_scale > 0) {
            float iscale = 15.f / max_scale;
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = f32_to_f16(max_scale / 15.f);
        }
        if (max_min > 0) {
            float iscale = 15.f / max_min;
            for (int j = 0; j < 16; j++) y[i].scales[j] |= (uint8_t)((unsigned)nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = f32_to_f16(max_min / 15.f);
        }
        for (int j = 0; j < 16; j++) {
            float d = f16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue; // keep the fit's L
            float dm = f16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int k = 16 * j; k < 16 * j + 16; k++) L[k] = (uint8_t)clamp_int(nearest_int((x[k] + dm) / d), 0, 3);
        }
        pack_2bit(y[i].qs, L);
    }
}

// Fits x[i] ~ scale * (L[i] - nmax), L in 0..2 nmax - 1, weights x^2: the
// scale of the largest magnitude, then up to five passes that move single
// values to a neighbouring level while that lowers the squared error.
// (ggml: make_q3_quants with do_rmse.)
static float fit_scale_q3(int n, int nmax, const float *x, int8_t *L) {
    float sum_lx, sum_l2;
    if (first_levels(n, nmax, x, L, &sum_lx, &sum_l2) == 0.0f) return 0.0f;
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i], slx = sum_lx - w * x[i] * L[i];
            if (slx <= 0) continue;
            float sl2 = sum_l2 - w * L[i] * L[i];
            int l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (l == L[i]) continue;
            slx += w * x[i] * l;
            sl2 += w * l * l;
            if (sl2 > 0 && slx * slx * sum_l2 > sum_lx * sum_lx * sl2) {
                L[i] = (int8_t)l;
                sum_lx = slx;
                sum_l2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return sum_lx / sum_l2;
}

// Q3_K: sub-blocks of 16 fitted by fit_scale_q3, scales quantized to 6 bits
// (signed, -32..31) against d = -(the scale of largest magnitude) / 32.
static void quantize_q3_k(void *out, const float *x, int n) {
    BlockQ3_K *y = out;
    for (int i = 0; i < n / QK_K; i++, x += QK_K) {
        int8_t L[QK_K];
        float scales[16], max_scale = 0.0f, amax = 0.0f;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_scale_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) { amax = fabsf(scales[j]); max_scale = scales[j]; }
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        y[i].d = f32_to_f16(0.0f);
        if (max_scale != 0) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = clamp_int((int8_t)nearest_int(iscale * scales[j]), -32, 31) + 32;
                y[i].scales[j % 8] |= (uint8_t)((l & 0xF) << (j < 8 ? 0 : 4));
                y[i].scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = f32_to_f16(1 / iscale);
        }
        for (int j = 0; j < 16; j++) {
            float d = f16_to_f32(y[i].d) * (q3_k_scale(y[i].scales, j) - 32);
            if (!d) continue; // keep the fit's L
            for (int k = 16 * j; k < 16 * j + 16; k++) L[k] = (int8_t)(clamp_int(nearest_int(x[k] / d), -4, 3) + 4);
        }
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t low[QK_K];
        for (int k = 0; k < QK_K; k++) {
            if (L[k] > 3) y[i].hmask[k % 32] |= (uint8_t)(1 << (k / 32));
            low[k] = (uint8_t)(L[k] & 3);
        }
        pack_2bit(y[i].qs, low);
    }
}

// Q4_1 and Q5_1 (levels 15 or 31): d = (max - min) / levels, m = min,
// q = (x - min) / d rounded half up; Q4_1 caps q at 15, Q5_1 keeps ggml's
// missing cap (a q of 32 loses its top bit). Q5_0: d = (value of largest
// magnitude) / -16, q = x / d + 16 rounded half up, capped at 31.
static float block_min(const float *x, float *max) {
    float min = INFINITY; // (ggml: FLT_MAX; the same for finite values)
    *max = -INFINITY;
    for (int k = 0; k < 32; k++) {
        if (x[k] < min) min = x[k];
        if (x[k] > *max) *max = x[k];
    }
    return min;
}

static void quantize_q4_1(void *out, const float *x, int n) {
    BlockQ4_1 *y = out;
    for (int i = 0; i < n / 32; i++, x += 32) {
        float max, min = block_min(x, &max), d = (max - min) / 15, id = d ? 1.0f / d : 0.0f;
        if (!isfinite(id)) id = 0.0f; // d so tiny that 1/d overflows (ggml: undefined)
        y[i].d = f32_to_f16(d);
        y[i].m = f32_to_f16(min);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)((x[j] - min) * id + 0.5f), q1 = (int)((x[j + 16] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
    }
}

static void quantize_q5_1(void *out, const float *x, int n) {
    BlockQ5_1 *y = out;
    for (int i = 0; i < n / 32; i++, x += 32) {
        float max, min = block_min(x, &max), d = (max - min) / 31, id = d ? 1.0f / d : 0.0f;
        if (!isfinite(id)) id = 0.0f; // d so tiny that 1/d overflows (ggml: undefined)
        y[i].d = f32_to_f16(d);
        y[i].m = f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (int)((x[j] - min) * id + 0.5f), q1 = (int)((x[j + 16] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
            qh |= (uint32_t)((q0 >> 4) & 1) << j | (uint32_t)((q1 >> 4) & 1) << (j + 16);
        }
        for (int b = 0; b < 4; b++) y[i].qh[b] = (uint8_t)(qh >> (8 * b));
    }
}

static void quantize_q5_0(void *out, const float *x, int n) {
    BlockQ5_0 *y = out;
    for (int i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f, max = 0.0f;
        for (int k = 0; k < 32; k++)
            if (fabsf(x[k]) > amax) { amax = fabsf(x[k]); max = x[k]; }
        float d = max / -16, id = d ? 1.0f / d : 0.0f;
        if (!isfinite(id)) id = 0.0f; // d so tiny that 1/d overflows (ggml: undefined)
        y[i].d = f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (int)(x[j] * id + 16.5f), q1 = (int)(x[j + 16] * id + 16.5f);
            q0 = q0 < 31 ? q0 : 31;
            q1 = q1 < 31 ? q1 : 31;
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int b = 0; b < 4; b++) y[i].qh[b] = (uint8_t)(qh >> (8 * b));
    }
}

// The index of the IQ4_NL level nearest x; a tie goes to the upper level (as ggml).
static int iq4_nearest(float x) {
    if (x <= iq4nl_values[0]) return 0;
    if (x >= iq4nl_values[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < iq4nl_values[mid]) hi = mid;
        else lo = mid;
    }
    return x - iq4nl_values[hi - 1] < iq4nl_values[hi] - x ? hi - 1 : hi;
}

// Fits one sub-block of 32 to d * iq4nl_values[L] (weights x^2): the scale
// that maps the largest magnitude to -127, then 15 trial scales around it,
// each refined by least squares. Returns d (0 for an all-zero sub-block).
// (ggml: quantize_row_iq4_nl_impl's per-block part, ntry 7, no imatrix.)
static float fit_scale_iq4(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
    if (amax < GROUP_MAX_EPS) return 0.0f;
    float d = -max / iq4nl_values[0], id = 1 / d, sum_qx = 0.0f, sum_q2 = 0.0f;
    for (int j = 0; j < 32; j++) {
        float q = iq4nl_values[iq4_nearest(id * x[j])], w = x[j] * x[j];
        sum_qx += w * q * x[j];
        sum_q2 += w * q * q;
    }
    d = sum_qx / sum_q2;
    float best = d * sum_qx;
    for (int step = -7; step <= 7; step++) {
        id = (step + iq4nl_values[0]) / max;
        sum_qx = sum_q2 = 0.0f;
        for (int j = 0; j < 32; j++) {
            float q = iq4nl_values[iq4_nearest(id * x[j])], w = x[j] * x[j];
            sum_qx += w * q * x[j];
            sum_q2 += w * q * q;
        }
        if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
            d = sum_qx / sum_q2;
            best = d * sum_qx;
        }
    }
    return d;
}

// 32 values against scale d into IQ4_NL's nibble layout.
static void pack_iq4(uint8_t *qs, const float *x, float d) {
    float id = d ? 1 / d : 0.0f;
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(iq4_nearest(id * x[j]) | iq4_nearest(id * x[j + 16]) << 4);
}

static void quantize_iq4_nl(void *out, const float *x, int n) {
    BlockIQ4_NL *y = out;
    for (int i = 0; i < n / 32; i++, x += 32) {
        float d = fit_scale_iq4(x);
        y[i].d = f32_to_f16(d);
        pack_iq4(y[i].qs, x, d); // with the unrounded d, as ggml
    }
}

// MXFP4 (ggml's quantize_row_mxfp4_ref): the scale puts the block's largest
// magnitude amax in 4..8 times 2^(e - 127), the top of E2M1's range (6),
// so e = floor(log2(amax)) - 2 + 127, through log2f as ggml; an all-zero
// block has e 0. Each value takes the nearest of the doubled levels times
// the halved scale, a tie going to the first in table order (the smaller
// magnitude; zero as +0). Blocks whose amax is below 2^-125 would need an
// e below 0 (ggml's cast is then undefined): they take e 0.
static void quantize_mxfp4(void *out, const float *x, int n) {
    BlockMXFP4 *y = out;
    for (int i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        float e = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0.0f;
        y[i].e = e > 0.0f ? (uint8_t)e : 0;
        float d = mxfp4_half_scale(y[i].e);
        for (int j = 0; j < 32; j++) {
            int best = 0;
            float best_err = fabsf(mxfp4_values[0] * d - x[j]);
            for (int k = 1; k < 16; k++) {
                float err = fabsf(mxfp4_values[k] * d - x[j]);
                if (err < best_err) { best = k; best_err = err; }
            }
            if (j < 16) y[i].qs[j] = (uint8_t)best;
            else y[i].qs[j - 16] |= (uint8_t)(best << 4);
        }
    }
}

// IQ4_XS: each sub-block's d quantized to 6 bits (signed) against the
// super-block's step -(the d of largest magnitude) / 32.
static void quantize_iq4_xs(void *out, const float *x, int n) {
    BlockIQ4_XS *y = out;
    for (int i = 0; i < n / QK_K; i++, x += QK_K) {
        float scales[8], max_scale = 0.0f, amax = 0.0f;
        for (int j = 0; j < 8; j++) {
            scales[j] = fit_scale_iq4(x + 32 * j);
            if (fabsf(scales[j]) > amax) { amax = fabsf(scales[j]); max_scale = scales[j]; }
        }
        float d = -max_scale / 32, id = d ? 1 / d : 0.0f;
        y[i].d = f32_to_f16(d);
        y[i].scales_h = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int j = 0; j < 8; j++) {
            int l = clamp_int(nearest_int(id * scales[j]), -32, 31);
            pack_iq4(y[i].qs + 16 * j, x + 32 * j, d * l); // with the unrounded d, as ggml
            y[i].scales_l[j / 2] |= (uint8_t)(((l + 32) & 0xF) << (4 * (j % 2)));
            y[i].scales_h |= (uint16_t)(((l + 32) >> 4) << (2 * j));
        }
    }
}

/* The fast K-quant dot products (Q4_K and Q6_K, the types of the files
   people use most): the same exact integer sums per sub-block as the plain
   twins, with SIMD; they differ from them only in the order of the float
   additions. NEON: dot_bytes (SDOT where the build has it). */

#if HAVE_NEON // helpers of the NEON dots below
// Q4_K/Q5_K's eight 6-bit scales and mins of a super-block, unpacked four
// at a time from the 12 bytes read as three little-endian words, each
// byte a lane (k4_scale_min takes one j at a time): bytes 0-3 and 4-7 hold
// scales and mins 0-3 in their low 6 bits and the top 2 bits of scales
// and mins 4-7 in their high 2; bytes 8-11 hold the low 4 bits of scales
// 4-7 (low nibble) and of mins 4-7 (high nibble).
static void k4_scales_mins(const uint8_t *scales, uint8_t sc[8], uint8_t m[8]) {
    uint32_t w[3], out[4];
    memcpy(w, scales, sizeof w);
    out[0] = w[0] & 0x3F3F3F3F;                                           // scales 0-3
    out[1] = (w[2] & 0x0F0F0F0F) | ((w[0] >> 6) & 0x03030303) << 4;        // scales 4-7
    out[2] = w[1] & 0x3F3F3F3F;                                           // mins 0-3
    out[3] = ((w[2] >> 4) & 0x0F0F0F0F) | ((w[1] >> 6) & 0x03030303) << 4; // mins 4-7
    memcpy(sc, out, 8);
    memcpy(m, out + 2, 8);
}

// sum over the 8 sub-blocks of m_j * (x's sum over them), from Q8_K's group sums.
static int k4_min_sum(const uint8_t m[8], const BlockQ8_K *a) {
    int summ = 0;
    for (int j = 0; j < 8; j++) summ += m[j] * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    return summ;
}
#endif

#if HAVE_NEON
// The 16 products of signed bytes w and x, summed.
static int32_t dot16(int8x16_t w, int8x16_t x) {
#if HAVE_DOTPROD
    return vaddvq_s32(vdotq_s32(vdupq_n_s32(0), w, x));
#else
    return vaddvq_s32(vpadalq_s16(vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(x))), vmull_high_s8(w, x)));
#endif
}

static float dot_q4_k(const void *row, const void *act, int n) {
    const BlockQ4_K *w = row;
    const BlockQ8_K *a = act;
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        k4_scales_mins(w[i].scales, sc, m);
        int32_t sumi = 0;
        for (int j = 0; j < 4; j++) { // 64 values: 32 bytes, low nibbles then high ones
            uint8x16_t q0 = vld1q_u8(w[i].qs + 32 * j), q1 = vld1q_u8(w[i].qs + 32 * j + 16);
            const int8_t *x = a[i].qs + 64 * j;
            int32x4_t lo = dot_bytes(vreinterpretq_s8_u8(vandq_u8(q0, low4)), vreinterpretq_s8_u8(vandq_u8(q1, low4)),
                                     vld1q_s8(x), vld1q_s8(x + 16));
            int32x4_t hi = dot_bytes(vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)),
                                     vld1q_s8(x + 32), vld1q_s8(x + 48));
            sumi += sc[2 * j] * vaddvq_s32(lo) + sc[2 * j + 1] * vaddvq_s32(hi);
        }
        sum += f16_to_f32(w[i].d) * a[i].d * sumi - f16_to_f32(w[i].dmin) * a[i].d * k4_min_sum(m, &a[i]);
    }
    return sum;
}

static float dot_q6_k(const void *row, const void *act, int n) {
    const BlockQ6_K *w = row;
    const BlockQ8_K *a = act;
    const uint8x16_t low4 = vdupq_n_u8(0x0F), low2 = vdupq_n_u8(0x03);
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int32_t sumi = 0;
        for (int h = 0; h < 2; h++)
            for (int v = 0; v < 2; v++) { // 16 bytes of each quarter of the half (q6_k_quant's layout)
                const uint8_t *ql = w[i].ql + 64 * h + 16 * v;
                uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 32), hb = vld1q_u8(w[i].qh + 32 * h + 16 * v);
                uint8x16_t q[4] = {
                    vorrq_u8(vandq_u8(l0, low4), vshlq_n_u8(vandq_u8(hb, low2), 4)),
                    vorrq_u8(vandq_u8(l1, low4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), low2), 4)),
                    vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), low2), 4)),
                    vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4)),
                };
                for (int k = 0; k < 4; k++) { // values 32k + 16v.. of the half: sub-block 8h + 2k + v
                    int8x16_t qs = vsubq_s8(vreinterpretq_s8_u8(q[k]), vdupq_n_s8(32));
                    sumi += w[i].scales[8 * h + 2 * k + v] * dot16(qs, vld1q_s8(a[i].qs + 128 * h + 32 * k + 16 * v));
                }
            }
        sum += f16_to_f32(w[i].d) * a[i].d * sumi;
    }
    return sum;
}

#else
static float dot_q4_k(const void *row, const void *act, int n) { return dot_q4_k_plain(row, act, n); }
static float dot_q6_k(const void *row, const void *act, int n) { return dot_q6_k_plain(row, act, n); }
#endif

/* Q2_K and Q3_K against Q8_K, as Q6_K above: each 32-byte run of qs holds
   four 32-value runs of 2-bit q (two sub-blocks each), taken out by shifting
   2 bits at a time. Q2_K's mins come from x's group sums, as in the plain
   twin. Q3_K's q - 4 is signed: NEON subtracts 4 first, SDOT being signed. */

#if HAVE_NEON // helpers of the NEON dots below
// sum over the 16 sub-blocks of Q2_K's m_j * (x's sum over them).
static int q2_k_min_sum(const BlockQ2_K *w, const BlockQ8_K *a) {
    int summ = 0;
    for (int j = 0; j < 16; j++) summ += (w->scales[j] >> 4) * a->bsums[j];
    return summ;
}

// Q3_K's 16 sub-block scales sc - 32 of a super-block, unpacked.
static void q3_k_scales(const uint8_t *scales, int16_t sc[16]) {
    for (int j = 0; j < 16; j++) sc[j] = (int16_t)(q3_k_scale(scales, j) - 32);
}
#endif

#if HAVE_NEON
static float dot_q2_k(const void *row, const void *act, int n) {
    const BlockQ2_K *w = row;
    const BlockQ8_K *a = act;
    const uint8x16_t low2 = vdupq_n_u8(0x03);
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        const uint8_t *sc = w[i].scales;
        int32_t sumi = 0;
        for (int h = 0; h < 2; h++)
            for (int v = 0; v < 2; v++) { // 16 bytes of each half's 32 (q2_k_quant's layout)
                uint8x16_t q = vld1q_u8(w[i].qs + 32 * h + 16 * v);
                for (int s = 0; s < 4; s++, q = vshrq_n_u8(q, 2)) { // values 128h + 32s + 16v..: sub-block 8h + 2s + v
                    int8x16_t qs = vreinterpretq_s8_u8(vandq_u8(q, low2));
                    sumi += (sc[8 * h + 2 * s + v] & 0xF) * dot16(qs, vld1q_s8(a[i].qs + 128 * h + 32 * s + 16 * v));
                }
            }
        sum += f16_to_f32(w[i].d) * a[i].d * sumi - f16_to_f32(w[i].dmin) * a[i].d * q2_k_min_sum(&w[i], &a[i]);
    }
    return sum;
}

static float dot_q3_k(const void *row, const void *act, int n) {
    const BlockQ3_K *w = row;
    const BlockQ8_K *a = act;
    const uint8x16_t low2 = vdupq_n_u8(0x03), one = vdupq_n_u8(0x01);
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int16_t sc[16];
        q3_k_scales(w[i].scales, sc);
        int32_t sumi = 0;
        for (int v = 0; v < 2; v++) { // 16 bytes of hmask's 32; run 4h + s has its bit at bit 4h + s
            uint8x16_t hm = vld1q_u8(w[i].hmask + 16 * v);
            for (int h = 0; h < 2; h++) {
                uint8x16_t q = vld1q_u8(w[i].qs + 32 * h + 16 * v);
                for (int s = 0; s < 4; s++, q = vshrq_n_u8(q, 2), hm = vshrq_n_u8(hm, 1)) {
                    uint8x16_t q3 = vorrq_u8(vandq_u8(q, low2), vshlq_n_u8(vandq_u8(hm, one), 2));
                    int8x16_t qs = vsubq_s8(vreinterpretq_s8_u8(q3), vdupq_n_s8(4));
                    sumi += sc[8 * h + 2 * s + v] * dot16(qs, vld1q_s8(a[i].qs + 128 * h + 32 * s + 16 * v));
                }
            }
        }
        sum += f16_to_f32(w[i].d) * a[i].d * sumi;
    }
    return sum;
}

#else
static float dot_q2_k(const void *row, const void *act, int n) { return dot_q2_k_plain(row, act, n); }
static float dot_q3_k(const void *row, const void *act, int n) { return dot_q3_k_plain(row, act, n); }
#endif

/* Q5_0, IQ4_NL and MXFP4 (blocks of 32 against Q8_0 x; the first two the
   fallbacks of Q4_K_M for rows that are not whole super-blocks, such as
   dim 288 or 576): each
   block's 32 values decoded to signed bytes, then dot_bytes, as dot_x32
   does for Q4_0. */

#if HAVE_NEON
// Q5_0's or Q5_1's 32 q (0..31) as bytes, values 0..15 in lo and 16..31 in
// hi: the nibbles, and bit j of qh as 16 in byte j (each byte picks its qh
// byte, then tests its own bit).
static void q5_bytes(uint8x16_t *lo, uint8x16_t *hi, const uint8_t *qs, const uint8_t *qh_bytes) {
    static const uint8_t qh_byte[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t qh = vreinterpretq_u8_u32(vdupq_n_u32(read_qh32(qh_bytes))), sixteen = vdupq_n_u8(16);
    uint8x16_t high_lo = vandq_u8(vtstq_u8(vqtbl1q_u8(qh, vld1q_u8(qh_byte)), vld1q_u8(bit)), sixteen);
    uint8x16_t high_hi = vandq_u8(vtstq_u8(vqtbl1q_u8(qh, vld1q_u8(qh_byte + 16)), vld1q_u8(bit)), sixteen);
    uint8x16_t packed = vld1q_u8(qs);
    *lo = vorrq_u8(vandq_u8(packed, vdupq_n_u8(0x0F)), high_lo);
    *hi = vorrq_u8(vshrq_n_u8(packed, 4), high_hi);
}

static float dot_q5_0(const void *row, const void *act, int n) {
    const BlockQ5_0 *w = row;
    const BlockQ8_0 *x = act;
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        uint8x16_t lo, hi;
        q5_bytes(&lo, &hi, w[i].qs, w[i].qh);
        int8x16_t wlo = vreinterpretq_s8_u8(vsubq_u8(lo, vdupq_n_u8(16))), whi = vreinterpretq_s8_u8(vsubq_u8(hi, vdupq_n_u8(16)));
        int32x4_t sums = dot_bytes(wlo, whi, vld1q_s8(x[i].qs), vld1q_s8(x[i].qs + 16));
        sum += f16_to_f32(w[i].d) * f16_to_f32(x[i].d) * vaddvq_s32(sums);
    }
    return sum;
}

static float dot_iq4_nl(const void *row, const void *act, int n) {
    const BlockIQ4_NL *w = row;
    const BlockQ8_0 *x = act;
    const int8x16_t levels = vld1q_s8(iq4nl_values);
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        uint8x16_t packed = vld1q_u8(w[i].qs);
        int8x16_t lo = vqtbl1q_s8(levels, vandq_u8(packed, vdupq_n_u8(0x0F))), hi = vqtbl1q_s8(levels, vshrq_n_u8(packed, 4));
        int32x4_t sums = dot_bytes(lo, hi, vld1q_s8(x[i].qs), vld1q_s8(x[i].qs + 16));
        sum += f16_to_f32(w[i].d) * f16_to_f32(x[i].d) * vaddvq_s32(sums);
    }
    return sum;
}

// As IQ4_NL, with the doubled E2M1 levels and the halved E8M0 scale.
static float dot_mxfp4(const void *row, const void *act, int n) {
    const BlockMXFP4 *w = row;
    const BlockQ8_0 *x = act;
    const int8x16_t levels = vld1q_s8(mxfp4_values);
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        uint8x16_t packed = vld1q_u8(w[i].qs);
        int8x16_t lo = vqtbl1q_s8(levels, vandq_u8(packed, vdupq_n_u8(0x0F))), hi = vqtbl1q_s8(levels, vshrq_n_u8(packed, 4));
        int32x4_t sums = dot_bytes(lo, hi, vld1q_s8(x[i].qs), vld1q_s8(x[i].qs + 16));
        sum += (f16_to_f32(x[i].d) * mxfp4_half_scale(w[i].e)) * vaddvq_s32(sums);
    }
    return sum;
}

#else
static float dot_q5_0(const void *row, const void *act, int n) { return dot_q5_0_plain(row, act, n); }
static float dot_iq4_nl(const void *row, const void *act, int n) { return dot_iq4_nl_plain(row, act, n); }
static float dot_mxfp4(const void *row, const void *act, int n) { return dot_mxfp4_plain(row, act, n); }
#endif

/* Q4_1, Q5_1 (blocks of 32 against Q8_1 x) and Q5_K, IQ4_XS (super-blocks
   of 256 against Q8_K x): the plain twins' exact integer sums per
   (sub-)block with SIMD, as for Q5_0/IQ4_NL and Q4_K above. The offsets of
   Q4_1 and Q5_1 come from Q8_1's s, the mins of Q5_K from Q8_K's group
   sums, as in the plain twins. Q4_1's and Q5_1's q are at most 31, so
   dot_bytes takes them as they are. IQ4_XS's levels are
   signed, so they go through dot_bytes, and each sub-block's sum is scaled
   by d * (ls - 32) in float, as in the plain twin. */

#if HAVE_NEON
static float dot_q4_1(const void *row, const void *act, int n) {
    const BlockQ4_1 *w = row;
    const BlockQ8_1 *x = act;
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        uint8x16_t packed = vld1q_u8(w[i].qs);
        int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(0x0F))), hi = vreinterpretq_s8_u8(vshrq_n_u8(packed, 4));
        int32x4_t sums = dot_bytes(lo, hi, vld1q_s8(x[i].qs), vld1q_s8(x[i].qs + 16));
        sum += f16_to_f32(w[i].d) * f16_to_f32(x[i].d) * vaddvq_s32(sums) + f16_to_f32(w[i].m) * f16_to_f32(x[i].s);
    }
    return sum;
}

static float dot_q5_1(const void *row, const void *act, int n) {
    const BlockQ5_1 *w = row;
    const BlockQ8_1 *x = act;
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        uint8x16_t lo, hi;
        q5_bytes(&lo, &hi, w[i].qs, w[i].qh);
        int32x4_t sums = dot_bytes(vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), vld1q_s8(x[i].qs), vld1q_s8(x[i].qs + 16));
        sum += f16_to_f32(w[i].d) * f16_to_f32(x[i].d) * vaddvq_s32(sums) + f16_to_f32(w[i].m) * f16_to_f32(x[i].s);
    }
    return sum;
}

static float dot_q5_k(const void *row, const void *act, int n) {
    const BlockQ5_K *w = row;
    const BlockQ8_K *a = act;
    const uint8x16_t low4 = vdupq_n_u8(0x0F), bit4 = vdupq_n_u8(0x10);
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        k4_scales_mins(w[i].scales, sc, m);
        uint8x16_t hb0 = vld1q_u8(w[i].qh), hb1 = vld1q_u8(w[i].qh + 16);
        int32_t sumi = 0;
        for (int j = 0; j < 4; j++) { // 64 values: low nibbles with qh's bit 2j, high ones with bit 2j + 1
            uint8x16_t q0 = vld1q_u8(w[i].qs + 32 * j), q1 = vld1q_u8(w[i].qs + 32 * j + 16);
            uint8x16_t lo0 = vorrq_u8(vandq_u8(q0, low4), vandq_u8(vshlq_n_u8(hb0, 4), bit4));
            uint8x16_t lo1 = vorrq_u8(vandq_u8(q1, low4), vandq_u8(vshlq_n_u8(hb1, 4), bit4));
            uint8x16_t hi0 = vorrq_u8(vshrq_n_u8(q0, 4), vandq_u8(vshlq_n_u8(hb0, 3), bit4));
            uint8x16_t hi1 = vorrq_u8(vshrq_n_u8(q1, 4), vandq_u8(vshlq_n_u8(hb1, 3), bit4));
            const int8_t *x = a[i].qs + 64 * j;
            int32x4_t lo = dot_bytes(vreinterpretq_s8_u8(lo0), vreinterpretq_s8_u8(lo1), vld1q_s8(x), vld1q_s8(x + 16));
            int32x4_t hi = dot_bytes(vreinterpretq_s8_u8(hi0), vreinterpretq_s8_u8(hi1), vld1q_s8(x + 32), vld1q_s8(x + 48));
            sumi += sc[2 * j] * vaddvq_s32(lo) + sc[2 * j + 1] * vaddvq_s32(hi);
            hb0 = vshrq_n_u8(hb0, 2); // the next two bits to bits 0 and 1
            hb1 = vshrq_n_u8(hb1, 2);
        }
        sum += f16_to_f32(w[i].d) * a[i].d * sumi - f16_to_f32(w[i].dmin) * a[i].d * k4_min_sum(m, &a[i]);
    }
    return sum;
}

static float dot_iq4_xs(const void *row, const void *act, int n) {
    const BlockIQ4_XS *w = row;
    const BlockQ8_K *a = act;
    const int8x16_t levels = vld1q_s8(iq4nl_values);
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        float d = f16_to_f32(w[i].d) * a[i].d;
        for (int j = 0; j < 8; j++) {
            uint8x16_t packed = vld1q_u8(w[i].qs + 16 * j);
            int8x16_t lo = vqtbl1q_s8(levels, vandq_u8(packed, vdupq_n_u8(0x0F))), hi = vqtbl1q_s8(levels, vshrq_n_u8(packed, 4));
            const int8_t *x = a[i].qs + 32 * j;
            int32x4_t sums = dot_bytes(lo, hi, vld1q_s8(x), vld1q_s8(x + 16));
            sum += (d * (iq4_xs_scale(&w[i], j) - 32)) * vaddvq_s32(sums);
        }
    }
    return sum;
}

#else
static float dot_q4_1(const void *row, const void *act, int n) { return dot_q4_1_plain(row, act, n); }
static float dot_q5_1(const void *row, const void *act, int n) { return dot_q5_1_plain(row, act, n); }
static float dot_q5_k(const void *row, const void *act, int n) { return dot_q5_k_plain(row, act, n); }
static float dot_iq4_xs(const void *row, const void *act, int n) { return dot_iq4_xs_plain(row, act, n); }
#endif

// The packed layouts (Packing section), by type.
static const PackedLayout packed_q8_0 = {.name = "q8_0x16", .quant_bytes = 16 * QK, .meta_bytes = 16 * 2, .offset = 128,
                                         .bits = 8};
static const PackedLayout packed_q4_0 = {.name = "q4_0x16", .quant_bytes = 16 * QK / 2, .meta_bytes = 16 * 2, .offset = 8,
                                         .bits = 4};
static const PackedLayout packed_q4_1 = {.name = "q4_1x16", .quant_bytes = 16 * QK / 2, .meta_bytes = 16 * (2 + 2), .mins = 1,
                                         .bits = 4};
static const PackedLayout packed_q5_0 = {.name = "q5_0x16", .quant_bytes = 16 * QK * 5 / 8, .meta_bytes = 16 * 2, .offset = 16,
                                         .bits = 5};
static const PackedLayout packed_q5_1 = {.name = "q5_1x16", .quant_bytes = 16 * QK * 5 / 8, .meta_bytes = 16 * (2 + 2), .mins = 1,
                                         .bits = 5};
static const PackedLayout packed_iq4_nl = {.name = "iq4_nlx16", .quant_bytes = 16 * QK / 2, .meta_bytes = 16 * 2, .offset = 128,
                                           .lookup = LOOKUP_IQ4NL, .bits = 4};
static const PackedLayout packed_mxfp4 = {.name = "mxfp4x16", .quant_bytes = 16 * QK / 2, .meta_bytes = 16, .offset = 12,
                                          .lookup = LOOKUP_MXFP4, .e8m0 = 1, .bits = 4};
static const PackedLayout packed_q2_k = {.name = "q2_kx16", .quant_bytes = 16 * QK_K * 2 / 8, .meta_bytes = 16 * (2 + 2 + 16 + 16),
                                         .mins = 1, .planes = 2, .n_subs = 16};
static const PackedLayout packed_q3_k = {.name = "q3_kx16", .quant_bytes = 16 * QK_K * 3 / 8, .meta_bytes = 16 * (2 + 16),
                                         .offset = 4, .planes = 2 | 1, .n_subs = 16, .three = 1};
static const PackedLayout packed_q4_k = {.name = "q4_kx16", .quant_bytes = 16 * QK_K * 4 / 8, .meta_bytes = 16 * (2 + 2 + 12),
                                         .mins = 1, .planes = 4, .n_subs = 8, .k4 = 1};
static const PackedLayout packed_q5_k = {.name = "q5_kx16", .quant_bytes = 16 * QK_K * 5 / 8, .meta_bytes = 16 * (2 + 2 + 12),
                                         .mins = 1, .planes = 4 | 1, .n_subs = 8, .k4 = 1};
static const PackedLayout packed_q6_k = {.name = "q6_kx16", .quant_bytes = 16 * QK_K * 6 / 8, .meta_bytes = 16 * (2 + 16),
                                         .offset = 32, .planes = 4 | 2, .n_subs = 16, .six = 1};
static const PackedLayout packed_iq4_xs = {.name = "iq4_xsx16", .quant_bytes = 16 * QK_K * 4 / 8, .meta_bytes = 16 * (2 + 8),
                                           .offset = 128, .lookup = LOOKUP_IQ4NL, .planes = 4, .n_subs = 8};

// The table. A type without a row here is refused by name when a file holds it.
static const TypeTraits type_traits[TYPE_COUNT] = {
    [TYPE_F32] = {.block_size = 1, .block_bytes = 4, .act_type = TYPE_F32, .dequantize = dequantize_f32,
                  .quantize = quantize_f32, .dot_plain = dot_f32_row_plain, .dot = dot_f32_row},
    [TYPE_F16] = {.block_size = 1, .block_bytes = 2, .act_type = TYPE_F32, .dequantize = dequantize_f16,
                  .quantize = quantize_f16, .dot_plain = dot_f16_row_plain, .dot = dot_f16_row},
    [TYPE_BF16] = {.block_size = 1, .block_bytes = 2, .act_type = TYPE_F32, .dequantize = dequantize_bf16,
                   .dot_plain = dot_bf16_row_plain, .dot = dot_bf16_row_plain},
    [TYPE_Q8_0] = {.block_size = QK, .block_bytes = sizeof(BlockQ8_0), .act_type = TYPE_Q8_0,
                   .dequantize = dequantize_q8_0, .quantize = quantize_q8_0, .dot_plain = dot_q8_0_plain,
                   .dot = dot_q8_0, .dot4 = dot4_q8_0, .packed = &packed_q8_0},
    [TYPE_Q4_0] = {.block_size = QK, .block_bytes = sizeof(BlockQ4_0), .act_type = TYPE_Q8_0,
                   .dequantize = dequantize_q4_0, .quantize = quantize_q4_0, .dot_plain = dot_q4_0_plain,
                   .dot = dot_q4_0, .dot4 = dot4_q4_0, .packed = &packed_q4_0},
    [TYPE_Q4_1] = {.block_size = 32, .block_bytes = sizeof(BlockQ4_1), .act_type = TYPE_Q8_1,
                   .dequantize = dequantize_q4_1, .quantize = quantize_q4_1, .dot_plain = dot_q4_1_plain,
                   .dot = dot_q4_1,
                   .packed = &packed_q4_1},
    [TYPE_Q5_0] = {.block_size = 32, .block_bytes = sizeof(BlockQ5_0), .act_type = TYPE_Q8_0,
                   .dequantize = dequantize_q5_0, .quantize = quantize_q5_0, .dot_plain = dot_q5_0_plain,
                   .dot = dot_q5_0,
                   .packed = &packed_q5_0},
    [TYPE_Q5_1] = {.block_size = 32, .block_bytes = sizeof(BlockQ5_1), .act_type = TYPE_Q8_1,
                   .dequantize = dequantize_q5_1, .quantize = quantize_q5_1, .dot_plain = dot_q5_1_plain,
                   .dot = dot_q5_1,
                   .packed = &packed_q5_1},
    [TYPE_Q2_K] = {.block_size = QK_K, .block_bytes = sizeof(BlockQ2_K), .act_type = TYPE_Q8_K,
                   .dequantize = dequantize_q2_k, .quantize = quantize_q2_k, .dot_plain = dot_q2_k_plain,
                   .dot = dot_q2_k,
                   .packed = &packed_q2_k},
    [TYPE_Q3_K] = {.block_size = QK_K, .block_bytes = sizeof(BlockQ3_K), .act_type = TYPE_Q8_K,
                   .dequantize = dequantize_q3_k, .quantize = quantize_q3_k, .dot_plain = dot_q3_k_plain,
                   .dot = dot_q3_k,
                   .packed = &packed_q3_k},
    [TYPE_Q4_K] = {.block_size = QK_K, .block_bytes = sizeof(BlockQ4_K), .act_type = TYPE_Q8_K,
                   .dequantize = dequantize_q4_k, .quantize = quantize_q4_k, .dot_plain = dot_q4_k_plain,
                   .dot = dot_q4_k,
                   .packed = &packed_q4_k},
    [TYPE_Q5_K] = {.block_size = QK_K, .block_bytes = sizeof(BlockQ5_K), .act_type = TYPE_Q8_K,
                   .dequantize = dequantize_q5_k, .quantize = quantize_q5_k, .dot_plain = dot_q5_k_plain,
                   .dot = dot_q5_k,
                   .packed = &packed_q5_k},
    [TYPE_Q6_K] = {.block_size = QK_K, .block_bytes = sizeof(BlockQ6_K), .act_type = TYPE_Q8_K,
                   .dequantize = dequantize_q6_k, .quantize = quantize_q6_k, .dot_plain = dot_q6_k_plain,
                   .dot = dot_q6_k,
                   .packed = &packed_q6_k},
    [TYPE_IQ4_NL] = {.block_size = 32, .block_bytes = sizeof(BlockIQ4_NL), .act_type = TYPE_Q8_0,
                     .dequantize = dequantize_iq4_nl, .quantize = quantize_iq4_nl, .dot_plain = dot_iq4_nl_plain,
                     .dot = dot_iq4_nl,
                   .packed = &packed_iq4_nl},
    [TYPE_IQ4_XS] = {.block_size = QK_K, .block_bytes = sizeof(BlockIQ4_XS), .act_type = TYPE_Q8_K,
                     .dequantize = dequantize_iq4_xs, .quantize = quantize_iq4_xs, .dot_plain = dot_iq4_xs_plain,
                     .dot = dot_iq4_xs,
                   .packed = &packed_iq4_xs},
    [TYPE_MXFP4] = {.block_size = 32, .block_bytes = sizeof(BlockMXFP4), .act_type = TYPE_Q8_0,
                    .dequantize = dequantize_mxfp4, .quantize = quantize_mxfp4, .dot_plain = dot_mxfp4_plain,
                    .dot = dot_mxfp4,
                   .packed = &packed_mxfp4},
    // activation formats only (no dot: never a weight)
    [TYPE_Q8_1] = {.block_size = 32, .block_bytes = sizeof(BlockQ8_1), .dequantize = dequantize_q8_1,
                   .quantize = quantize_q8_1},
    [TYPE_Q8_K] = {.block_size = QK_K, .block_bytes = sizeof(BlockQ8_K), .dequantize = dequantize_q8_k,
                   .quantize = quantize_q8_k},
};

// GGML's names, also for the types run.c does not read (messages).
static const char *type_name(uint32_t type) {
    static const char *names[] = {"F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0",
                                  "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS",
                                  "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8",
                                  "I16", "I32", "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8",
                                  "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown";
}

static int type_supported(int64_t type) { return type >= 0 && type < TYPE_COUNT && type_traits[type].dot; }

// The names of the supported types, for messages ("F32, F16, ...").
static const char *supported_type_names(void) {
    static char list[256];
    if (!list[0])
        for (int t = 0; t < TYPE_COUNT; t++)
            if (type_supported(t))
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", type_name((uint32_t)t));
    return list;
}

// cols rounded up to whole blocks of type (cols of a loaded matrix).
static int padded_cols(int type, int cols) {
    int bs = type_traits[type].block_size;
    return (cols + bs - 1) / bs * bs;
}

// Bytes one row of cols values takes; rows end in a whole block. In 64
// bits: the loaders ask this of any width a file claims, up to INT_MAX.
static size_t type_row_bytes(int type, int cols) {
    size_t bs = (size_t)type_traits[type].block_size;
    return ((size_t)cols + bs - 1) / bs * type_traits[type].block_bytes;
}

#define MAX_BLOCK 256 // the most values any type's block holds

// The first of n_blocks MXFP4 blocks at data whose scale byte is 255
// (E8M0's NaN: every value of the block NaN, and ggml reads it as 2^127),
// or -1. The loaders check every block: one byte in 17, on pages that
// packing reads at load anyway.
static int64_t mxfp4_nan_block(const void *data, uint64_t n_blocks) {
    const BlockMXFP4 *b = data;
    for (uint64_t i = 0; i < n_blocks; i++)
        if (b[i].e == 255) return (int64_t)i;
    return -1;
}

static void dequantize_packed_row(float *out, const Matrix *m, int i);

// Row i of a matrix as floats, for any weight type; a partial last block
// is decoded whole and cut. A packed matrix is read from its packed copy
// (the same values): reading the mapped original would bring back the
// pages packing gave back, for a tied embedding whole 2 MB pages a token.
static void dequantize_row(float *out, const Matrix *m, int i) {
    if (m->packed) {
        dequantize_packed_row(out, m, i);
        return;
    }
    const TypeTraits *tt = &type_traits[m->type];
    const unsigned char *row = (const unsigned char *)m->data + (size_t)i * type_row_bytes(m->type, m->cols);
    int whole = m->cols / tt->block_size * tt->block_size;
    tt->dequantize(out, row, whole);
    if (whole < m->cols) {
        float block[MAX_BLOCK];
        tt->dequantize(block, row + (size_t)(whole / tt->block_size) * tt->block_bytes, tt->block_size);
        memcpy(out + whole, block, (size_t)(m->cols - whole) * sizeof(float));
    }
}

// n floats to type (room for type_row_bytes(type, n)), a partial last block
// padded with zeros.
static void quantize_padded(void *out, const float *x, int n, int type) {
    const TypeTraits *tt = &type_traits[type];
    int whole = n / tt->block_size * tt->block_size;
    tt->quantize(out, x, whole);
    if (whole < n) {
        float block[MAX_BLOCK] = {0};
        memcpy(block, x + whole, (size_t)(n - whole) * sizeof(float));
        tt->quantize((unsigned char *)out + (size_t)(whole / tt->block_size) * tt->block_bytes, block, tt->block_size);
    }
}

// 1 if no value is NaN or infinite: their exponent bits are all ones. An OR
// over the whole array, which compilers vectorize (prefill checks 64 rows).
static int all_finite(const float *x, size_t n) {
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, x + i, sizeof bits);
        bad |= (bits & 0x7F800000u) == 0x7F800000u;
    }
    return !bad;
}

/* ----------------------------------------------------------------------------
   Float SIMD kernels, chosen at compile time: AVX-512, else AVX2, else NEON,
   else portable C. Each path of dot_f32 keeps four independent
   sums (so consecutive multiply-adds do not wait for each other) and handles
   the n % width tail itself; the result differs from the plain kernel only
   by the order of the additions. */

#if HAVE_AVX512

// The first n (< 16) lanes set.
static __mmask16 tail_mask(int n) { return (__mmask16)((1u << n) - 1); }

// The sum of the 16 lanes: the halves added (lane i + lane i + 8), then as
// sum_m256. Written out, so that sum_16_m512 can add the same pairs.
static float sum_m512(__m512 v) {
    return sum_m256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

// 16 floats of a row from element i on, widened if the row is fp16 (the
// fp16 KV cache); masked: the lanes of m, the others 0.
static inline __attribute__((always_inline)) __m512 load_16(const void *row, size_t i, int f16) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    return _mm512_loadu_ps((const float *)row + i);
}
static inline __attribute__((always_inline)) __m512 load_16_masked(const void *row, size_t i, __mmask16 m, int f16) {
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i));
    return _mm512_maskz_loadu_ps(m, (const float *)row + i);
}

// dot_f32's products summed into 16 lanes, before sum_m512 adds them; b
// fp32, or fp16 (f16, a constant once inlined) for the fp16 cache's keys.
static inline __attribute__((always_inline)) __m512 dot_lanes(const float *a, const void *b, int n, int f16) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    int j = 0;
    for (; j + 64 <= n; j += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + j), load_16(b, (size_t)j, f16), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + j + 16), load_16(b, (size_t)j + 16, f16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + j + 32), load_16(b, (size_t)j + 32, f16), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + j + 48), load_16(b, (size_t)j + 48, f16), s3);
    }
    for (; j + 16 <= n; j += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + j), load_16(b, (size_t)j, f16), s0);
    if (j < n) {
        __mmask16 m = tail_mask(n - j);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + j), load_16_masked(b, (size_t)j, m, f16), s1);
    }
    return _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
}

static float dot_f32(const float *a, const float *b, int n) {
    return sum_m512(dot_lanes(a, b, n, 0));
}

#elif HAVE_AVX2

static float dot_f32(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 32 <= n; j += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 8), _mm256_loadu_ps(b + j + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 16), _mm256_loadu_ps(b + j + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 24), _mm256_loadu_ps(b + j + 24), s3);
    }
    for (; j + 8 <= n; j += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), s0);
    float sum = sum_m256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; j < n; j++) sum += a[j] * b[j];
    return sum;
}

#elif HAVE_NEON

static float dot_f32(const float *a, const float *b, int n) {
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + j), vld1q_f32(b + j));
        s1 = vfmaq_f32(s1, vld1q_f32(a + j + 4), vld1q_f32(b + j + 4));
        s2 = vfmaq_f32(s2, vld1q_f32(a + j + 8), vld1q_f32(b + j + 8));
        s3 = vfmaq_f32(s3, vld1q_f32(a + j + 12), vld1q_f32(b + j + 12));
    }
    for (; j + 4 <= n; j += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + j), vld1q_f32(b + j));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; j < n; j++) sum += a[j] * b[j];
    return sum;
}

#else

// Four partial sums, which compilers can keep in vector registers (the
// portable build's fast kernel; dot_f32_plain sums in order).
static float dot_f32(const float *a, const float *b, int n) {
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        s0 += a[j] * b[j];
        s1 += a[j + 1] * b[j + 1];
        s2 += a[j + 2] * b[j + 2];
        s3 += a[j + 3] * b[j + 3];
    }
    for (; j < n; j++) s0 += a[j] * b[j];
    return (s0 + s1) + (s2 + s3);
}

#endif

/* Attention's two loops over a head's cached positions: the scores, one
   dot product per key, the same sums for one position as for a prefill
   block (so batched prefill equals token-by-token), and the weighted sum of
   the values. The SIMD weighted sums keep the output in registers across
   the positions, where the plain loop goes to memory for every position,
   and do its operations in its order (a multiply, then an add), so they
   equal it bit for bit. Each kernel reads either cache type (f16 a
   constant once inlined): the fp16 cache (--kv f16) holds keys and values
   rounded to half precision, widened as they are loaded, which halves the
   cache's memory and traffic (its gain at long context: BENCHMARKS.md). */

// out += a * v, an fp16 row
static void axpy_f16_plain(float *out, float a, const uint16_t *v, int n) {
    for (int j = 0; j < n; j++) out[j] += a * f16_to_f32_plain(v[j]);
}

// out (hs) += att[p] * v[p * stride ..] for p < n, added in order of p (so
// that a ring cache's two runs of positions sum as one run would).
// The SIMD builds call them for their tail columns, and the tests.
__attribute__((unused)) static void attention_values_plain(float *out, const float *att, const float *v, size_t stride, int n, int hs) {
    for (int p = 0; p < n; p++)
        for (int i = 0; i < hs; i++) out[i] += att[p] * v[(size_t)p * stride + i];
}
__attribute__((unused)) static void attention_values_f16_plain(float *out, const float *att, const uint16_t *v, size_t stride, int n, int hs) {
    for (int p = 0; p < n; p++) axpy_f16_plain(out, att[p], v + (size_t)p * stride, hs);
}

#if HAVE_AVX512

// l[p]'s lanes summed as sum_m512 sums them, for 16 vectors at once: key p's
// sum in lane p. Four steps of a transposition, each adding the pairs that
// sum_m512's step adds: lane i + i + 8, then i + i + 4, i + i + 2, i + i + 1.
// l is paired so that the sums come out in order. Per 16 keys: 30 shuffles
// and 15 adds, where sum_m512 takes 7 and 4 per key, in a serial chain.
static inline __attribute__((always_inline)) __m512 sum_16_m512(const __m512 l[16]) {
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; i++) { // a[i]: 8 sums of key p, then 8 of key p + 4: p = 0, 8, 1, 9, 2, 10, 3, 11
        int p = i / 2 + 8 * (i % 2);
        a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(l[p], l[p + 4], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(l[p], l[p + 4], _MM_SHUFFLE(3, 2, 3, 2)));
    }
    for (int m = 0; m < 4; m++) // b[m]: 4 sums each of keys m, m + 4, m + 8, m + 12
        b[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int m = 0; m < 2; m++) // c[m]: in 128-bit lane L, 2 sums each of keys 4L + 2m, 4L + 2m + 1
        c[m] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * m], b[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(b[2 * m], b[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// One fp16 key's score before the scale, the same bits as a block of 16
// gives it.
static float score_f16(const float *q, const uint16_t *k, int hs) {
    return sum_m512(dot_lanes(q, k, hs, 1));
}

#else

static float score_f16(const float *q, const uint16_t *k, int hs) {
    return dot_f32_f16(q, k, hs);
}

#endif

// att[p] = q . k[p * stride ..] * scale for p < n, one dot_f32 (fp16 cache:
// score_f16) per key; on AVX-512 16 keys at a time, each key's products as
// dot_lanes, their lanes summed together (sum_16_m512): every score is
// dot_f32's (score_f16's) bit for bit.
static inline __attribute__((always_inline)) void attention_scores_as(float *att, const float *q, const void *k, size_t stride, int n,
                                                                       int hs, float scale, int f16) {
    size_t row = f16 ? sizeof(uint16_t) : sizeof(float);
    int p = 0;
#if HAVE_AVX512
    for (; p + 16 <= n; p += 16) {
        __m512 l[16];
        for (int i = 0; i < 16; i++) l[i] = dot_lanes(q, (const char *)k + (size_t)(p + i) * stride * row, hs, f16);
        _mm512_storeu_ps(att + p, _mm512_mul_ps(sum_16_m512(l), _mm512_set1_ps(scale)));
    }
#endif
    for (; p < n; p++) {
        const void *key = (const char *)k + (size_t)p * stride * row;
        att[p] = (f16 ? score_f16(q, key, hs) : dot_f32(q, key, hs)) * scale;
    }
}

#if HAVE_AVX2 && !HAVE_AVX512

// 8 floats of a cache row from element i on, widened if the row is fp16.
static inline __attribute__((always_inline)) __m256 load_8(const void *row, size_t i, int f16) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
    return _mm256_loadu_ps((const float *)row + i);
}

// The scores of qn queries (q: hs apart) against kn keys (k: stride
// apart), qn * kn = 8, into att (rows att_stride apart), each dot_f32's
// (fp16: dot_f32_f16's) bits: its partial sums (lanes of 8 every 32
// values; fp16: every 16) taken one at a time for all eight pairs, then
// added as it adds them. Each key's 8 values loaded serve qn queries and
// each query's serve kn keys: 6 loads per 8 multiply-adds (one pair at a
// time: 16).
static inline __attribute__((always_inline)) void scores_tile(float *att, size_t att_stride, const float *q, const void *k, size_t stride,
                                                               int qn, int kn, int hs, float scale, int f16) {
    int chains = f16 ? 2 : 4;
    __m256 part[4][8];
    for (int c = 0; c < chains; c++) {
        __m256 acc[8];
        for (int t = 0; t < 8; t++) acc[t] = _mm256_setzero_ps();
        for (int j = 8 * c; j < hs; j += 8 * chains) {
            __m256 key[8];
            // (each empty asm keeps a loaded vector in a register: GCC would
            // otherwise fold the repeated loads into the multiply-adds)
            for (int b = 0; b < kn; b++) {
                key[b] = load_8(k, (size_t)b * stride + j, f16);
                __asm__("" : "+x"(key[b]));
            }
            for (int a = 0; a < qn; a++) {
                __m256 query = _mm256_loadu_ps(q + (size_t)a * hs + j);
                __asm__("" : "+x"(query));
                for (int b = 0; b < kn; b++) acc[a * kn + b] = _mm256_fmadd_ps(query, key[b], acc[a * kn + b]);
            }
        }
        for (int t = 0; t < 8; t++) part[c][t] = acc[t];
    }
    for (int a = 0; a < qn; a++)
        for (int b = 0; b < kn; b++) {
            int t = a * kn + b;
            __m256 sum = f16 ? _mm256_add_ps(part[0][t], part[1][t])
                             : _mm256_add_ps(_mm256_add_ps(part[0][t], part[1][t]), _mm256_add_ps(part[2][t], part[3][t]));
            // (dot_f32_f16 adds its empty tail's 0: a -0 sum becomes +0)
            att[(size_t)a * att_stride + b] = (f16 ? sum_m256(sum) + 0.0f : sum_m256(sum)) * scale;
        }
}

// qn queries' scores against n keys: tiles of 8 / qn keys, then the rest
// one key at a time.
static inline __attribute__((always_inline)) void scores_rows(float *att, size_t att_stride, const float *q, int qn, const void *k,
                                                               size_t stride, int n, int hs, float scale, int f16) {
    size_t row = f16 ? sizeof(uint16_t) : sizeof(float);
    int kn = 8 / qn, p = 0;
    for (; p + kn <= n; p += kn) scores_tile(att + p, att_stride, q, (const char *)k + (size_t)p * stride * row, stride, qn, kn, hs, scale, f16);
    for (int a = 0; a < qn; a++)
        attention_scores_as(att + (size_t)a * att_stride + p, q + (size_t)a * hs, (const char *)k + (size_t)p * stride * row, stride, n - p,
                            hs, scale, f16);
}

// n_q queries' scores, four, two or one at a time.
static inline __attribute__((always_inline)) void attention_scores_heads(float *att, size_t att_stride, const float *q, int n_q, const void *k,
                                                                          size_t stride, int n, int hs, float scale, int f16) {
    if (hs % (f16 ? 16 : 32) != 0) { // not whole chains: one query at a time, as dot_f32 takes them
        for (int h = 0; h < n_q; h++) attention_scores_as(att + (size_t)h * att_stride, q + (size_t)h * hs, k, stride, n, hs, scale, f16);
        return;
    }
    for (int h = 0; h < n_q;) {
        int qn = n_q - h >= 4 ? 4 : n_q - h >= 2 ? 2 : 1;
        float *a = att + (size_t)h * att_stride;
        const float *qh = q + (size_t)h * hs;
        if (qn == 4) scores_rows(a, att_stride, qh, 4, k, stride, n, hs, scale, f16);
        else if (qn == 2) scores_rows(a, att_stride, qh, 2, k, stride, n, hs, scale, f16);
        else scores_rows(a, att_stride, qh, 1, k, stride, n, hs, scale, f16);
        h += qn;
    }
}

#else

// n_q queries' scores, one query at a time.
static inline __attribute__((always_inline)) void attention_scores_heads(float *att, size_t att_stride, const float *q, int n_q, const void *k,
                                                                          size_t stride, int n, int hs, float scale, int f16) {
    for (int h = 0; h < n_q; h++) attention_scores_as(att + (size_t)h * att_stride, q + (size_t)h * hs, k, stride, n, hs, scale, f16);
}

#endif

// The scores of n_q query heads (q: hs apart) against n keys (k: stride
// apart), into rows of att att_stride apart. The common head sizes (64:
// gpt-oss; 128: Llama, Qwen; 256: Gemma 3) compiled as constants, so that
// each key's dot product unrolls to straight loads and multiply-adds.
static void attention_scores(float *att, size_t att_stride, const float *q, int n_q, const float *k, size_t stride, int n, int hs,
                             float scale) {
    if (hs == 64) attention_scores_heads(att, att_stride, q, n_q, k, stride, n, 64, scale, 0);
    else if (hs == 128) attention_scores_heads(att, att_stride, q, n_q, k, stride, n, 128, scale, 0);
    else if (hs == 256) attention_scores_heads(att, att_stride, q, n_q, k, stride, n, 256, scale, 0);
    else attention_scores_heads(att, att_stride, q, n_q, k, stride, n, hs, scale, 0);
}
static void attention_scores_f16(float *att, size_t att_stride, const float *q, int n_q, const uint16_t *k, size_t stride, int n,
                                 int hs, float scale) {
    if (hs == 64) attention_scores_heads(att, att_stride, q, n_q, k, stride, n, 64, scale, 1);
    else if (hs == 128) attention_scores_heads(att, att_stride, q, n_q, k, stride, n, 128, scale, 1);
    else if (hs == 256) attention_scores_heads(att, att_stride, q, n_q, k, stride, n, 256, scale, 1);
    else attention_scores_heads(att, att_stride, q, n_q, k, stride, n, hs, scale, 1);
}

#if HAVE_AVX512

static inline __attribute__((always_inline)) void attention_values_as(float *out, const float *att, const void *v, size_t stride, int n,
                                                                       int hs, int f16) {
    int i = 0;
    for (; i + 64 <= hs; i += 64) { // 64 outputs in four registers
        __m512 o0 = _mm512_loadu_ps(out + i), o1 = _mm512_loadu_ps(out + i + 16), o2 = _mm512_loadu_ps(out + i + 32),
               o3 = _mm512_loadu_ps(out + i + 48);
        for (int p = 0; p < n; p++) {
            size_t at = (size_t)p * stride + i;
            __m512 a = _mm512_set1_ps(att[p]);
            o0 = _mm512_add_ps(o0, _mm512_mul_ps(a, load_16(v, at, f16)));
            o1 = _mm512_add_ps(o1, _mm512_mul_ps(a, load_16(v, at + 16, f16)));
            o2 = _mm512_add_ps(o2, _mm512_mul_ps(a, load_16(v, at + 32, f16)));
            o3 = _mm512_add_ps(o3, _mm512_mul_ps(a, load_16(v, at + 48, f16)));
        }
        _mm512_storeu_ps(out + i, o0);
        _mm512_storeu_ps(out + i + 16, o1);
        _mm512_storeu_ps(out + i + 32, o2);
        _mm512_storeu_ps(out + i + 48, o3);
    }
    for (; i < hs; i += 16) { // then 16 at a time, the last masked
        __mmask16 m = hs - i >= 16 ? (__mmask16)0xFFFF : tail_mask(hs - i);
        __m512 o = _mm512_maskz_loadu_ps(m, out + i);
        for (int p = 0; p < n; p++) o = _mm512_add_ps(o, _mm512_mul_ps(_mm512_set1_ps(att[p]), load_16_masked(v, (size_t)p * stride + i, m, f16)));
        _mm512_mask_storeu_ps(out + i, m, o);
    }
}

#elif HAVE_AVX2

static inline __attribute__((always_inline)) void attention_values_as(float *out, const float *att, const void *v, size_t stride, int n,
                                                                       int hs, int f16) {
    int i = 0;
    for (; i + 64 <= hs; i += 64) { // 64 outputs in eight registers: eight adds in flight cover the add's latency
        __m256 o[8];
        for (int r = 0; r < 8; r++) o[r] = _mm256_loadu_ps(out + i + 8 * r);
        for (int p = 0; p < n; p++) {
            size_t at = (size_t)p * stride + i;
            __m256 a = _mm256_set1_ps(att[p]);
            for (int r = 0; r < 8; r++) o[r] = _mm256_add_ps(o[r], _mm256_mul_ps(a, load_8(v, at + 8 * r, f16)));
        }
        for (int r = 0; r < 8; r++) _mm256_storeu_ps(out + i + 8 * r, o[r]);
    }
    for (; i + 32 <= hs; i += 32) { // 32 outputs in four registers
        __m256 o0 = _mm256_loadu_ps(out + i), o1 = _mm256_loadu_ps(out + i + 8), o2 = _mm256_loadu_ps(out + i + 16),
               o3 = _mm256_loadu_ps(out + i + 24);
        for (int p = 0; p < n; p++) {
            size_t at = (size_t)p * stride + i;
            __m256 a = _mm256_set1_ps(att[p]);
            o0 = _mm256_add_ps(o0, _mm256_mul_ps(a, load_8(v, at, f16)));
            o1 = _mm256_add_ps(o1, _mm256_mul_ps(a, load_8(v, at + 8, f16)));
            o2 = _mm256_add_ps(o2, _mm256_mul_ps(a, load_8(v, at + 16, f16)));
            o3 = _mm256_add_ps(o3, _mm256_mul_ps(a, load_8(v, at + 24, f16)));
        }
        _mm256_storeu_ps(out + i, o0);
        _mm256_storeu_ps(out + i + 8, o1);
        _mm256_storeu_ps(out + i + 16, o2);
        _mm256_storeu_ps(out + i + 24, o3);
    }
    for (; i + 8 <= hs; i += 8) {
        __m256 o = _mm256_loadu_ps(out + i);
        for (int p = 0; p < n; p++) o = _mm256_add_ps(o, _mm256_mul_ps(_mm256_set1_ps(att[p]), load_8(v, (size_t)p * stride + i, f16)));
        _mm256_storeu_ps(out + i, o);
    }
    if (i < hs && f16) attention_values_f16_plain(out + i, att, (const uint16_t *)v + i, stride, n, hs - i);
    else if (i < hs) attention_values_plain(out + i, att, (const float *)v + i, stride, n, hs - i);
}

#endif

#if HAVE_AVX2 // (AVX-512 builds have AVX2)

static void attention_values(float *out, const float *att, const float *v, size_t stride, int n, int hs) {
    attention_values_as(out, att, v, stride, n, hs, 0);
}
static void attention_values_f16(float *out, const float *att, const uint16_t *v, size_t stride, int n, int hs) {
    attention_values_as(out, att, v, stride, n, hs, 1);
}

#elif HAVE_NEON

static void attention_values(float *out, const float *att, const float *v, size_t stride, int n, int hs) {
    int i = 0;
    for (; i + 16 <= hs; i += 16) { // 16 outputs in four registers
        float32x4_t o0 = vld1q_f32(out + i), o1 = vld1q_f32(out + i + 4), o2 = vld1q_f32(out + i + 8), o3 = vld1q_f32(out + i + 12);
        const float *vp = v + i;
        for (int p = 0; p < n; p++, vp += stride) {
            float32x4_t a = vdupq_n_f32(att[p]);
            o0 = vaddq_f32(o0, vmulq_f32(a, vld1q_f32(vp)));
            o1 = vaddq_f32(o1, vmulq_f32(a, vld1q_f32(vp + 4)));
            o2 = vaddq_f32(o2, vmulq_f32(a, vld1q_f32(vp + 8)));
            o3 = vaddq_f32(o3, vmulq_f32(a, vld1q_f32(vp + 12)));
        }
        vst1q_f32(out + i, o0);
        vst1q_f32(out + i + 4, o1);
        vst1q_f32(out + i + 8, o2);
        vst1q_f32(out + i + 12, o3);
    }
    for (; i + 4 <= hs; i += 4) {
        float32x4_t o = vld1q_f32(out + i);
        const float *vp = v + i;
        for (int p = 0; p < n; p++, vp += stride) o = vaddq_f32(o, vmulq_f32(vdupq_n_f32(att[p]), vld1q_f32(vp)));
        vst1q_f32(out + i, o);
    }
    if (i < hs) attention_values_plain(out + i, att, v + i, stride, n, hs - i);
}
static void attention_values_f16(float *out, const float *att, const uint16_t *v, size_t stride, int n, int hs) {
    attention_values_f16_plain(out, att, v, stride, n, hs);
}

#else

static void attention_values(float *out, const float *att, const float *v, size_t stride, int n, int hs) {
    attention_values_plain(out, att, v, stride, n, hs);
}
static void attention_values_f16(float *out, const float *att, const uint16_t *v, size_t stride, int n, int hs) {
    attention_values_f16_plain(out, att, v, stride, n, hs);
}

#endif

/* The fp16 cache's stores, and dot_f32_f16 (fp16 weight rows, and the
   fp16 cache's scores outside AVX-512). */

static void f32_to_f16_row_plain(uint16_t *out, const float *x, size_t n) {
    for (size_t j = 0; j < n; j++) out[j] = f32_to_f16(x[j]);
}

#if HAVE_AVX2
static float dot_f32_f16(const float *a, const uint16_t *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + j))), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 8), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + j + 8))), s1);
    }
    for (; j + 8 <= n; j += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + j))), s0);
    return sum_m256(_mm256_add_ps(s0, s1)) + dot_f32_f16_plain(a + j, b + j, n - j);
}

static void f32_to_f16_row(uint16_t *out, const float *x, size_t n) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm_storeu_si128((__m128i *)(out + j), _mm256_cvtps_ph(_mm256_loadu_ps(x + j), _MM_FROUND_TO_NEAREST_INT));
    f32_to_f16_row_plain(out + j, x + j, n - j);
}

#else
static float dot_f32_f16(const float *a, const uint16_t *b, int n) { return dot_f32_f16_plain(a, b, n); }
static void f32_to_f16_row(uint16_t *out, const float *x, size_t n) { f32_to_f16_row_plain(out, x, n); }
#endif

/* The exponential for softmax and SwiGLU: expf one value at a time is a
   serial cost of every layer (hidden_dim values per position, and every
   score). In vectors, e^x = 2^k e^r where k = round(x log2 e) and |r| <=
   ln2/2, e^r by Cephes' degree-7 polynomial for expf, and 2^k applied
   with one rounding: by scalef on AVX-512 (which also gives 0 and infinity
   past the float range); on AVX2 and NEON as two factors 2^(k/2), each a
   normal float built from its exponent bits (k is -150..128 after the
   clamp, beyond one float's exponent range), so that only the second
   multiply rounds, as scalef does: the same bits as exp_16. Within 2^-23
   relative (test_all checks). For the tails, expf. */

#if HAVE_AVX2 || HAVE_NEON // (AVX-512 builds have AVX2)
// Cephes' expf: the clamp, log2 e, ln 2 in two parts (so that r = x - k
// ln 2 is exact), and e^r's polynomial, highest degree first.
static const float exp_lowest = -104.0f, exp_highest = 89.0f, exp_log2e = 1.44269504088896341f;
static const float exp_ln2_high = 0.693359375f, exp_ln2_low = -2.12194440e-4f;
static const float exp_poly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
#endif

#if HAVE_AVX512
static __m512 exp_16(__m512 x) {
    // clamp to where e^x is 0 or infinite anyway; NaN stays NaN (second operand)
    x = _mm512_min_ps(_mm512_set1_ps(exp_highest), _mm512_max_ps(_mm512_set1_ps(exp_lowest), x));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(exp_log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(exp_ln2_high), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(exp_ln2_low), r);
    __m512 p = _mm512_set1_ps(exp_poly[0]);
    for (int i = 1; i < 6; i++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly[i]));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, k);
}
#endif

#if HAVE_AVX2
static __m256 exp_8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(exp_highest), _mm256_max_ps(_mm256_set1_ps(exp_lowest), x)); // NaN stays NaN (second operand)
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(exp_log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(exp_ln2_high), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(exp_ln2_low), r);
    __m256 p = _mm256_set1_ps(exp_poly[0]);
    for (int i = 1; i < 6; i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly[i]));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i k_int = _mm256_cvtps_epi32(k), half = _mm256_srai_epi32(k_int, 1), rest = _mm256_sub_epi32(k_int, half);
    __m256 two_half = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
    __m256 two_rest = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, two_half), two_rest);
}
#elif HAVE_NEON
static float32x4_t exp_4(float32x4_t x) {
    x = vminq_f32(vdupq_n_f32(exp_highest), vmaxq_f32(vdupq_n_f32(exp_lowest), x)); // NaN stays NaN
    float32x4_t k = vrndnq_f32(vmulq_n_f32(x, exp_log2e));
    float32x4_t r = vfmsq_f32(x, k, vdupq_n_f32(exp_ln2_high));
    r = vfmsq_f32(r, k, vdupq_n_f32(exp_ln2_low));
    float32x4_t p = vdupq_n_f32(exp_poly[0]);
    for (int i = 1; i < 6; i++) p = vfmaq_f32(vdupq_n_f32(exp_poly[i]), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    int32x4_t k_int = vcvtq_s32_f32(k), half = vshrq_n_s32(k_int, 1), rest = vsubq_s32(k_int, half);
    float32x4_t two_half = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(half, vdupq_n_s32(127)), 23));
    float32x4_t two_rest = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(rest, vdupq_n_s32(127)), 23));
    return vmulq_f32(vmulq_f32(p, two_half), two_rest);
}
#endif

// x[i] = e^(x[i] - shift) for n values; returns sum plus the new values,
// added in order (exp_row passes what its vectors summed).
static float exp_row_plain(float *x, int n, float shift, float sum) {
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - shift); sum += x[i]; }
    return sum;
}

// x[i] = e^(x[i] - shift) for n values; returns their sum.
static float exp_row(float *x, int n, float shift) {
    float sum = 0.0f;
    int i = 0;
#if HAVE_AVX512
    __m512 total = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp_16(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(shift)));
        _mm512_storeu_ps(x + i, e);
        total = _mm512_add_ps(total, e);
    }
    sum = _mm512_reduce_add_ps(total);
#endif
#if HAVE_AVX2
    __m256 total_8 = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(shift)));
        _mm256_storeu_ps(x + i, e);
        total_8 = _mm256_add_ps(total_8, e);
    }
    sum += sum_m256(total_8);
#elif HAVE_NEON
    float32x4_t total_4 = vdupq_n_f32(0.0f);
    for (; i + 4 <= n; i += 4) {
        float32x4_t e = exp_4(vsubq_f32(vld1q_f32(x + i), vdupq_n_f32(shift)));
        vst1q_f32(x + i, e);
        total_4 = vaddq_f32(total_4, e);
    }
    sum += vaddvq_f32(total_4);
#endif
    return exp_row_plain(x + i, n - i, shift, sum);
}

// The largest of max and x[0..n), compared in order (max_row passes what
// its vectors found; the plain twin is max_row_plain(x + 1, n - 1, x[0])).
static float max_row_plain(const float *x, int n, float max) {
    for (int i = 0; i < n; i++) if (x[i] > max) max = x[i];
    return max;
}

// The largest of x[0..n) (n >= 1), for softmax's shift. The compare in a
// loop is serial, and GCC does not vectorize it (the order of the compares
// decides which zero or NaN is kept): one compare per score, a seventh of
// attention's time. The
// vectors' max returns the same value, but for the sign of a zero maximum,
// which softmax subtracts to the same result. NaN: softmax's output is NaN
// either way.
static float max_row(const float *x, int n) {
    int i = 0;
    float max = x[0];
#if HAVE_AVX512
    if (n >= 16) {
        __m512 m = _mm512_loadu_ps(x);
        for (i = 16; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
        max = _mm512_reduce_max_ps(m);
    }
#elif HAVE_AVX2
    if (n >= 8) {
        __m256 m = _mm256_loadu_ps(x);
        for (i = 8; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        max = _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
    }
#elif HAVE_NEON
    if (n >= 4) {
        float32x4_t m = vld1q_f32(x);
        for (i = 4; i + 4 <= n; i += 4) m = vmaxq_f32(m, vld1q_f32(x + i));
        max = vmaxvq_f32(m);
    }
#endif
    return max_row_plain(x + i, n - i, max);
}

// swiglu_plain, in vectors where built.
static void swiglu(float *hb, const float *hb2, int n) {
    int i = 0;
#if HAVE_AVX512
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(hb + i);
        __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_storeu_ps(hb + i, _mm512_mul_ps(silu, _mm512_loadu_ps(hb2 + i)));
    }
#endif
#if HAVE_AVX2
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(hb + i);
        __m256 silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
        _mm256_storeu_ps(hb + i, _mm256_mul_ps(silu, _mm256_loadu_ps(hb2 + i)));
    }
#elif HAVE_NEON
    for (; i + 4 <= n; i += 4) {
        float32x4_t g = vld1q_f32(hb + i);
        float32x4_t silu = vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), exp_4(vnegq_f32(g))));
        vst1q_f32(hb + i, vmulq_f32(silu, vld1q_f32(hb2 + i)));
    }
#endif
    swiglu_plain(hb + i, hb2 + i, n - i);
}

// swiglu_clamped_plain, in vectors where built.
static void swiglu_clamped(float *hb, const float *hb2, int n) {
    int i = 0;
#if HAVE_AVX512
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_min_ps(_mm512_loadu_ps(hb + i), _mm512_set1_ps(7.0f));
        __m512 u = _mm512_min_ps(_mm512_max_ps(_mm512_loadu_ps(hb2 + i), _mm512_set1_ps(-7.0f)), _mm512_set1_ps(7.0f));
        __m512 act = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_16(_mm512_mul_ps(_mm512_set1_ps(-1.702f), g))));
        _mm512_storeu_ps(hb + i, _mm512_mul_ps(act, _mm512_add_ps(u, _mm512_set1_ps(1.0f))));
    }
#endif
#if HAVE_AVX2
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_min_ps(_mm256_loadu_ps(hb + i), _mm256_set1_ps(7.0f));
        __m256 u = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(hb2 + i), _mm256_set1_ps(-7.0f)), _mm256_set1_ps(7.0f));
        __m256 act = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_8(_mm256_mul_ps(_mm256_set1_ps(-1.702f), g))));
        _mm256_storeu_ps(hb + i, _mm256_mul_ps(act, _mm256_add_ps(u, _mm256_set1_ps(1.0f))));
    }
#elif HAVE_NEON
    for (; i + 4 <= n; i += 4) {
        float32x4_t g = vminq_f32(vld1q_f32(hb + i), vdupq_n_f32(7.0f));
        float32x4_t u = vminq_f32(vmaxq_f32(vld1q_f32(hb2 + i), vdupq_n_f32(-7.0f)), vdupq_n_f32(7.0f));
        float32x4_t act = vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), exp_4(vmulq_f32(vdupq_n_f32(-1.702f), g))));
        vst1q_f32(hb + i, vmulq_f32(act, vaddq_f32(u, vdupq_n_f32(1.0f))));
    }
#endif
    swiglu_clamped_plain(hb + i, hb2 + i, n - i);
}

// geglu_plain, in vectors where built: e^(-2u) with u = sqrt(2/pi) (g +
// 0.044715 g^3), as -2 sqrt(2/pi) g (1 + 0.044715 g^2).
static void geglu(float *hb, const float *hb2, int n) {
    int i = 0;
#if HAVE_AVX2 || HAVE_NEON // (AVX-512 builds have AVX2)
    const float a = -2.0f * 0.7978845608f, b = 0.044715f;
#endif
#if HAVE_AVX512
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(hb + i);
        __m512 arg = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(a), g),
                                   _mm512_fmadd_ps(_mm512_set1_ps(b), _mm512_mul_ps(g, g), _mm512_set1_ps(1.0f)));
        __m512 gelu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_16(arg)));
        _mm512_storeu_ps(hb + i, _mm512_mul_ps(gelu, _mm512_loadu_ps(hb2 + i)));
    }
#endif
#if HAVE_AVX2
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(hb + i);
        __m256 arg = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(a), g),
                                   _mm256_fmadd_ps(_mm256_set1_ps(b), _mm256_mul_ps(g, g), _mm256_set1_ps(1.0f)));
        __m256 gelu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_8(arg)));
        _mm256_storeu_ps(hb + i, _mm256_mul_ps(gelu, _mm256_loadu_ps(hb2 + i)));
    }
#elif HAVE_NEON
    for (; i + 4 <= n; i += 4) {
        float32x4_t g = vld1q_f32(hb + i);
        float32x4_t arg = vmulq_f32(vmulq_f32(vdupq_n_f32(a), g), vfmaq_f32(vdupq_n_f32(1.0f), vdupq_n_f32(b), vmulq_f32(g, g)));
        float32x4_t gelu = vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), exp_4(arg)));
        vst1q_f32(hb + i, vmulq_f32(gelu, vld1q_f32(hb2 + i)));
    }
#endif
    geglu_plain(hb + i, hb2 + i, n - i);
}

/* Matrix-matrix products for prefill: n positions through one matrix, so
   that each weight is read from memory once per block of positions instead
   of once per position. The block x (n, cols) is first packed transposed,
   TILE_TOKENS positions side by side for every column (zeros past n). A
   tile then computes TILE_ROWS rows of w for TILE_TOKENS positions: for
   each column it loads the positions' values as vectors, broadcasts each
   row's weight and multiply-adds into sums that stay in registers, with no
   horizontal additions at the end. */

#if HAVE_AVX512
#define TILE_ROWS 12 // 24 sums + 2 position vectors + 1 weight: 27 of 32 registers
#define TILE_TOKENS 32

// sums (TILE_ROWS, TILE_TOKENS) = w (TILE_ROWS rows, cols apart) @ xt (cols, TILE_TOKENS)
static void tile_f32(float *sums, const float *w, const float *xt, int cols) {
    __m512 acc[TILE_ROWS][2];
    for (int r = 0; r < TILE_ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int k = 0; k < cols; k++) {
        __m512 x0 = _mm512_loadu_ps(xt + (size_t)k * TILE_TOKENS);
        __m512 x1 = _mm512_loadu_ps(xt + (size_t)k * TILE_TOKENS + 16);
        for (int r = 0; r < TILE_ROWS; r++) {
            __m512 a = _mm512_set1_ps(w[(size_t)r * cols + k]);
            acc[r][0] = _mm512_fmadd_ps(a, x0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, x1, acc[r][1]);
        }
    }
    for (int r = 0; r < TILE_ROWS; r++) {
        _mm512_storeu_ps(sums + r * TILE_TOKENS, acc[r][0]);
        _mm512_storeu_ps(sums + r * TILE_TOKENS + 16, acc[r][1]);
    }
}

#elif HAVE_AVX2
#define TILE_ROWS 6 // 12 sums + 2 position vectors + 1 weight: 15 of 16 registers
#define TILE_TOKENS 16

static void tile_f32(float *sums, const float *w, const float *xt, int cols) {
    __m256 acc[TILE_ROWS][2];
    for (int r = 0; r < TILE_ROWS; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int k = 0; k < cols; k++) {
        __m256 x0 = _mm256_loadu_ps(xt + (size_t)k * TILE_TOKENS);
        __m256 x1 = _mm256_loadu_ps(xt + (size_t)k * TILE_TOKENS + 8);
        for (int r = 0; r < TILE_ROWS; r++) {
            __m256 a = _mm256_broadcast_ss(w + (size_t)r * cols + k);
            acc[r][0] = _mm256_fmadd_ps(a, x0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, x1, acc[r][1]);
        }
    }
    for (int r = 0; r < TILE_ROWS; r++) {
        _mm256_storeu_ps(sums + r * TILE_TOKENS, acc[r][0]);
        _mm256_storeu_ps(sums + r * TILE_TOKENS + 8, acc[r][1]);
    }
}

#elif HAVE_NEON
#define TILE_ROWS 6 // 24 sums + 4 position vectors + 1 weight: 29 of 32 registers
#define TILE_TOKENS 16

static void tile_f32(float *sums, const float *w, const float *xt, int cols) {
    float32x4_t acc[TILE_ROWS][4];
    for (int r = 0; r < TILE_ROWS; r++)
        for (int v = 0; v < 4; v++) acc[r][v] = vdupq_n_f32(0.0f);
    for (int k = 0; k < cols; k++) {
        float32x4_t xv[4];
        for (int v = 0; v < 4; v++) xv[v] = vld1q_f32(xt + (size_t)k * TILE_TOKENS + 4 * v);
        for (int r = 0; r < TILE_ROWS; r++) {
            float a = w[(size_t)r * cols + k];
            for (int v = 0; v < 4; v++) acc[r][v] = vfmaq_n_f32(acc[r][v], xv[v], a);
        }
    }
    for (int r = 0; r < TILE_ROWS; r++)
        for (int v = 0; v < 4; v++) vst1q_f32(sums + r * TILE_TOKENS + 4 * v, acc[r][v]);
}

#else
#define TILE_ROWS 4
#define TILE_TOKENS 8

static void tile_f32(float *sums, const float *w, const float *xt, int cols) {
    for (int i = 0; i < TILE_ROWS * TILE_TOKENS; i++) sums[i] = 0.0f;
    for (int k = 0; k < cols; k++)
        for (int r = 0; r < TILE_ROWS; r++)
            for (int t = 0; t < TILE_TOKENS; t++) sums[r * TILE_TOKENS + t] += w[(size_t)r * cols + k] * xt[(size_t)k * TILE_TOKENS + t];
}
#endif

// out (n, rows) = x (n, cols) @ w (rows, cols)^T, one position at a time
// with the plain kernel: the reference for matmat_f32.
static void matmat_f32_plain(float *out, const float *x, int n, const float *w, int rows, int cols) {
    for (int t = 0; t < n; t++) matmul_f32_plain(out + (size_t)t * rows, x + (size_t)t * cols, w, rows, cols);
}

// xt (tiles, cols, TILE_TOKENS) = columns k0..k1 of x (n, cols), transposed
// tile by tile, zeros past position n.
static void pack_columns(float *xt, const float *x, int n, int cols, int k0, int k1) {
    int n_tiles = (n + TILE_TOKENS - 1) / TILE_TOKENS;
    for (int tile = 0; tile < n_tiles; tile++) {
        float *dst = xt + (size_t)tile * cols * TILE_TOKENS;
        for (int k = k0; k < k1; k++)
            for (int t = 0; t < TILE_TOKENS; t++) {
                int token = tile * TILE_TOKENS + t;
                dst[(size_t)k * TILE_TOKENS + t] = token < n ? x[(size_t)token * cols + k] : 0.0f;
            }
    }
}

// Rows r0..r0+TILE_ROWS of w against every position; only rows from
// first_row on are stored (a last panel overlaps the one before it).
static void matmat_panel(float *out, const float *xt, int n, const float *w, int rows, int cols, int r0, int first_row) {
    float sums[TILE_ROWS * TILE_TOKENS];
    for (int t0 = 0; t0 < n; t0 += TILE_TOKENS) {
        tile_f32(sums, w + (size_t)r0 * cols, xt + (size_t)t0 * cols, cols);
        int nt = n - t0 < TILE_TOKENS ? n - t0 : TILE_TOKENS;
        for (int t = 0; t < nt; t++)
            for (int r = first_row - r0; r < TILE_ROWS; r++)
                out[(size_t)(t0 + t) * rows + r0 + r] = sums[r * TILE_TOKENS + t];
    }
}

// The same product with the tile kernel: one parallel region packs x into
// scratch (n rounded up to TILE_TOKENS, times cols floats) and then splits the row panels between
// the threads, so each weight is read once per call. Matrices of fewer than
// TILE_ROWS rows take the plain kernel.
static void matmat_f32(float *out, const float *x, int n, const float *w, int rows, int cols, float *scratch) {
    if (rows < TILE_ROWS) { matmat_f32_plain(out, x, n, w, rows, cols); return; }
    int n_panels = (rows + TILE_ROWS - 1) / TILE_ROWS, n_chunks = (cols + 63) / 64;
    #pragma omp parallel
    {
        int i;
        #pragma omp for schedule(static)
        for (i = 0; i < n_chunks; i++)
            pack_columns(scratch, x, n, cols, i * 64, (i + 1) * 64 < cols ? (i + 1) * 64 : cols);
        #pragma omp for schedule(static)
        for (i = 0; i < n_panels; i++) {
            int r0 = i * TILE_ROWS;
            matmat_panel(out, scratch, n, w, rows, cols, r0 + TILE_ROWS <= rows ? r0 : rows - TILE_ROWS, r0);
        }
    }
}

/* ----------------------------------------------------------------------------
   Packed integer kernels (AVX-512 VNNI). The layout they read fastest:
   In row-major blocks each block is one row's values, so a SIMD kernel
   must widen one row's scale per block and add its lanes up per row. Like
   llama.cpp's CPU repacking, we copy each quantized matrix once at load time
   so that 16 rows travel together. First the types of 32-value blocks
   (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4); the K-quants follow. For each
   group of 16 rows and each block of 32 columns (g, b), in this order,
     quants (Q8_0: 512 bytes) 8 chunks of 64 bytes; in chunk j, row r's four
            values 4j..4j+3 sit at bytes 4r..4r+3, stored plus 128 (0..255);
            (the others: 256 bytes) 4 chunks; in chunk j, row r's block bytes
            4j..4j+3 at bytes 4r..4r+3: low nibbles are its values 4j..4j+3,
            high nibbles 16+4j..16+4j+3 (GGUF's own order);
            (Q5_0, Q5_1: 64 bytes more) bit 4 of q: bit j of byte 4r + i
            is value 4j + i's;
   and after all quants, the scales: 16 fp16 values per (g, b), one per
   row, then (Q4_1, Q5_1) 16 fp16 mins; MXFP4's 16 E8M0 bytes instead, as
   stored (its scales 2^-128..2^126 are out of fp16's range). Stored values
   are unsigned: Q8_0 plus 128, Q4_0 plus 8, Q5_0 plus 16, IQ4_NL's and
   MXFP4's index, turned by the kernel into iq4nl_values[index] + 128 or
   mxfp4_values[index] + 12 (the layout's offset: 0..24, small enough for
   AVX2's int16 runs).
   One VNNI instruction multiplies chunk j by x's values 4j..4j+3 (the same
   four bytes in every lane) and adds into 16 int32 lanes, one per row; a
   block's sums then take one conversion and one multiply-add for all 16
   rows (and one more for the mins). Rows past the matrix are zeros. The
   size is about the original's (plus those padding rows); choose_kernels
   drops the original pages from memory after the copy (they come back
   from the file if needed). Each type's layout is a named PackedLayout in
   its row of the weight types' table (type_traits' packed). */
// One block of 32 activations quantized for the packed kernels. The packed
// weights are stored unsigned, so every integer block sum carries
// offset * sum(q) too.
struct ActBlock {
    float scale;  // x ~ scale * q
    int32_t bias; // offset * sum(q), subtracted from each integer block sum
    int8_t q[QK];
    float sum;    // Q4_1, Q5_1: fp16 of d * sum(q) as Q8_1 keeps it, for the mins
};

#define GROUP_ROWS 16

static int row_groups(const Matrix *m) { return (m->rows + GROUP_ROWS - 1) / GROUP_ROWS; }

// Blocks of the type's block_size (32 or 256) per row, the last one padded.
static int col_blocks(const Matrix *m) {
    int block = type_traits[m->type].block_size;
    return (m->cols + block - 1) / block;
}

// The packed layout of a type that has one (type_traits' packed).
static const PackedLayout *packed_layout(int type) { return type_traits[type].packed; }

static size_t packed_size(const Matrix *m) {
    const TypeTraits *tt = &type_traits[m->type];
    return (size_t)row_groups(m) * col_blocks(m) * (tt->packed->quant_bytes + tt->packed->meta_bytes);
}

// Block gb = g * col_blocks + b: its quants, and its 16 rows' scales (all
// quants come first, then all scales, so a thread reads two streams: one
// stream of both was slower on AMD; BENCHMARKS.md).
static const unsigned char *packed_quants(const Matrix *m, size_t gb) {
    return m->packed + gb * packed_layout(m->type)->quant_bytes;
}
static const unsigned char *packed_meta(const Matrix *m, size_t gb) {
    const TypeTraits *tt = &type_traits[m->type];
    return m->packed + (size_t)row_groups(m) * col_blocks(m) * tt->packed->quant_bytes + gb * tt->packed->meta_bytes;
}

// The stop for a type a switch over the packed types does not know: a new
// type in the table without its packed code (a bug of run.c's, not of the
// input), said before anything is computed with it.
static _Noreturn void no_packed_layout(int type) {
    fprintf(stderr, "run: internal error: no packed layout for weight type %s (%d)\n", type_name((uint32_t)type), type);
    abort();
}

// Block b of a row of a 32-value type: q as stored (see the layout's offset;
// IQ4_NL, MXFP4: the index), d and m (fp16 bits, m 0 without a min;
// MXFP4: d is its E8M0 byte).
static inline __attribute__((always_inline)) void unpack_block32(uint8_t q[QK], uint16_t *d, uint16_t *m, const void *block, int type) {
    const uint8_t *qs = NULL, *qh = NULL;
    *m = 0;
    switch (type) {
    case TYPE_Q8_0: {
        const BlockQ8_0 *b = block;
        *d = b->d;
        for (int k = 0; k < QK; k++) q[k] = (uint8_t)(b->qs[k] + 128);
        return;
    }
    case TYPE_Q4_0: *d = ((const BlockQ4_0 *)block)->d; qs = ((const BlockQ4_0 *)block)->qs; break;
    case TYPE_Q4_1: *d = ((const BlockQ4_1 *)block)->d; *m = ((const BlockQ4_1 *)block)->m; qs = ((const BlockQ4_1 *)block)->qs; break;
    case TYPE_Q5_0: *d = ((const BlockQ5_0 *)block)->d; qs = ((const BlockQ5_0 *)block)->qs; qh = ((const BlockQ5_0 *)block)->qh; break;
    case TYPE_Q5_1: *d = ((const BlockQ5_1 *)block)->d; *m = ((const BlockQ5_1 *)block)->m; qs = ((const BlockQ5_1 *)block)->qs; qh = ((const BlockQ5_1 *)block)->qh; break;
    case TYPE_IQ4_NL: *d = ((const BlockIQ4_NL *)block)->d; qs = ((const BlockIQ4_NL *)block)->qs; break;
    case TYPE_MXFP4: *d = ((const BlockMXFP4 *)block)->e; qs = ((const BlockMXFP4 *)block)->qs; break;
    default: no_packed_layout(type);
    }
    uint32_t high = qh ? read_qh32(qh) : 0;
    for (int k = 0; k < QK; k++) q[k] = (uint8_t)((k < 16 ? qs[k] & 0xF : qs[k - 16] >> 4) | ((high >> k) & 1) << 4);
}

// Row r of block (g, b) of a 32-value type into the packed layout; block
// NULL: a padding row (d = 0 makes it zeros).
static inline __attribute__((always_inline)) void pack_row32_as(unsigned char *quants, unsigned char *meta, int r, const void *block,
                                                                int type) {
    uint8_t q[QK] = {0};
    uint16_t d = 0, min = 0, *scales = (uint16_t *)meta;
    if (block) unpack_block32(q, &d, &min, block, type);
    if (packed_layout(type)->e8m0) meta[r] = (unsigned char)d; // E8M0 as stored: packed, the file's size
    else scales[r] = d;
    if (packed_layout(type)->mins) scales[GROUP_ROWS + r] = min;
    for (int i = 0; i < 4; i++) {
        if (packed_layout(type)->bits == 8) {
            for (int j = 0; j < 8; j++) quants[64 * j + 4 * r + i] = q[4 * j + i];
            continue;
        }
        uint8_t high = 0;
        for (int j = 0; j < 8; j++) high |= (uint8_t)(((q[4 * j + i] >> 4) & 1) << j);
        for (int j = 0; j < 4; j++) quants[64 * j + 4 * r + i] = (uint8_t)((q[4 * j + i] & 0xF) | (q[16 + 4 * j + i] & 0xF) << 4);
        if (packed_layout(type)->bits == 5) quants[256 + 4 * r + i] = high;
    }
}

// pack_row32_as compiled for each type (a constant once inlined, so the
// unpacking's type switch and the fifth bit's branches fold away; see
// pack_k_row).
static void pack_row32(unsigned char *quants, unsigned char *meta, int r, const void *block, int type) {
    switch (type) {
    case TYPE_Q8_0: pack_row32_as(quants, meta, r, block, TYPE_Q8_0); break;
    case TYPE_Q4_0: pack_row32_as(quants, meta, r, block, TYPE_Q4_0); break;
    case TYPE_Q4_1: pack_row32_as(quants, meta, r, block, TYPE_Q4_1); break;
    case TYPE_Q5_0: pack_row32_as(quants, meta, r, block, TYPE_Q5_0); break;
    case TYPE_Q5_1: pack_row32_as(quants, meta, r, block, TYPE_Q5_1); break;
    case TYPE_IQ4_NL: pack_row32_as(quants, meta, r, block, TYPE_IQ4_NL); break;
    case TYPE_MXFP4: pack_row32_as(quants, meta, r, block, TYPE_MXFP4); break;
    default: no_packed_layout(type);
    }
}

static void pack_k_row(unsigned char *quants, unsigned char *meta, int r, const void *block, int type);

// dst (packed_size bytes, 64-byte aligned) = m's weights in the packed
// layout, groups of rows g0..g1-1 (all: 0..row_groups), row by row of each
// (g, b): pack_row32, or the K-quants' pack_k_row.
static void pack_groups(unsigned char *dst, const Matrix *m, int g0, int g1) {
    const TypeTraits *tt = &type_traits[m->type];
    int n_groups = row_groups(m), n_blocks = col_blocks(m), k_quant = tt->act_type == TYPE_Q8_K;
    size_t row_bytes = type_row_bytes(m->type, m->cols);
    unsigned char *meta = dst + (size_t)n_groups * n_blocks * tt->packed->quant_bytes;
    int g;
    #pragma omp parallel for private(g) schedule(static)
    for (g = g0; g < g1; g++)
        for (int b = 0; b < n_blocks; b++) {
            size_t gb = (size_t)g * n_blocks + b;
            for (int r = 0; r < GROUP_ROWS; r++) {
                int row = g * GROUP_ROWS + r;
                const unsigned char *block = row < m->rows ? (const unsigned char *)m->data + (size_t)row * row_bytes + (size_t)b * tt->block_bytes : NULL;
                if (k_quant) pack_k_row(dst + gb * tt->packed->quant_bytes, meta + gb * tt->packed->meta_bytes, r, block, m->type);
                else pack_row32(dst + gb * tt->packed->quant_bytes, meta + gb * tt->packed->meta_bytes, r, block, m->type);
            }
        }
}

// Row r's value k (0..31) of block (g, b) as the kernels multiply it:
// q plus the layout's offset (IQ4_NL, MXFP4: iq4nl_values or mxfp4_values[index] plus it).
static int packed_value(const unsigned char *quants, int r, int k, int type) {
    if (packed_layout(type)->bits == 8) return quants[(k / 4) * 64 + r * 4 + k % 4];
    unsigned char byte = quants[((k % 16) / 4) * 64 + r * 4 + k % 4];
    int q = k < 16 ? byte & 0xF : byte >> 4;
    if (packed_layout(type)->bits == 5) q |= ((quants[256 + r * 4 + k % 4] >> (k / 4)) & 1) << 4;
    if (packed_layout(type)->lookup == LOOKUP_IQ4NL) return iq4nl_values[q] + packed_layout(type)->offset;
    return packed_layout(type)->lookup == LOOKUP_MXFP4 ? mxfp4_values[q] + packed_layout(type)->offset : q;
}

// Row r's scale of a 32-value type's block, from its (g, b)'s meta: fp16,
// MXFP4's E8M0 byte (halved, as its values are doubled).
static float packed_row_scale(const unsigned char *meta, int r, int type) {
    if (packed_layout(type)->e8m0) return mxfp4_half_scale(meta[r]);
    return f16_to_f32(((const uint16_t *)meta)[r]);
}

// x (cols) as ActBlocks against a matrix of type (the offset of its stored
// values), as llama.cpp quantizes activations on x86: d = amax / 127, q =
// x / d (Q8_1 for the types with mins: x * (127 / amax)) rounded to nearest
// even, the scale kept in fp16 precision and (with mins) sum = fp16 of
// d * sum(q). x is finite (the dispatch checks).
static void quantize_act_plain(ActBlock *out, const float *x, int cols, int type) {
    int offset = packed_layout(type)->offset, mins = packed_layout(type)->mins;
    for (int b = 0; b * QK < cols; b++) {
        int len = cols - b * QK < QK ? cols - b * QK : QK;
        const float *xb = x + (size_t)b * QK;
        float amax = 0.0f;
        for (int k = 0; k < len; k++) amax = fmaxf(amax, fabsf(xb[k]));
        float d = amax / 127.0f, id = mins ? (amax != 0.0f ? 127.0f / amax : 0.0f) : d > 0.0f ? 1.0f / d : 0.0f;
        if (!isfinite(id)) id = 0.0f; // so tiny that the inverse overflows: zeros
        int sum = 0;
        for (int k = 0; k < QK; k++) {
            int q = k < len ? (int)nearbyintf(xb[k] * id) : 0;
            out[b].q[k] = (int8_t)q;
            sum += q;
        }
        out[b].scale = f16_to_f32(f32_to_f16(d));
        out[b].bias = offset * sum;
        out[b].sum = mins ? f16_to_f32(f32_to_f16(sum * d)) : 0.0f;
    }
}

// 16 rows of the packed matrix (group g) against one position x: out[r]
// for r < 16. Per block: the exact integer sum, less x's bias, times
// (row scale * x scale), added with one rounding (fmaf) in block order,
// then (with mins) row min * x's sum, likewise: the SIMD kernels do the
// same operations per lane, so they agree bit for bit.
static void packed_position_plain(float *out, const Matrix *m, int g, const ActBlock *x) {
    int n_blocks = col_blocks(m), mins = packed_layout(m->type)->mins;
    float acc[GROUP_ROWS] = {0};
    for (int b = 0; b < n_blocks; b++) {
        size_t gb = (size_t)g * n_blocks + b;
        const unsigned char *quants = packed_quants(m, gb), *meta = packed_meta(m, gb);
        const uint16_t *scales = (const uint16_t *)meta;
        for (int r = 0; r < GROUP_ROWS; r++) {
            int32_t sum = 0;
            for (int k = 0; k < QK; k++) sum += packed_value(quants, r, k, m->type) * x[b].q[k];
            sum -= x[b].bias;
            acc[r] = fmaf((float)sum, packed_row_scale(meta, r, m->type) * x[b].scale, acc[r]);
            if (mins) acc[r] = fmaf(f16_to_f32(scales[GROUP_ROWS + r]), x[b].sum, acc[r]);
        }
    }
    memcpy(out, acc, sizeof acc);
}

#if HAVE_AVX2

// Generation reads each weight once, in order, and while a core computes
// the hardware prefetchers can fall behind: the kernels ask for each line
// of quants ahead of the block they compute, a block's worth of lines per
// block, twice: prefetch_far_bytes ahead (from memory) and
// PREFETCH_L1_BYTES ahead into L1 (from wherever the first request put
// it), so the loads themselves do not wait.
#define PREFETCH_L1_BYTES 2048

// The far request's kind and distance depend on the machine, and some
// types' kernels do best asking for nothing; each choice below is the best
// measured on its machine ("Prefetch distances and kernel choices" in BENCHMARKS.md):
// - Intel: PREFETCHT1 (into L2) 4 KB ahead; Q6_K's 512-bit kernel only the
//   near request (prefetch_near).
// - AMD Zen 5: PREFETCHNTA (a fill of L1 not kept in L2; AMD drops T1 at
//   times) 6 KB ahead, a K-quant block's lines in one burst.
// - AMD Zen 3 and 4: PREFETCHNTA 2 KB ahead (both requests the same line);
//   Q4_K, and Q8_0's AVX-512 kernel, ask for nothing (prefetch_skip): the
//   hardware prefetchers keep up with them and the requests only cost.
// choose_prefetch sets these once, at load.
static size_t prefetch_far_bytes = 4096;
static int prefetch_far_nta = 0;   // 1: PREFETCHNTA, 0: PREFETCHT1
static int prefetch_burst = 0;     // 1: a K-quant block's lines all at its first sub-block
static unsigned char prefetch_skip[TYPE_COUNT]; // 1: the type's kernels leave it to the hardware prefetchers
static unsigned char prefetch_near[TYPE_COUNT]; // 1: the type's kernels ask only for the line PREFETCH_L1_BYTES ahead

static void choose_prefetch(void) {
    unsigned max_leaf, vendor[3], eax, ebx, ecx, edx;
    // the vendor string, 12 bytes in ebx, edx, ecx
    if (__get_cpuid(0, &max_leaf, &vendor[0], &vendor[2], &vendor[1]) && memcmp(vendor, "AuthenticAMD", 12) == 0) {
        prefetch_far_nta = 1;
        // the family: 0x19 Zen 3 and 4, 0x1A Zen 5 (base 0xF plus the extended family)
        if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((eax >> 8) & 0xF) + ((eax >> 20) & 0xFF) >= 0x1A) {
            prefetch_far_bytes = 6144;
            prefetch_burst = 1;
        } else {
            prefetch_far_bytes = PREFETCH_L1_BYTES;
            prefetch_skip[TYPE_Q4_K] = 1; // see the packed K-quants' requests ahead
#if HAVE_AVX512_VNNI
            prefetch_skip[TYPE_Q8_0] = 1; // see above: its 512-bit kernel only
#endif
        }
        return;
    }
#if HAVE_AVX512_VNNI
    prefetch_near[TYPE_Q6_K] = 1; // Intel, see above: its 512-bit kernel only
#endif
}

// How far ahead a type's generation kernels ask for lines; 0: not at all.
static size_t prefetch_distance(int type) {
    if (prefetch_skip[type]) return 0;
    return prefetch_near[type] ? PREFETCH_L1_BYTES : prefetch_far_bytes;
}

// The line far bytes past p, and the one PREFETCH_L1_BYTES past it into L1
// (a prefetch never faults; the callers stop at about the matrix's end).
// Where far is PREFETCH_L1_BYTES both name the same line: on AMD (NTA)
// both requests are needed, on Intel (T1) T0 goes alone. Always inlined, like
// prefetch_ahead: a call that only prefetches has no effect GCC must keep.
// The hint is an immediate, hence the branch (the same way every time:
// free).
static inline __attribute__((always_inline)) void prefetch_line(const unsigned char *p, size_t far) {
    if (prefetch_far_nta) _mm_prefetch((const char *)p + far, _MM_HINT_NTA);
    else if (far != PREFETCH_L1_BYTES) _mm_prefetch((const char *)p + far, _MM_HINT_T1); // else T0 names the line: it alone
    _mm_prefetch((const char *)p + PREFETCH_L1_BYTES, _MM_HINT_T0);
}

// The lines far bytes ahead of the block_bytes at quants (the block being
// computed; far 0: none); end: the end of the matrix's quants. Both are
// computed once per call: this runs per block.
static inline __attribute__((always_inline)) void prefetch_ahead(const unsigned char *quants, const unsigned char *end, size_t block_bytes,
                                                                  size_t far) {
    if (far == 0) return;
    for (const unsigned char *p = quants; p < quants + block_bytes && p + far < end; p += 64) prefetch_line(p, far);
}

// The K-quants' requests far ahead at sub-block j of n_subs, for the lines
// of a block's quants (the callers stop at about the matrix's end): a share
// with each sub-block, or with prefetch_burst all at the first: the burst
// streams more on Zen 5, while on Zen 4 its 64 to 96 requests at once
// leave the kernels waiting on memory.
static inline __attribute__((always_inline)) void prefetch_share(const unsigned char *quants, size_t far, int lines, int j, int n_subs) {
    int first = prefetch_burst ? (j == 0 ? 0 : lines) : j * lines / n_subs, end = prefetch_burst ? lines : (j + 1) * lines / n_subs;
    for (int l = first; l < end; l++) prefetch_line(quants + 64 * l, far);
}
#endif

#if HAVE_AVX512_VNNI
// Bits `from`.. of each byte of v, moved to bits `to`.. and masked to `mask`
// (shifting 16-bit lanes: the mask drops what crosses from the next byte).
static inline __m512i move_bits(__m512i v, int from, int to, int mask) {
    if (to > from) v = _mm512_slli_epi16(v, (unsigned)(to - from));
    if (from > to) v = _mm512_srli_epi16(v, (unsigned)(from - to));
    return _mm512_and_si512(v, _mm512_set1_epi8((char)mask));
}

// iq4nl_values + 128 in each 16-byte lane, for a byte shuffle by index.
static inline __m512i iq4nl_table(void) {
    __m128i values = _mm_loadu_si128((const __m128i *)iq4nl_values);
    return _mm512_broadcast_i32x4(_mm_xor_si128(values, _mm_set1_epi8((char)0x80)));
}

// mxfp4_values plus the layout's offset (12) likewise.
static inline __m512i mxfp4_table(void) {
    __m128i values = _mm_loadu_si128((const __m128i *)mxfp4_values);
    return _mm512_broadcast_i32x4(_mm_add_epi8(values, _mm_set1_epi8((char)packed_mxfp4.offset)));
}

// Block (g, b)'s quants as 8 vectors of unsigned bytes: w[j] is chunk j.
static inline __attribute__((always_inline)) void load_group_block(__m512i w[8], const unsigned char *quants, int type) {
    if (packed_layout(type)->bits == 8) {
        for (int j = 0; j < 8; j++) w[j] = _mm512_loadu_si512(quants + 64 * j);
        return;
    }
    for (int j = 0; j < 4; j++) {
        __m512i v = _mm512_loadu_si512(quants + 64 * j);
        w[j] = move_bits(v, 0, 0, 0x0F);
        w[j + 4] = move_bits(v, 4, 0, 0x0F);
    }
    if (packed_layout(type)->bits == 5) {
        __m512i high = _mm512_loadu_si512(quants + 256);
        for (int j = 0; j < 8; j++) w[j] = _mm512_or_si512(w[j], move_bits(high, j, 4, 0x10));
    }
    if (packed_layout(type)->lookup == LOOKUP_IQ4NL)
        for (int j = 0; j < 8; j++) w[j] = _mm512_shuffle_epi8(iq4nl_table(), w[j]);
    if (packed_layout(type)->lookup == LOOKUP_MXFP4)
        for (int j = 0; j < 8; j++) w[j] = _mm512_shuffle_epi8(mxfp4_table(), w[j]);
}

// 16 fp16 values (a block's row scales, or its mins) as floats.
static inline __m512 group_halves(const unsigned char *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

// 16 E8M0 bytes as mxfp4_half_scale's floats: 2^(e - 128), built from the
// bits, e 0 and 1 the subnormals 0x00200000 << e.
static inline __m512 group_e8m0(const unsigned char *p) {
    __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, subnormal));
}

// A block's 16 row scales: fp16, MXFP4's E8M0 bytes.
static inline __m512 group_scales(const unsigned char *p, int type) {
    return packed_layout(type)->e8m0 ? group_e8m0(p) : group_halves(p);
}

// acc (16 rows) + one block's integer sums (sum): less the bias, times the
// row scales and x's, then (mins) the row mins times x's sum.
static inline __m512 group_block_end(__m512 acc, __m512i sum, __m512 scales, __m512 row_mins, const ActBlock *x, int mins) {
    sum = _mm512_sub_epi32(sum, _mm512_set1_epi32(x->bias));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(scales, _mm512_set1_ps(x->scale)), acc);
    return mins ? _mm512_fmadd_ps(row_mins, _mm512_set1_ps(x->sum), acc) : acc;
}

// Positions per prefill tile: 8 float sums, 8 integer sums and 8 weight
// vectors stay in registers (25 of 32).
#define PACKED_TOKENS 8

// A full tile: PACKED_TOKENS positions x[t * n_blocks ..] against group g's
// rows. For each block, chunk by chunk, every position's integer sum takes
// one VNNI step, so consecutive steps on one sum are 8 instructions apart
// (VNNI latency is about 4 cycles on 2 units). Per (position, block) the
// same operations as packed_group's one position, so the results are identical.
static inline __attribute__((always_inline)) void packed_tile_as(float *out, size_t out_stride, const Matrix *m, int g,
                                                                  const ActBlock *x, int n_rows, int type, int mins) {
    int n_blocks = col_blocks(m);
    size_t meta_bytes = packed_layout(m->type)->meta_bytes;
    const unsigned char *meta = packed_meta(m, (size_t)g * n_blocks); // this group's, block by block
    __m512 acc[PACKED_TOKENS];
    #pragma GCC unroll 8
    for (int t = 0; t < PACKED_TOKENS; t++) acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < n_blocks; b++, meta += meta_bytes) {
        size_t gb = (size_t)g * n_blocks + b;
        __m512i w[8], sum[PACKED_TOKENS];
        load_group_block(w, packed_quants(m, gb), type);
        #pragma GCC unroll 8
        for (int t = 0; t < PACKED_TOKENS; t++) sum[t] = _mm512_setzero_si512();
        #pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            #pragma GCC unroll 8
            for (int t = 0; t < PACKED_TOKENS; t++)
                sum[t] = _mm512_dpbusd_epi32(sum[t], w[j], _mm512_set1_epi32(read_i32((const unsigned char *)x[(size_t)t * n_blocks + b].q + 4 * j)));
        __m512 scales = group_scales(meta, type), row_mins = mins ? group_halves(meta + 2 * GROUP_ROWS) : scales;
        #pragma GCC unroll 8
        for (int t = 0; t < PACKED_TOKENS; t++) acc[t] = group_block_end(acc[t], sum[t], scales, row_mins, x + (size_t)t * n_blocks + b, mins);
    }
    __mmask16 rows = (__mmask16)((1u << n_rows) - 1);
    #pragma GCC unroll 8
    for (int t = 0; t < PACKED_TOKENS; t++) _mm512_mask_storeu_ps(out + (size_t)t * out_stride, rows, acc[t]);
}

// packed_tile_as compiled for each type (a constant once inlined).
static void packed_tile(float *out, size_t out_stride, const Matrix *m, int g, const ActBlock *x, int n_rows) {
    switch (m->type) {
    case TYPE_Q8_0: packed_tile_as(out, out_stride, m, g, x, n_rows, TYPE_Q8_0, 0); break;
    case TYPE_Q4_0: packed_tile_as(out, out_stride, m, g, x, n_rows, TYPE_Q4_0, 0); break;
    case TYPE_Q4_1: packed_tile_as(out, out_stride, m, g, x, n_rows, TYPE_Q4_1, 1); break;
    case TYPE_Q5_0: packed_tile_as(out, out_stride, m, g, x, n_rows, TYPE_Q5_0, 0); break;
    case TYPE_Q5_1: packed_tile_as(out, out_stride, m, g, x, n_rows, TYPE_Q5_1, 1); break;
    case TYPE_IQ4_NL: packed_tile_as(out, out_stride, m, g, x, n_rows, TYPE_IQ4_NL, 0); break;
    case TYPE_MXFP4: packed_tile_as(out, out_stride, m, g, x, n_rows, TYPE_MXFP4, 0); break;
    default: no_packed_layout(m->type);
    }
}

// out[t * out_stride + r] for the n (<= PACKED_TOKENS) positions x[t * n_blocks ..]
// and rows r < n_rows of group g.
static void packed_group(float *out, size_t out_stride, const Matrix *m, int g, const ActBlock *x, int n, int n_rows) {
    if (n == PACKED_TOKENS) { packed_tile(out, out_stride, m, g, x, n_rows); return; }
    int n_blocks = col_blocks(m), mins = packed_layout(m->type)->mins;
    size_t meta_bytes = packed_layout(m->type)->meta_bytes;
    __mmask16 rows = (__mmask16)((1u << n_rows) - 1);
    const unsigned char *end = packed_quants(m, (size_t)row_groups(m) * n_blocks);
    size_t far = prefetch_distance(m->type); // generation asks for lines this far ahead (0: none)
    for (int t = 0; t < n; t++) { // one position at a time (generation, and a tile's leftovers)
        __m512 acc = _mm512_setzero_ps();
        const unsigned char *meta = packed_meta(m, (size_t)g * n_blocks);
        for (int b = 0; b < n_blocks; b++, meta += meta_bytes) {
            size_t gb = (size_t)g * n_blocks + b;
            const ActBlock *xb = x + (size_t)t * n_blocks + b;
            __m512i w[8], sum = _mm512_setzero_si512();
            if (t == 0) prefetch_ahead(packed_quants(m, gb), end, packed_layout(m->type)->quant_bytes, far);
            load_group_block(w, packed_quants(m, gb), m->type);
            for (int j = 0; j < 8; j++) sum = _mm512_dpbusd_epi32(sum, w[j], _mm512_set1_epi32(read_i32((const unsigned char *)xb->q + 4 * j)));
            acc = group_block_end(acc, sum, group_scales(meta, m->type), mins ? group_halves(meta + 2 * GROUP_ROWS) : acc, xb, mins);
        }
        _mm512_mask_storeu_ps(out + (size_t)t * out_stride, rows, acc);
    }
}

#elif HAVE_AVX2

/* The packed 32-value types on AVX2, without AVX-512's VNNI. maddubs
   multiplies unsigned bytes (the weights) by signed ones (x) and adds neighbouring
   products into int16, saturating; madd then adds pairs of those into
   int32. So that no int16 saturates, the types stored as 4 or 5 bits sum
   a run of chunks in int16 before widening: 8 chunks of values up to 15
   (at most 8 * 2 * 15 * 127 = 30480), 4 of values up to 31 (31496) or, for
   MXFP4's levels plus 12, up to 24 (24384). Q8_0 and IQ4_NL, stored up to
   255, are multiplied signed instead (the stored value less 128) as |w|
   times x with w's sign: at most 2 * 128 * 127 = 32512, widened at once,
   and with nothing to subtract for the offset (128 * sum(q), the bias).
   So the same integers as the VNNI kernels and the plain twin, hence their
   bits. A 256-bit vector holds 8 rows of a
   chunk: rows 8h..8h+7 are half h of each 64-byte chunk. With AVX-VNNI
   (Intel from Alder Lake, AMD from Zen 5) one instruction multiplies and
   adds into int32, as the 512-bit VNNI kernels do: every type's stored
   values as they are, no runs, no sign trick. */

// Positions per prefill tile: their float sums for both halves, integer
// sums and int16 runs, with the chunk and x, fill the 16 registers.
#define PACKED_TOKENS 2

// Q8_0 and IQ4_NL without AVX-VNNI: the values multiplied signed (see above).
static int packed_signed(int type) { return !HAVE_AVX_VNNI && (packed_layout(type)->bits == 8 || packed_layout(type)->lookup == LOOKUP_IQ4NL); }

// The IQ4 grid in each 16-byte lane, for a byte shuffle by index: signed
// (IQ4_XS, and IQ4_NL without AVX-VNNI), or plus 128 (the layout's offset).
static inline __m256i iq4nl_signed8(void) { return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4nl_values)); }
static inline __m256i iq4nl_table8(void) {
    return HAVE_AVX_VNNI ? _mm256_xor_si256(iq4nl_signed8(), _mm256_set1_epi8((char)0x80)) : iq4nl_signed8();
}
// MXFP4's doubled E2M1 levels plus the layout's offset: 0..24, unsigned.
static inline __m256i mxfp4_table8(void) {
    __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)mxfp4_values));
    return _mm256_add_epi8(levels, _mm256_set1_epi8((char)packed_mxfp4.offset));
}

// Bits `from`.. of each byte of v, moved to bits `to`.. and masked to
// `mask`: the 512-bit kernels' move_bits on 256 bits.
static inline __m256i move_bits_256(__m256i v, int from, int to, int mask) {
    if (to > from) v = _mm256_slli_epi16(v, to - from);
    if (from > to) v = _mm256_srli_epi16(v, from - to);
    return _mm256_and_si256(v, _mm256_set1_epi8((char)mask));
}

#if !HAVE_AVX_VNNI
// Chunks whose maddubs products are summed in int16 before madd (see above).
static int int16_run(int type) {
    if (packed_signed(type)) return 1;
    return packed_layout(type)->bits == 5 || packed_layout(type)->lookup == LOOKUP_MXFP4 ? 4 : 8;
}
#endif

// part + products, a run's int16 sum. A prefill tile's runs add with
// saturation, which never happens (the runs' bounds): GCC cannot regroup
// such adds, and regrouping a tile's chains into trees spills its sums.
static inline __m256i add_to_run(__m256i part, __m256i products, int n_t) {
    return n_t > 1 ? _mm256_adds_epi16(part, products) : _mm256_add_epi16(part, products);
}

// Chunk j (values 4j..4j+3) of a block's quants, rows 8h..8h+7: the stored
// values, or (packed_signed) the signed ones.
static inline __attribute__((always_inline)) __m256i packed_chunk8(const unsigned char *quants, int j, int h, int type) {
    if (packed_layout(type)->bits == 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(quants + 64 * j + 32 * h));
        return packed_signed(type) ? _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)) : v;
    }
    __m256i v = _mm256_loadu_si256((const __m256i *)(quants + 64 * (j % 4) + 32 * h)); // values j < 4 low nibbles, else high
    v = move_bits_256(v, j < 4 ? 0 : 4, 0, 0x0F);
    if (packed_layout(type)->bits == 5) // bit j of each byte to bit 4
        v = _mm256_or_si256(v, move_bits_256(_mm256_loadu_si256((const __m256i *)(quants + 256 + 32 * h)), j, 4, 0x10));
    if (packed_layout(type)->lookup == LOOKUP_IQ4NL) v = _mm256_shuffle_epi8(iq4nl_table8(), v);
    if (packed_layout(type)->lookup == LOOKUP_MXFP4) v = _mm256_shuffle_epi8(mxfp4_table8(), v);
    return v;
}

// Block quants' integer sums for rows 8h..8h+7 against n_t positions,
// x[t * stride] each position's block, less its bias: sum[t].
static inline __attribute__((always_inline)) void packed_half_sums(__m256i *sum, const unsigned char *quants, int h, const ActBlock *x,
                                                                    size_t stride, int n_t, int type) {
    int is_signed = packed_signed(type);
#if !HAVE_AVX_VNNI
    int run = int16_run(type);
    __m256i part[PACKED_TOKENS];
#endif
    for (int t = 0; t < n_t; t++) sum[t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        __m256i w = packed_chunk8(quants, j, h, type);
#if HAVE_AVX_VNNI
        for (int t = 0; t < n_t; t++)
            sum[t] = _mm256_dpbusd_avx_epi32(sum[t], w, _mm256_set1_epi32(read_i32((const unsigned char *)x[(size_t)t * stride].q + 4 * j)));
#else
        __m256i abs_w = is_signed ? _mm256_sign_epi8(w, w) : w; // -128 stays 0x80: 128 unsigned
        for (int t = 0; t < n_t; t++) {
            __m256i xj = _mm256_set1_epi32(read_i32((const unsigned char *)x[(size_t)t * stride].q + 4 * j));
            __m256i products = _mm256_maddubs_epi16(abs_w, is_signed ? _mm256_sign_epi8(xj, w) : xj);
            part[t] = j % run ? add_to_run(part[t], products, n_t) : products;
            if (j % run == run - 1) sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(part[t], _mm256_set1_epi16(1)));
        }
#endif
    }
    if (!is_signed)
        for (int t = 0; t < n_t; t++) sum[t] = _mm256_sub_epi32(sum[t], _mm256_set1_epi32(x[(size_t)t * stride].bias));
}

// 8 E8M0 bytes as mxfp4_half_scale's floats: 2^(e - 128), built from the
// bits, e 0 and 1 the subnormals 0x00200000 << e.
static inline __m256 half_e8m0(const unsigned char *p) {
    __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}

// acc (rows 8h..8h+7) + one block's integer sums times the row scales and
// x's, then (mins) the row mins times x's sum: packed_position_plain's
// operations per lane. The scales are fp16, MXFP4's E8M0 bytes.
static inline __m256 packed_half_end(__m256 acc, __m256i sum, const unsigned char *meta, int h, const ActBlock *x, int mins,
                                     int type) {
    __m256 scales = packed_layout(type)->e8m0 ? half_e8m0(meta + 8 * h) : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(meta + 16 * h)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(scales, _mm256_set1_ps(x->scale)), acc);
    if (!mins) return acc;
    __m256 row_mins = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(meta + 2 * GROUP_ROWS + 16 * h)));
    return _mm256_fmadd_ps(row_mins, _mm256_set1_ps(x->sum), acc);
}

// Group g's rows (out[t * out_stride + r], r < n_rows) against n_t
// (1 or PACKED_TOKENS) positions x[t * n_blocks ..]. Block by block, so the
// weights are read once, in order (one position: with the lines ahead
// requested, as the VNNI kernels do). One position takes both halves in
// one pass; a tile takes one half a pass, so that its sums stay in
// registers.
static inline __attribute__((always_inline)) void packed_tile_as(float *out, size_t out_stride, const Matrix *m, int g,
                                                                  const ActBlock *x, int n_t, int n_rows, int type, int mins) {
    int n_blocks = col_blocks(m), n_h = n_t == 1 ? 2 : 1;
    size_t quant_bytes = packed_layout(type)->quant_bytes, meta_bytes = packed_layout(type)->meta_bytes;
    const unsigned char *end = packed_quants(m, (size_t)row_groups(m) * n_blocks);
    size_t far = prefetch_distance(type); // generation asks for lines this far ahead (0: none)
    float rows[PACKED_TOKENS][GROUP_ROWS];
    for (int h0 = 0; h0 < 2; h0 += n_h) {
        const unsigned char *quants = packed_quants(m, (size_t)g * n_blocks), *meta = packed_meta(m, (size_t)g * n_blocks);
        __m256 acc[2][PACKED_TOKENS]; // [s][t]: half h0 + s
        for (int s = 0; s < n_h; s++)
            for (int t = 0; t < n_t; t++) acc[s][t] = _mm256_setzero_ps();
        for (int b = 0; b < n_blocks; b++, quants += quant_bytes, meta += meta_bytes) {
            if (n_t == 1) prefetch_ahead(quants, end, quant_bytes, far);
            for (int s = 0; s < n_h; s++) {
                __m256i sum[PACKED_TOKENS];
                packed_half_sums(sum, quants, h0 + s, x + b, (size_t)n_blocks, n_t, type);
                for (int t = 0; t < n_t; t++)
                    acc[s][t] = packed_half_end(acc[s][t], sum[t], meta, h0 + s, x + (size_t)t * n_blocks + b, mins, type);
            }
        }
        for (int s = 0; s < n_h; s++)
            for (int t = 0; t < n_t; t++) _mm256_storeu_ps(rows[t] + 8 * (h0 + s), acc[s][t]);
    }
    for (int t = 0; t < n_t; t++) memcpy(out + (size_t)t * out_stride, rows[t], (size_t)n_rows * sizeof(float));
}

// packed_tile_as compiled for each type (a constant once inlined), for
// the tile size n_t its callers pass as a constant.
static inline __attribute__((always_inline)) void packed_tile(float *out, size_t out_stride, const Matrix *m, int g,
                                                               const ActBlock *x, int n_t, int n_rows) {
    switch (m->type) {
    case TYPE_Q8_0: packed_tile_as(out, out_stride, m, g, x, n_t, n_rows, TYPE_Q8_0, 0); return;
    case TYPE_Q4_0: packed_tile_as(out, out_stride, m, g, x, n_t, n_rows, TYPE_Q4_0, 0); return;
    case TYPE_Q4_1: packed_tile_as(out, out_stride, m, g, x, n_t, n_rows, TYPE_Q4_1, 1); return;
    case TYPE_Q5_0: packed_tile_as(out, out_stride, m, g, x, n_t, n_rows, TYPE_Q5_0, 0); return;
    case TYPE_Q5_1: packed_tile_as(out, out_stride, m, g, x, n_t, n_rows, TYPE_Q5_1, 1); return;
    case TYPE_IQ4_NL: packed_tile_as(out, out_stride, m, g, x, n_t, n_rows, TYPE_IQ4_NL, 0); return;
    case TYPE_MXFP4: packed_tile_as(out, out_stride, m, g, x, n_t, n_rows, TYPE_MXFP4, 0); return;
    default: no_packed_layout(m->type);
    }
}

// out[t * out_stride + r] for the n (<= PACKED_TOKENS) positions x[t * n_blocks ..]
// and rows r < n_rows of group g: a tile, or one position at a time.
static void packed_group(float *out, size_t out_stride, const Matrix *m, int g, const ActBlock *x, int n, int n_rows) {
    if (n == PACKED_TOKENS) { packed_tile(out, out_stride, m, g, x, PACKED_TOKENS, n_rows); return; }
    for (int t = 0; t < n; t++) packed_tile(out + (size_t)t * out_stride, out_stride, m, g, x + (size_t)t * col_blocks(m), 1, n_rows);
}

#else
#define PACKED_TOKENS 1
#endif

// packed_group's plain twin (in builds without the SIMD kernels, only the
// tests pack matrices).
static void packed_group_plain(float *out, size_t out_stride, const Matrix *m, int g, const ActBlock *x, int n, int n_rows) {
    int n_blocks = col_blocks(m);
    for (int t = 0; t < n; t++) {
        float sums[GROUP_ROWS];
        packed_position_plain(sums, m, g, x + (size_t)t * n_blocks);
        memcpy(out + (size_t)t * out_stride, sums, (size_t)n_rows * sizeof(float));
    }
}

// quantize_act_plain, the same arithmetic with AVX-512 or AVX2 where the build has it.
static void quantize_act(ActBlock *out, const float *x, int cols, int type) {
    int b = 0;
#if HAVE_AVX512_VNNI
    int offset = packed_layout(type)->offset, mins = packed_layout(type)->mins;
    for (; (b + 1) * QK <= cols; b++) {
        __m512 v0 = _mm512_loadu_ps(x + (size_t)b * QK), v1 = _mm512_loadu_ps(x + (size_t)b * QK + 16);
        __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
        float d = amax / 127.0f, id = mins ? (amax != 0.0f ? 127.0f / amax : 0.0f) : d > 0.0f ? 1.0f / d : 0.0f;
        if (!isfinite(id)) id = 0.0f;
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
        _mm_storeu_si128((__m128i *)out[b].q, _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(out[b].q + 16), _mm512_cvtsepi32_epi8(q1));
        int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        out[b].scale = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
        out[b].bias = offset * sum;
        out[b].sum = mins ? _cvtsh_ss(_cvtss_sh(sum * d, _MM_FROUND_TO_NEAREST_INT)) : 0.0f;
    }
#elif HAVE_AVX2
    int offset = packed_layout(type)->offset, mins = packed_layout(type)->mins;
    for (; (b + 1) * QK <= cols; b++) {
        const float *v = x + (size_t)b * QK;
        float amax = amax_floats(v, QK);
        float d = amax / 127.0f, id = mins ? (amax != 0.0f ? 127.0f / amax : 0.0f) : d > 0.0f ? 1.0f / d : 0.0f;
        if (!isfinite(id)) id = 0.0f;
        __m256i q[4]; // to nearest even, as nearbyintf in the default rounding mode
        for (int j = 0; j < 4; j++) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * j), _mm256_set1_ps(id)));
        _mm256_storeu_si256((__m256i *)out[b].q, pack_bytes(q));
        __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i sum4 = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
        sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0x4E));
        int sum = _mm_cvtsi128_si32(_mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0xB1)));
        out[b].scale = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
        out[b].bias = offset * sum;
        out[b].sum = mins ? _cvtsh_ss(_cvtss_sh(sum * d, _MM_FROUND_TO_NEAREST_INT)) : 0.0f;
    }
#endif
    quantize_act_plain(out + b, x + (size_t)b * QK, cols - b * QK, type);
}

/* ----------------------------------------------------------------------------
   Packed K-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS in one scheme.
   The unit is a block of 16 rows by one super-block of 256 columns, (g, b).
   Chunk c (0..63) is a row's values 4c..4c+3, row r's in bytes 4r..4r+3 of
   a 64-byte vector, so one VNNI step multiplies a chunk of all 16 rows by
   four activations. Activations are Q8_K rows, as llama.cpp quantizes them
   for these types. Each type's q (an unsigned integer, see below) is split
   into bit planes, stored one after the other, the planes a type uses:
     1-bit plane (512 bytes) 8 vectors, vector u holding chunk u + 8 s in bit s
     2-bit plane (1024 bytes) 16 vectors, vector u holding chunks u, u + 16,
            u + 32, u + 48 in bits 0-1, 2-3, 4-5, 6-7
     4-bit plane (2048 bytes) 32 vectors, vector 4s + i (i < 4) holding
            chunk 8s + i in its low nibbles and chunk 8s + 4 + i in its
            high ones (nibble_vector): a sub-block of 32 values in 4
            vectors, read in order
   and a chunk's q is its planes' bits joined, the 4-bit plane's lowest,
   the 1-bit plane's highest (plane_start: why the smallest comes first).
   Q6_K instead keeps each four chunks 4s..4s+3 (a sub-block) in three
   vectors (192 bytes at 192 s): chunks 4s, 4s+1, 4s+2 whole in bits 0-5 of
   vectors 0, 1, 2, and chunk 4s+3 two bits in the top of each, its lowest
   in vector 0 (packed_k_value). The kernels read it in order, one stream,
   and decode four chunks in 9 operations on 3 vectors, where the planes
   took 13 on 8. Q3_K likewise keeps each eight chunks 8s..8s+7 (two
   sub-blocks) in three vectors at 192 s: chunks 8s + 2n and 8s + 2n + 1 in
   bits 0-2 and 3-5 of vector n (n < 3); chunk 8s + 6's low two bits in the
   top of vector 0, chunk 8s + 7's in the top of vector 1, and their third
   bits in bits 6 and 7 of vector 2: eight chunks in 19 operations, where
   the planes took about 36, and one stream.
   Then, per (g, b), the scales: d[16] (fp16), dmin[16] (fp16, types with
   mins), sc[n_subs][16], m[n_subs][16] (types with mins): sub-block j's
   scale and min of row r at [j][r], one byte each; except that Q4_K and
   Q5_K keep each row's 12 bytes of 6-bit scales and mins as GGUF packs
   them, k4[12][16], row r's byte k at [k][r]: 64 bytes fewer per (g, b),
   2.7% of Q4_K's bytes, unpacked with a few byte operations per sub-block
   (packed_k_scales). A type's values are
       d * sc_j * (q - offset) - dmin * m_j          or, for IQ4_XS,
       d * sc_j * (q - 128) with q = iq4nl_values[index] + 128,
   so per row and super-block the sums are exact integers:
       sumi = sum over j of sc_j * (sum of q * x.q over j - offset * x's sum over j)
       summ = sum over j of m_j * x's sum over j
   and acc = fma(sumi, d * x.d, acc), then (types with mins) acc =
   fma(-summ, dmin * x.d, acc): the same float operations in the plain twin
   and in every lane. */

// Where each plane starts in a super-block's quants, the smallest first,
// and where the scale bytes start in its meta. Q5_K's first sub-block reads
// all of its 1-bit plane: stored first, the block is read in order, one
// stream, which the hardware prefetchers follow.
static int plane_start(PackedLayout f, int plane) {
    int at = 0;
    if (plane == 1) return at;
    if (f.planes & 1) at += 512;
    if (plane == 2) return at;
    if (f.planes & 2) at += 1024;
    return at;
}
static int meta_sc(PackedLayout f) { return f.mins ? 64 : 32; } // where k4 starts too
static int meta_m(PackedLayout f) { return meta_sc(f) + 16 * f.n_subs; }

// The 4-bit plane's vector holding chunk c, and whether in its high
// nibbles: each sub-block of eight chunks (the 4-bit types have 32-value
// sub-blocks) in its own 4 vectors, so a block is read once, in order.
// (Chunk v and v + 32 in one vector would read the plane twice, its first
// four sub-blocks taking every line: slower generation.)
static int nibble_vector(int c) { return 4 * (c / 8) + c % 4; }
static int nibble_high(int c) { return c % 8 >= 4; }

#if HAVE_AVX2
static int k_lines(PackedLayout f) { return 8 * ((f.planes & 4) + (f.planes & 2) + (f.planes & 1)); } // 64-byte lines of quants a block

// Generation asks for a K-type's lines prefetch_far_bytes ahead (unless
// prefetch_skip says not to), as for the 32-value types: each type's
// block of quants is read in order, one stream, which the hardware
// prefetchers follow. On AMD Q4_K asks for nothing: its 4-bit plane read
// in order, the prefetchers keep up with it alone (the other K-types lose
// without their requests). Planes read side by side would be two streams,
// which the prefetchers follow badly.
#endif

// Sub-block j's scale and min (0 without mins) of row r of a (g, b)'s meta.
static void packed_k_scale(const unsigned char *meta, int j, int r, PackedLayout f, int *sc, int *m) {
    if (f.k4) {
        uint8_t k4[12];
        for (int k = 0; k < 12; k++) k4[k] = meta[meta_sc(f) + 16 * k + r];
        k4_scale_min(k4, j, sc, m);
        return;
    }
    *sc = (int8_t)meta[meta_sc(f) + 16 * j + r];
    *m = f.mins ? meta[meta_m(f) + 16 * j + r] : 0;
}

// One super-block of a K-type as the packed layout holds it.
typedef struct {
    uint8_t q[QK_K];  // as stored (IQ4_XS: the index; the table is applied when packed)
    int8_t sc[16];    // per sub-block (n_subs of them)
    uint8_t m[16];
    uint16_t d, dmin; // fp16
} KBlock;

static inline __attribute__((always_inline)) void unpack_k_block(KBlock *u, const void *block, int type) {
    PackedLayout f = *packed_layout(type);
    int sc, m;
    memset(u, 0, sizeof *u);
    for (int k = 0; k < QK_K; k++) {
        switch (type) {
        case TYPE_Q2_K: u->q[k] = (uint8_t)q2_k_quant(((const BlockQ2_K *)block)->qs, k); break;
        case TYPE_Q3_K: u->q[k] = (uint8_t)(q3_k_quant(block, k) + 4); break;
        case TYPE_Q4_K: u->q[k] = (uint8_t)q4_k_quant(((const BlockQ4_K *)block)->qs, k); break;
        case TYPE_Q5_K: u->q[k] = (uint8_t)q5_k_quant(block, k); break;
        case TYPE_Q6_K: u->q[k] = (uint8_t)(q6_k_quant(block, k) + 32); break;
        case TYPE_IQ4_XS: { const uint8_t *qs = ((const BlockIQ4_XS *)block)->qs + 16 * (k / 32);
                            u->q[k] = k % 32 < 16 ? qs[k % 16] & 0xF : qs[k % 16] >> 4; } break;
        default: no_packed_layout(type);
        }
    }
    for (int j = 0; j < f.n_subs; j++) {
        switch (type) {
        case TYPE_Q2_K: { uint8_t s = ((const BlockQ2_K *)block)->scales[j]; sc = s & 0xF; m = s >> 4; } break;
        case TYPE_Q3_K: sc = q3_k_scale(((const BlockQ3_K *)block)->scales, j) - 32; m = 0; break;
        case TYPE_Q4_K: case TYPE_Q5_K: k4_scale_min(((const BlockQ4_K *)block)->scales, j, &sc, &m); break;
        case TYPE_Q6_K: sc = ((const BlockQ6_K *)block)->scales[j]; m = 0; break;
        case TYPE_IQ4_XS: sc = iq4_xs_scale(block, j) - 32; m = 0; break;
        default: no_packed_layout(type);
        }
        u->sc[j] = (int8_t)sc;
        u->m[j] = (uint8_t)m;
    }
    switch (type) { // d and dmin sit in different places in each block
    case TYPE_Q2_K: u->d = ((const BlockQ2_K *)block)->d; u->dmin = ((const BlockQ2_K *)block)->dmin; break;
    case TYPE_Q3_K: u->d = ((const BlockQ3_K *)block)->d; break;
    case TYPE_Q4_K: case TYPE_Q5_K: u->d = ((const BlockQ4_K *)block)->d; u->dmin = ((const BlockQ4_K *)block)->dmin; break;
    case TYPE_Q6_K: u->d = ((const BlockQ6_K *)block)->d; break;
    case TYPE_IQ4_XS: u->d = ((const BlockIQ4_XS *)block)->d; break;
    default: no_packed_layout(type);
    }
}

// Row r of super-block (g, b) into the packed layout; block NULL: a
// padding row (zeros: d = 0 makes it add nothing).
static inline __attribute__((always_inline)) void pack_k_row_as(unsigned char *quants, unsigned char *meta, int r, const void *block, int type) {
    PackedLayout f = *packed_layout(type);
    KBlock u;
    if (block) unpack_k_block(&u, block, type);
    else memset(&u, 0, sizeof u);
    memcpy(meta + 2 * r, &u.d, 2);
    if (f.mins) memcpy(meta + 32 + 2 * r, &u.dmin, 2);
    for (int k = 0; f.k4 && k < 12; k++) meta[meta_sc(f) + 16 * k + r] = block ? ((const BlockQ4_K *)block)->scales[k] : 0;
    for (int j = 0; !f.k4 && j < f.n_subs; j++) {
        meta[meta_sc(f) + 16 * j + r] = (uint8_t)u.sc[j];
        if (f.mins) meta[meta_m(f) + 16 * j + r] = u.m[j];
    }
    for (int c = 0; c < 64; c++) // chunks in order: the first write of each byte sets it
        for (int i = 0; i < 4; i++) {
            int q = u.q[4 * c + i], low = f.planes & 4 ? 4 : 0;
            if (f.six) { // vector 0's byte of this row and value, vector n's 64 n further
                uint8_t *p = quants + 192 * (c / 4) + 4 * r + i;
                if (c % 4 < 3) p[64 * (c % 4)] = (uint8_t)q;
                else for (int n = 0; n < 3; n++) p[64 * n] |= (uint8_t)(((q >> 2 * n) & 3) << 6);
                continue;
            }
            if (f.three) {
                uint8_t *p = quants + 192 * (c / 8) + 4 * r + i;
                int k = c % 8;
                if (k < 6 && k % 2 == 0) p[64 * (k / 2)] = (uint8_t)q;
                else if (k < 6) p[64 * (k / 2)] |= (uint8_t)(q << 3);
                else {
                    p[64 * (k - 6)] |= (uint8_t)((q & 3) << 6);
                    p[128] |= (uint8_t)((q >> 2) << (k == 6 ? 6 : 7));
                }
                continue;
            }
            if (f.planes & 4) {
                uint8_t *p = quants + plane_start(f, 4) + 64 * nibble_vector(c) + 4 * r + i;
                *p = nibble_high(c) ? (uint8_t)(*p | (q & 0xF) << 4) : (uint8_t)(q & 0xF);
            }
            if (f.planes & 2) {
                uint8_t *p = quants + plane_start(f, 2) + 64 * (c % 16) + 4 * r + i;
                int bits = (q >> low) & 3;
                *p = c < 16 ? (uint8_t)bits : (uint8_t)(*p | bits << (2 * (c / 16)));
            }
            if (f.planes & 1) {
                uint8_t *p = quants + plane_start(f, 1) + 64 * (c % 8) + 4 * r + i;
                int bit = (q >> (low + (f.planes & 2 ? 2 : 0))) & 1;
                *p = c < 8 ? (uint8_t)bit : (uint8_t)(*p | bit << (c / 8));
            }
        }
}

// pack_k_row_as for a Q4_K row, four values a step: Q4_K_M files are
// mostly Q4_K and Q6_K, and the value-by-value loop made their packing
// the larger part of a start. Vector 4a + m of the layout holds, in row
// r's bytes, values 32a + 4m.. in its low nibbles and 32a + 16 + 4m.. in
// its high ones (nibble_vector); the block's byte 32j + l holds values
// 64j + l and 64j + 32 + l. The same bytes as pack_k_row_as (a test holds
// them equal).
static void pack_q4_k_row(unsigned char *quants, unsigned char *meta, int r, const void *block) {
    const BlockQ4_K *b = block;
    PackedLayout f = packed_q4_k;
    memcpy(meta + 2 * r, &b->d, 2);
    memcpy(meta + 32 + 2 * r, &b->dmin, 2);
    for (int k = 0; k < 12; k++) meta[meta_sc(f) + 16 * k + r] = b->scales[k];
    for (int j = 0; j < 4; j++)
        for (int m = 0; m < 4; m++) {
            uint32_t lo, hi; // bytes 32j + 4m.. and 32j + 16 + 4m..
            memcpy(&lo, b->qs + 32 * j + 4 * m, 4);
            memcpy(&hi, b->qs + 32 * j + 16 + 4 * m, 4);
            uint32_t even = (lo & 0x0F0F0F0Fu) | (hi & 0x0F0F0F0Fu) << 4; // values 64j + 4m.. and 64j + 16 + 4m..
            uint32_t odd = (lo >> 4 & 0x0F0F0F0Fu) | (hi & 0xF0F0F0F0u);  // values 64j + 32 + 4m.. and 64j + 48 + 4m..
            memcpy(quants + 64 * (8 * j + m) + 4 * r, &even, 4);
            memcpy(quants + 64 * (8 * j + 4 + m) + 4 * r, &odd, 4);
        }
}

// The same for a Q6_K row. The layout's vectors 192g + 64n (n = 0..2)
// hold, in row r's bytes, values 16g + 4n.. and in their top two bits bits
// 2n and 2n + 1 of values 16g + 12..; in the block, values 32s + l of half
// h are nibbles of ql and bit pairs of qh (q6_k_quant).
static void pack_q6_k_row(unsigned char *quants, unsigned char *meta, int r, const void *block) {
    const BlockQ6_K *b = block;
    PackedLayout f = packed_q6_k;
    memcpy(meta + 2 * r, &b->d, 2);
    for (int j = 0; j < 16; j++) meta[meta_sc(f) + 16 * j + r] = (uint8_t)b->scales[j];
    for (int g = 0; g < 16; g++) {
        uint32_t v[4]; // values 16g + 4n.., a byte each
        for (int n = 0; n < 4; n++) {
            int k = 16 * g + 4 * n, h = k / 128, s = (k % 128) / 32, l = k % 32;
            uint32_t low, high;
            memcpy(&low, b->ql + 64 * h + 32 * (s & 1) + l, 4);
            memcpy(&high, b->qh + 32 * h + l, 4);
            v[n] = ((s < 2 ? low : low >> 4) & 0x0F0F0F0Fu) | (high >> 2 * s & 0x03030303u) << 4;
        }
        for (int n = 0; n < 3; n++) {
            uint32_t bytes = v[n] | (v[3] >> 2 * n & 0x03030303u) << 6;
            memcpy(quants + 192 * g + 64 * n + 4 * r, &bytes, 4);
        }
    }
}

// pack_k_row_as compiled for each type (a constant once inlined: the
// unpacking's and the planes' branches fold away): packing is the larger
// part of a quantized model's start.
static void pack_k_row(unsigned char *quants, unsigned char *meta, int r, const void *block, int type) {
    switch (type) {
    case TYPE_Q2_K: pack_k_row_as(quants, meta, r, block, TYPE_Q2_K); break;
    case TYPE_Q3_K: pack_k_row_as(quants, meta, r, block, TYPE_Q3_K); break;
    case TYPE_Q4_K:
        if (block) pack_q4_k_row(quants, meta, r, block);
        else pack_k_row_as(quants, meta, r, block, TYPE_Q4_K);
        break;
    case TYPE_Q5_K: pack_k_row_as(quants, meta, r, block, TYPE_Q5_K); break;
    case TYPE_Q6_K:
        if (block) pack_q6_k_row(quants, meta, r, block);
        else pack_k_row_as(quants, meta, r, block, TYPE_Q6_K);
        break;
    case TYPE_IQ4_XS: pack_k_row_as(quants, meta, r, block, TYPE_IQ4_XS); break;
    default: no_packed_layout(type);
    }
}

// Row r's q of value k in a super-block's packed quants, as the kernels
// multiply it (IQ4_XS: iq4nl_values[index] + 128).
static int packed_k_value(const unsigned char *quants, int r, int k, PackedLayout f) {
    int c = k / 4, i = k % 4, q = 0, bits = 0;
    if (f.six) {
        const unsigned char *p = quants + 192 * (c / 4) + 4 * r + i;
        if (c % 4 < 3) return p[64 * (c % 4)] & 63;
        return p[0] >> 6 | (p[64] >> 6) << 2 | (p[128] >> 6) << 4;
    }
    if (f.three) {
        const unsigned char *p = quants + 192 * (c / 8) + 4 * r + i;
        int n = c % 8;
        if (n < 6) return (p[64 * (n / 2)] >> (3 * (n % 2))) & 7;
        return p[64 * (n - 6)] >> 6 | ((p[128] >> n) & 1) << 2;
    }
    if (f.planes & 4) {
        uint8_t byte = quants[plane_start(f, 4) + 64 * nibble_vector(c) + 4 * r + i];
        q = nibble_high(c) ? byte >> 4 : byte & 0xF;
        bits = 4;
    }
    if (f.planes & 2) {
        q |= ((quants[plane_start(f, 2) + 64 * (c % 16) + 4 * r + i] >> (2 * (c / 16))) & 3) << bits;
        bits += 2;
    }
    if (f.planes & 1) q |= ((quants[plane_start(f, 1) + 64 * (c % 8) + 4 * r + i] >> (c / 8)) & 1) << bits;
    return f.lookup ? iq4nl_values[q] + 128 : q;
}

// Row r's values of block gb of a packed matrix, as floats: the values the
// type's dequantize gives, with the same float operations (the kernels
// tests check every type with a layout).
static void dequantize_packed_block(float *out, const Matrix *m, size_t gb, int r) {
    const unsigned char *quants = packed_quants(m, gb), *meta = packed_meta(m, gb);
    PackedLayout f = *packed_layout(m->type);
    uint16_t d, dmin = 0;
    if (type_traits[m->type].block_size == QK) {
        float scale = packed_row_scale(meta, r, m->type), min = 0.0f;
        if (f.mins) memcpy(&dmin, meta + 2 * GROUP_ROWS + 2 * r, 2), min = f16_to_f32(dmin);
        for (int k = 0; k < QK; k++) {
            float value = scale * (packed_value(quants, r, k, m->type) - f.offset);
            out[k] = f.mins ? value + min : value;
        }
        return;
    }
    memcpy(&d, meta + 2 * r, 2);
    if (f.mins) memcpy(&dmin, meta + 32 + 2 * r, 2);
    int sub = QK_K / f.n_subs;
    for (int j = 0; j < f.n_subs; j++) {
        int sc, mj;
        packed_k_scale(meta, j, r, f, &sc, &mj);
        float dl = f16_to_f32(d) * sc, ml = f16_to_f32(dmin) * mj;
        for (int k = j * sub; k < (j + 1) * sub; k++) {
            float value = dl * (packed_k_value(quants, r, k, f) - f.offset);
            out[k] = f.mins ? value - ml : value;
        }
    }
}

// Row i of a packed matrix as floats, from the packed copy alone.
static void dequantize_packed_row(float *out, const Matrix *m, int i) {
    int block = type_traits[m->type].block_size, n_blocks = col_blocks(m);
    float values[MAX_BLOCK];
    for (int b = 0; b < n_blocks; b++) {
        dequantize_packed_block(values, m, (size_t)(i / GROUP_ROWS) * n_blocks + b, i % GROUP_ROWS);
        int len = m->cols - b * block < block ? m->cols - b * block : block;
        memcpy(out + (size_t)b * block, values, (size_t)len * sizeof(float));
    }
}

// 16 rows of group g against one position x (Q8_K, col_blocks blocks): out[r].
static void packed_k_position_plain(float *out, const Matrix *m, int g, const BlockQ8_K *x) {
    PackedLayout f = *packed_layout(m->type);
    int n_blocks = col_blocks(m), len = QK_K / f.n_subs;
    float acc[GROUP_ROWS] = {0};
    for (int b = 0; b < n_blocks; b++) {
        size_t gb = (size_t)g * n_blocks + b;
        const unsigned char *quants = packed_quants(m, gb), *meta = packed_meta(m, gb);
        for (int r = 0; r < GROUP_ROWS; r++) {
            int32_t sumi = 0, summ = 0;
            for (int j = 0; j < f.n_subs; j++) {
                int32_t isum = 0, xsum = 0;
                for (int k = j * len; k < (j + 1) * len; k++) isum += packed_k_value(quants, r, k, f) * x[b].qs[k];
                for (int s = j * len / 16; s < (j + 1) * len / 16; s++) xsum += x[b].bsums[s];
                int sc, mj;
                packed_k_scale(meta, j, r, f, &sc, &mj);
                sumi += sc * (isum - f.offset * xsum);
                summ += mj * xsum;
            }
            uint16_t d, dmin;
            memcpy(&d, meta + 2 * r, 2);
            acc[r] = fmaf((float)sumi, f16_to_f32(d) * x[b].d, acc[r]);
            if (f.mins) {
                memcpy(&dmin, meta + 32 + 2 * r, 2);
                acc[r] = fmaf(-(float)summ, f16_to_f32(dmin) * x[b].d, acc[r]);
            }
        }
    }
    memcpy(out, acc, sizeof acc);
}

// out[t * out_stride + r] for the n positions x[t * col_blocks ..] and rows
// r < n_rows of group g.
static void packed_k_group_plain(float *out, size_t out_stride, const Matrix *m, int g, const BlockQ8_K *x, int n, int n_rows) {
    for (int t = 0; t < n; t++) {
        float sums[GROUP_ROWS];
        packed_k_position_plain(sums, m, g, x + (size_t)t * col_blocks(m));
        memcpy(out + (size_t)t * out_stride, sums, (size_t)n_rows * sizeof(float));
    }
}

#if HAVE_AVX2
// packed_k_scale for the 16 rows at once, a byte per row: sc (signed) and
// m (unsigned; types without mins: undefined).
static inline __attribute__((always_inline)) void packed_k_scales(__m128i *sc, __m128i *m, const unsigned char *meta, int j, PackedLayout f) {
    if (!f.k4) {
        *sc = _mm_loadu_si128((const __m128i *)(meta + meta_sc(f) + 16 * j));
        *m = f.mins ? _mm_loadu_si128((const __m128i *)(meta + meta_m(f) + 16 * j)) : *sc;
        return;
    }
    const unsigned char *k4 = meta + meta_sc(f); // k4 + 16 k: the rows' byte k
    __m128i six_bits = _mm_set1_epi8(63), low_four = _mm_set1_epi8(15), bits_4_5 = _mm_set1_epi8(0x30);
    if (j < 4) { // scale: low 6 bits of byte j, min: of byte j + 4
        *sc = _mm_and_si128(_mm_loadu_si128((const __m128i *)(k4 + 16 * j)), six_bits);
        *m = _mm_and_si128(_mm_loadu_si128((const __m128i *)(k4 + 16 * (j + 4))), six_bits);
        return;
    }
    // the low and high nibbles of byte j + 4, each topped by the two high
    // bits of byte j - 4 (scale) or j (min): 16-bit shifts, whose bits
    // crossing from the next byte the masks drop
    __m128i both = _mm_loadu_si128((const __m128i *)(k4 + 16 * (j + 4)));
    __m128i sc_top = _mm_srli_epi16(_mm_loadu_si128((const __m128i *)(k4 + 16 * (j - 4))), 2);
    __m128i m_top = _mm_srli_epi16(_mm_loadu_si128((const __m128i *)(k4 + 16 * j)), 2);
    *sc = _mm_or_si128(_mm_and_si128(both, low_four), _mm_and_si128(sc_top, bits_4_5));
    *m = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(both, 4), low_four), _mm_and_si128(m_top, bits_4_5));
}

#endif

#if HAVE_AVX512_VNNI

// Chunk c of a super-block's quants: 16 rows' q as unsigned bytes.
static inline __attribute__((always_inline)) __m512i packed_k_chunk(const unsigned char *quants, int c, PackedLayout f) {
    __m512i q = _mm512_setzero_si512();
    int bits = 0;
    if (f.six) { // the sub-block's three vectors (chunk 4s+3 reads them again, from L1)
        const unsigned char *v = quants + 192 * (c / 4);
        if (c % 4 < 3) return _mm512_and_si512(_mm512_loadu_si512(v + 64 * (c % 4)), _mm512_set1_epi8(63));
        __m512i low = move_bits(_mm512_loadu_si512(v), 6, 0, 0x03), middle = move_bits(_mm512_loadu_si512(v + 64), 6, 2, 0x0C);
        return _mm512_or_si512(_mm512_or_si512(low, middle), move_bits(_mm512_loadu_si512(v + 128), 6, 4, 0x30));
    }
    if (f.three) { // the two sub-blocks' three vectors (chunks 6 and 7 read vector 2 again, from L1)
        const unsigned char *v = quants + 192 * (c / 8);
        int k = c % 8;
        if (k < 6) return move_bits(_mm512_loadu_si512(v + 64 * (k / 2)), 3 * (k % 2), 0, 0x07);
        __m512i low = move_bits(_mm512_loadu_si512(v + 64 * (k - 6)), 6, 0, 0x03);
        return _mm512_or_si512(low, move_bits(_mm512_loadu_si512(v + 128), k, 2, 0x04));
    }
    if (f.planes & 4) {
        q = move_bits(_mm512_loadu_si512(quants + plane_start(f, 4) + 64 * nibble_vector(c)), nibble_high(c) ? 4 : 0, 0, 0x0F);
        bits = 4;
    }
    if (f.planes & 2) {
        __m512i v = _mm512_loadu_si512(quants + plane_start(f, 2) + 64 * (c % 16));
        q = _mm512_or_si512(q, move_bits(v, 2 * (c / 16), bits, 3 << bits));
        bits += 2;
    }
    if (f.planes & 1) {
        __m512i v = _mm512_loadu_si512(quants + plane_start(f, 1) + 64 * (c % 8));
        q = _mm512_or_si512(q, move_bits(v, c / 8, bits, 1 << bits));
    }
    if (f.lookup) q = _mm512_shuffle_epi8(iq4nl_table(), q);
    return q;
}

// Q4_K's and Q5_K's eight sub-blocks' scales and mins at once: packed_k_scales'
// steps on 512 bits, sub-block j's 16 bytes in 128-bit lane j % 4 of sc[j / 4]
// and m[j / 4]. About 26 operations a block (with taking out the lanes)
// where one sub-block at a time took about 64.
static inline __attribute__((always_inline)) void k4_scales_all(__m512i sc[2], __m512i m[2], const unsigned char *k4) {
    __m512i a = _mm512_loadu_si512(k4), b = _mm512_loadu_si512(k4 + 64), c = _mm512_loadu_si512(k4 + 128);
    __m512i six_bits = _mm512_set1_epi8(63), low_four = _mm512_set1_epi8(15), bits_4_5 = _mm512_set1_epi8(0x30);
    sc[0] = _mm512_and_si512(a, six_bits);
    m[0] = _mm512_and_si512(b, six_bits);
    sc[1] = _mm512_or_si512(_mm512_and_si512(c, low_four), _mm512_and_si512(_mm512_srli_epi16(a, 2), bits_4_5));
    m[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(c, 4), low_four), _mm512_and_si512(_mm512_srli_epi16(b, 2), bits_4_5));
}

// 128-bit lane i of v (i a constant once the callers' loops are unrolled).
static inline __attribute__((always_inline)) __m128i lane_128(__m512i v, int i) {
    switch (i) {
    case 0: return _mm512_castsi512_si128(v);
    case 1: return _mm512_extracti32x4_epi32(v, 1);
    case 2: return _mm512_extracti32x4_epi32(v, 2);
    default: return _mm512_extracti32x4_epi32(v, 3);
    }
}

// sumi[t] and summ[t] of one super-block (quants, meta) for the n_t
// positions x[t * x_stride], sub-block by sub-block; far: how far ahead
// to ask for the lines of this block's quants meanwhile, a share with each
// sub-block (prefetch_share); 0: not at all.
static inline __attribute__((always_inline)) void packed_k_sums(__m512i *sumi, __m512i *summ, const unsigned char *quants,
                                                                 const unsigned char *meta, const BlockQ8_K *x, size_t x_stride,
                                                                 int n_t, size_t far, PackedLayout f) {
    int len = QK_K / f.n_subs, n_chunks = len / 4;
    for (int t = 0; t < n_t; t++) sumi[t] = summ[t] = _mm512_setzero_si512();
    __m512i sc_k4[2], m_k4[2];
    if (f.k4) k4_scales_all(sc_k4, m_k4, meta + meta_sc(f));
    #pragma GCC unroll 16
    for (int j = 0; j < f.n_subs; j++) { // unrolled: each chunk's shifts become constants
        if (far) prefetch_share(quants, far, k_lines(f), j, f.n_subs);
        // In generation Q4_K's high nibbles (a sub-block's last four
        // chunks) are multiplied where they lie, as 16 q (at most 240 * 128
        // * 16 a sum, far from overflow), in a sum of their own: a multiple
        // of 16, divided back exactly, one shift where each chunk took one.
        // Prefill shifts each chunk: its tiles' second sums per position cost more.
        int in_place = f.planes == 4 && !f.lookup && n_t == 1;
        __m512i w[8];
        #pragma GCC unroll 8
        for (int i = 0; i < n_chunks; i++) {
            int c = n_chunks * j + i;
            w[i] = in_place && nibble_high(c) ? move_bits(_mm512_loadu_si512(quants + plane_start(f, 4) + 64 * nibble_vector(c)), 4, 4, 0xF0)
                                              : packed_k_chunk(quants, c, f);
        }
        __m128i sc_bytes, m_bytes;
        if (f.k4) {
            sc_bytes = lane_128(sc_k4[j / 4], j % 4);
            m_bytes = lane_128(m_k4[j / 4], j % 4);
        } else {
            packed_k_scales(&sc_bytes, &m_bytes, meta, j, f);
        }
        __m512i sc = _mm512_cvtepi8_epi32(sc_bytes), m = _mm512_cvtepu8_epi32(m_bytes);
        #pragma GCC unroll 8
        for (int t = 0; t < n_t; t++) {
            const BlockQ8_K *xt = x + (size_t)t * x_stride;
            __m512i isum = _mm512_setzero_si512(), high = _mm512_setzero_si512(); // high: in_place's 16 q
            #pragma GCC unroll 8
            for (int i = 0; i < n_chunks; i++) {
                __m512i xi = _mm512_set1_epi32(read_i32((const unsigned char *)xt->qs + len * j + 4 * i));
                if (in_place && nibble_high(n_chunks * j + i)) high = _mm512_dpbusd_epi32(high, w[i], xi);
                else isum = _mm512_dpbusd_epi32(isum, w[i], xi);
            }
            if (in_place) isum = _mm512_add_epi32(isum, _mm512_srai_epi32(high, 4));
            int xsum = xt->bsums[len * j / 16] + (len == 32 ? xt->bsums[len * j / 16 + 1] : 0);
            if (f.offset) isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(f.offset * xsum));
            sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(isum, sc));
            // m_j (a byte) is the low half of each int32 lane, its high half
            // zero, and xsum (at most 32 * 128) the low half of x's lanes: one
            // exact 16-bit multiply-add where a 32-bit multiply takes two steps
            if (f.mins) summ[t] = _mm512_dpwssd_epi32(summ[t], m, _mm512_set1_epi32(xsum));
        }
    }
}

// n_t (1 or PACKED_TOKENS) positions x[t * col_blocks ..] against group
// g's rows: out[t * out_stride + r] for r < n_rows. Inlined with n_t and
// the format constants, so the per-position arrays live in registers.
static inline __attribute__((always_inline)) void packed_k_tile(float *out, size_t out_stride, const Matrix *m, int g,
                                                                 const BlockQ8_K *x, int n_t, int n_rows, PackedLayout f) {
    int n_blocks = col_blocks(m);
    size_t meta_bytes = packed_layout(m->type)->meta_bytes;
    const unsigned char *meta = packed_meta(m, (size_t)g * n_blocks); // this group's, block by block
    __m512 acc[PACKED_TOKENS];
    for (int t = 0; t < n_t; t++) acc[t] = _mm512_setzero_ps();
    const unsigned char *end = packed_quants(m, (size_t)row_groups(m) * n_blocks);
    size_t far = prefetch_distance(m->type); // generation asks for lines this far ahead (0: none)
    for (int b = 0; b < n_blocks; b++, meta += meta_bytes) {
        size_t gb = (size_t)g * n_blocks + b;
        const unsigned char *quants = packed_quants(m, gb);
        __m512i sumi[PACKED_TOKENS], summ[PACKED_TOKENS];
        packed_k_sums(sumi, summ, quants, meta, x + b, (size_t)n_blocks, n_t, n_t == 1 && quants + far < end ? far : 0, f);
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)meta));
        __m512 dmin = f.mins ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(meta + 32))) : d;
        for (int t = 0; t < n_t; t++) {
            __m512 xd = _mm512_set1_ps(x[(size_t)t * n_blocks + b].d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[t]), _mm512_mul_ps(d, xd), acc[t]);
            if (f.mins) acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ[t]), _mm512_mul_ps(dmin, xd), acc[t]);
        }
    }
    __mmask16 rows = (__mmask16)((1u << n_rows) - 1);
    for (int t = 0; t < n_t; t++) _mm512_mask_storeu_ps(out + (size_t)t * out_stride, rows, acc[t]);
}

#if HAVE_AMX
/* Prefill on AMX, Intel's tile unit (Sapphire Rapids on). One instruction
   multiplies a 16 x 64 tile of signed bytes (16 positions' activations) by
   a 64 x 16 tile (16 rows' weights: 16 of our chunks) into 16 x 16 int32
   sums: 16,384 multiply-adds, where one VNNI step does 64. A tile product
   sums over 64 values, across sub-blocks, so the sub-block scales go into
   the weights first: w = sc_j * (q - offset), at most 4096 in magnitude
   (Q6_K: 128 * 32), split into a signed high byte and an unsigned low byte,
       sum of w * x = 256 * (sum of high * x) + (sum of low * x),
   two tile products, both exact. That is the K-quant kernels' sumi; summ
   is a third, x by each row's sub-block mins (m_j at each of j's values).
   The float operations are then the plain twin's, so the outputs are bit
   for bit packed_k_group_plain's. Each (g, b) is decoded once per call and
   serves all its positions. Linux hands out the tile state on request
   (amx_ready); where it does not, the VNNI tiles run. */

#define AMX_TOKENS 16 // positions per tile product: a tile has 16 rows

// What LDTILECFG reads: each tile register's shape.
typedef struct {
    uint8_t palette;        // 1: 8 tiles of up to 16 rows of 64 bytes
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t row_bytes[16];
    uint8_t rows[16];
} TileConfig;
_Static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// The tiles, all 16 rows of 64 bytes (the intrinsics take their numbers as
// literals): 0 and 1 the int32 sums of the high and the low weight bytes,
// 2 16 positions' activations, 3 and 4 the high and low bytes; 5 the sums
// of the mins, 6 the mins.
#define N_TILES 7

// 1 if this process may use the tiles. Linux grants them on request (8 KB
// more state to save per thread); asked once, before the threads start.
static int amx_ready(void) {
    static int state = -1;
    if (state < 0) state = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
    return state;
}

/* One thread at a time uses the tiles; the others meanwhile run the VNNI
   tiles. On our 2-vCPU machines two threads in AMX together did no more
   than one (Q4_K 2048 x 2048, 64 positions: 276 GMAC/s against 280 for one
   thread: the tile unit is shared), while one in AMX beside one in VNNI did
   419 (VNNI alone: 321). */
static atomic_int amx_in_use;

static int amx_take(void) { return !atomic_exchange_explicit(&amx_in_use, 1, memory_order_acquire); }
static void amx_give(void) { atomic_store_explicit(&amx_in_use, 0, memory_order_release); }

// A value per row (16 int32 lanes, -128..255) as a chunk holds its rows:
// row r's low byte in bytes 4r..4r+3.
static inline __m512i spread_rows(__m512i per_row) {
    return _mm512_shuffle_epi8(per_row, _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12)));
}

// Super-block (g, b)'s w = sc_j * (q - offset) as bytes in the chunk layout
// (byte 64 c + 4 r + i: row r's value 4 c + i), high and low. A chunk's
// even and odd bytes are multiplied as int16 words in place (each row's
// scale in both words of its lane), so no byte leaves its position.
static inline __attribute__((always_inline)) void amx_weights(int8_t *high, uint8_t *low, const unsigned char *quants,
                                                               const unsigned char *meta, PackedLayout f) {
    int n_chunks = QK_K / f.n_subs / 4;
    __m512i low_byte = _mm512_set1_epi16(0x00FF);
    #pragma GCC unroll 16
    for (int j = 0; j < f.n_subs; j++) {
        __m128i sc_bytes, m_bytes;
        packed_k_scales(&sc_bytes, &m_bytes, meta, j, f);
        __m512i sc = _mm512_cvtepi8_epi32(sc_bytes);
        sc = _mm512_or_si512(_mm512_and_si512(sc, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(sc, 16));
        #pragma GCC unroll 8
        for (int i = 0; i < n_chunks; i++) {
            int c = n_chunks * j + i;
            __m512i v = _mm512_sub_epi8(packed_k_chunk(quants, c, f), _mm512_set1_epi8((char)f.offset));
            __m512i even = _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8), odd = _mm512_srai_epi16(v, 8); // signed bytes
            __m512i w_even = _mm512_mullo_epi16(even, sc), w_odd = _mm512_mullo_epi16(odd, sc);
            // |w| <= 128 * 32 fits int16: its high byte (signed) and low byte (unsigned) back in place
            _mm512_store_si512(high + 64 * c, _mm512_ternarylogic_epi32(_mm512_srli_epi16(w_even, 8), w_odd, low_byte, 0xF4)); // a | (b & ~c)
            _mm512_store_si512(low + 64 * c, _mm512_ternarylogic_epi32(w_even, _mm512_slli_epi16(w_odd, 8), low_byte, 0xEC)); // (a & c) | b
        }
    }
}

// Super-block (g, b)'s mins in the chunk layout: row r's m_j at every
// value of sub-block j, so that the tile product with x is summ.
static inline __attribute__((always_inline)) void amx_mins(uint8_t *mins, const unsigned char *meta, PackedLayout f) {
    int n_chunks = QK_K / f.n_subs / 4;
    for (int j = 0; j < f.n_subs; j++) {
        __m128i sc_bytes, m_bytes;
        packed_k_scales(&sc_bytes, &m_bytes, meta, j, f);
        __m512i m = spread_rows(_mm512_cvtepu8_epi32(m_bytes));
        for (int i = 0; i < n_chunks; i++) _mm512_store_si512(mins + 64 * (n_chunks * j + i), m);
    }
}

// Position t's Q8_K quants (col_blocks blocks at x) into x_tiles, where the
// tiles read them: the quants of positions 16 p .. 16 p + 15 in block b are
// 16 rows of 256 bytes at (p * col_blocks + b) * 4096. From the Q8_K rows
// themselves (292 bytes apart, the quants 4 bytes in) each 64-byte tile row
// would straddle two cache lines (Q4_K 2048 x 1024, 128 positions, one
// thread: 288-304 -> 338-342 GMAC/s).
static void amx_arrange(int8_t *x_tiles, const BlockQ8_K *x, int t, int n_blocks) {
    for (int b = 0; b < n_blocks; b++)
        memcpy(x_tiles + ((size_t)(t / AMX_TOKENS) * n_blocks + b) * AMX_TOKENS * QK_K + (size_t)(t % AMX_TOKENS) * QK_K, x[b].qs, QK_K);
}

// n (a multiple of AMX_TOKENS, at most BATCH) positions x[t * col_blocks ..], their quants
// also in x_tiles (amx_arrange), against group g's rows: out[t * out_stride
// + r] for r < n_rows.
static inline __attribute__((always_inline)) void packed_k_amx(float *out, size_t out_stride, const Matrix *m, int g,
                                                                const BlockQ8_K *x, const int8_t *x_tiles, int n, int n_rows, PackedLayout f) {
    int n_blocks = col_blocks(m);
    size_t meta_bytes = packed_layout(m->type)->meta_bytes;
    _Alignas(64) int8_t high[QK_K * GROUP_ROWS];
    _Alignas(64) uint8_t low[QK_K * GROUP_ROWS];
    _Alignas(64) uint8_t mins[QK_K * GROUP_ROWS];
    _Alignas(64) int32_t sums[3][AMX_TOKENS][GROUP_ROWS]; // of the high bytes, low bytes, mins
    // The outputs while they add up, position by position: in out itself
    // (positions 4 KB or more apart, the same L1 set) they evicted each other.
    _Alignas(64) float acc[BATCH][GROUP_ROWS];
    TileConfig config = {.palette = 1};
    for (int i = 0; i < N_TILES; i++) { config.row_bytes[i] = 64; config.rows[i] = 16; }
    _tile_loadconfig(&config);
    memset(acc, 0, (size_t)n * sizeof acc[0]);
    const unsigned char *meta = packed_meta(m, (size_t)g * n_blocks); // this group's, block by block
    for (int b = 0; b < n_blocks; b++, meta += meta_bytes) {
        amx_weights(high, low, packed_quants(m, (size_t)g * n_blocks + b), meta, f);
        if (f.mins) amx_mins(mins, meta, f);
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)meta));
        __m512 dmin = f.mins ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(meta + 32))) : d;
        for (int p = 0; p < n; p += AMX_TOKENS) {
            const BlockQ8_K *xp = x + (size_t)p * n_blocks + b;
            const int8_t *xt = x_tiles + ((size_t)(p / AMX_TOKENS) * n_blocks + b) * AMX_TOKENS * QK_K;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(5);
            for (int i = 0; i < QK_K / 64; i++) { // 64 values: 16 chunks
                _tile_loadd(2, xt + 64 * i, QK_K);
                _tile_loadd(3, high + 1024 * i, 64);
                _tile_loadd(4, low + 1024 * i, 64);
                _tile_dpbssd(0, 2, 3);
                _tile_dpbsud(1, 2, 4);
                if (f.mins) {
                    _tile_loadd(6, mins + 1024 * i, 64);
                    _tile_dpbsud(5, 2, 6);
                }
            }
            _tile_stored(0, sums[0], 64);
            _tile_stored(1, sums[1], 64);
            if (f.mins) _tile_stored(5, sums[2], 64);
            for (int t = 0; t < AMX_TOKENS; t++) {
                __m512i sumi = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(sums[0][t]), 8), _mm512_load_si512(sums[1][t]));
                __m512 xd = _mm512_set1_ps(xp[(size_t)t * n_blocks].d);
                __m512 a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(d, xd), _mm512_load_ps(acc[p + t]));
                if (f.mins) a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[2][t])), _mm512_mul_ps(dmin, xd), a);
                _mm512_store_ps(acc[p + t], a);
            }
        }
    }
    _tile_release();
    __mmask16 rows = (__mmask16)((1u << n_rows) - 1);
    for (int t = 0; t < n; t++) _mm512_mask_storeu_ps(out + (size_t)t * out_stride, rows, _mm512_load_ps(acc[t]));
}
#endif

#elif HAVE_AVX2

/* The packed K-quants on AVX2 (maddubs and its int16 limit: see the
   32-value types' AVX2 kernels). Activations are Q8_K, -127..127. Per row
   and sub-block, the products of k_int16_run chunks add up in int16, and
   madd with the row's scale in both halves of its 32-bit lane multiplies
   and widens them at once: sumi collects sc_j * (sum of q * x). The
   offset's part, sc_j * xsum_j, or the mins' m_j * xsum_j, takes one exact
   16-bit madd per two of x's sums over 16 values (bsums, at most 16 * 128),
   and sumi less offset times that is the plain twin's integer. IQ4_XS multiplies its
   table's signed values as |w| times x with w's sign, as Q8_0 and IQ4_NL
   do (at most 2 * 127 * 127 a pair). AVX-VNNI builds take VNNI steps in
   prefill tiles only (packed_k_sums_vnni: each sub-block's sum in int32,
   times the scale with a 32-bit multiply): faster in prefill, but slower
   in generation at fast memory (BENCHMARKS.md). */

// Halves of the rows a prefill tile takes a pass: both (each of x's
// broadcasts serves 16 rows) for the types whose chunks unpack in few
// steps, one for those whose unpacking would spill the tile's sums (Q5_K's
// fifth bit, Q6_K's three vectors, IQ4_XS's table). VNNI tiles take one.
static int k_tile_halves(PackedLayout f) {
    return HAVE_AVX_VNNI || f.lookup || f.six || (f.planes & 4 && f.planes & 1) ? 1 : 2;
}

// Chunks whose products add up in int16: q at most 2^bits - 1 (the planes'
// values add up to the bits), by |x| <= 127, two to an int16.
static int k_int16_run(PackedLayout f) {
    if (f.lookup) return 1;
    int bits = (f.planes & 4) + (f.planes & 2) + (f.planes & 1), most = 32767 / (2 * 127 * ((1 << bits) - 1));
    int n_chunks = QK_K / f.n_subs / 4, run = 1;
    while (run * 2 <= most && run * 2 <= n_chunks) run *= 2;
    return run;
}

// Chunk c of a super-block's quants, rows 8h..8h+7: q as unsigned bytes
// (IQ4_XS: its table's signed values).
static inline __attribute__((always_inline)) __m256i packed_k_chunk8(const unsigned char *quants, int c, int h, PackedLayout f) {
    __m256i q = _mm256_setzero_si256();
    int bits = 0;
    if (f.six) {
        const unsigned char *v = quants + 192 * (c / 4) + 32 * h;
        if (c % 4 < 3) return _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(v + 64 * (c % 4))), _mm256_set1_epi8(63));
        __m256i low = move_bits_256(_mm256_loadu_si256((const __m256i *)v), 6, 0, 0x03);
        __m256i middle = move_bits_256(_mm256_loadu_si256((const __m256i *)(v + 64)), 6, 2, 0x0C);
        return _mm256_or_si256(_mm256_or_si256(low, middle), move_bits_256(_mm256_loadu_si256((const __m256i *)(v + 128)), 6, 4, 0x30));
    }
    if (f.three) {
        const unsigned char *v = quants + 192 * (c / 8) + 32 * h;
        int k = c % 8;
        if (k < 6) return move_bits_256(_mm256_loadu_si256((const __m256i *)(v + 64 * (k / 2))), 3 * (k % 2), 0, 0x07);
        __m256i low = move_bits_256(_mm256_loadu_si256((const __m256i *)(v + 64 * (k - 6))), 6, 0, 0x03);
        return _mm256_or_si256(low, move_bits_256(_mm256_loadu_si256((const __m256i *)(v + 128)), k, 2, 0x04));
    }
    if (f.planes & 4) {
        q = move_bits_256(_mm256_loadu_si256((const __m256i *)(quants + plane_start(f, 4) + 64 * nibble_vector(c) + 32 * h)), nibble_high(c) ? 4 : 0, 0, 0x0F);
        bits = 4;
    }
    if (f.planes & 2) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(quants + plane_start(f, 2) + 64 * (c % 16) + 32 * h));
        q = _mm256_or_si256(q, move_bits_256(v, 2 * (c / 16), bits, 3 << bits));
        bits += 2;
    }
    if (f.planes & 1) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(quants + plane_start(f, 1) + 64 * (c % 8) + 32 * h));
        q = _mm256_or_si256(q, move_bits_256(v, c / 8, bits, 1 << bits));
    }
    if (f.lookup) q = _mm256_shuffle_epi8(iq4nl_signed8(), q);
    return q;
}

// extra[t] += each row's coefficients (sc_j for types with an offset, m_j
// for types with mins; from the bytes of rows 8h..8h+7) times x's sums,
// for the n_t positions x[t * x_stride]. x's sums come in 16s (bsums): one
// exact 16-bit madd takes sums first and first + 1, read as one int32,
// against the rows' coefficients a and b for them: sub-block j's twice
// (32 values), or j-1's and j's (16 values).
static inline __attribute__((always_inline)) void packed_k_add_extra(__m256i *extra, __m128i a, __m128i b, const BlockQ8_K *x,
                                                                      size_t x_stride, int n_t, int first) {
    __m256i pairs = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b)); // row r's a and b at int16 2r and 2r+1
    for (int t = 0; t < n_t; t++) {
        const BlockQ8_K *xt = x + (size_t)t * x_stride;
        extra[t] = _mm256_add_epi32(extra[t], _mm256_madd_epi16(pairs, _mm256_set1_epi32(read_i32((const unsigned char *)(xt->bsums + first)))));
    }
}

// The bytes of half h's rows (8h..8h+7) of the 16 in v, at its bottom.
static inline __m128i half_bytes(__m128i v, int h) { return h ? _mm_srli_si128(v, 8) : v; }

// packed_k_add_extra for sub-block j: its coefficients for the 16 rows
// (sc, m) paired with its own (32 values) or, at odd j, with sub-block j-1's
// read again (16 values; at even j nothing is added).
static inline __attribute__((always_inline)) void packed_k_extra_for(__m256i *extra, __m128i sc, __m128i m, const unsigned char *meta,
                                                                      int h, const BlockQ8_K *x, size_t x_stride, int n_t, int j,
                                                                      PackedLayout f) {
    __m128i b = half_bytes(f.mins ? m : sc, h);
    if (QK_K / f.n_subs == 32) {
        packed_k_add_extra(extra, b, b, x, x_stride, n_t, 2 * j);
        return;
    }
    if (j % 2 == 0) return;
    __m128i sc_before, m_before;
    packed_k_scales(&sc_before, &m_before, meta, j - 1, f);
    packed_k_add_extra(extra, half_bytes(f.mins ? m_before : sc_before, h), b, x, x_stride, n_t, j - 1);
}

#if HAVE_AVX_VNNI
// packed_k_sums for a prefill tile (PACKED_TOKENS positions), one half h,
// with AVX-VNNI: each sub-block's products add up in int32 (vpdpbusd,
// unsigned q by signed x), then times the rows' scales. IQ4_XS takes its
// table plus 128, an offset like the other types'.
static inline __attribute__((always_inline)) void packed_k_sums_vnni(__m256i *sumi, __m256i *summ, const unsigned char *quants,
                                                                      const unsigned char *meta, int h, const BlockQ8_K *x,
                                                                      size_t x_stride, PackedLayout f) {
    int len = QK_K / f.n_subs, n_chunks = len / 4;
    __m256i extra[PACKED_TOKENS]; // sum of sc_j (or m_j) * xsum_j
    for (int t = 0; t < PACKED_TOKENS; t++) sumi[t] = extra[t] = _mm256_setzero_si256();
    #pragma GCC unroll 16
    for (int j = 0; j < f.n_subs; j++) {
        __m128i sc_bytes, m_bytes;
        packed_k_scales(&sc_bytes, &m_bytes, meta, j, f);
        __m256i sub[PACKED_TOKENS];
        for (int t = 0; t < PACKED_TOKENS; t++) sub[t] = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int i = 0; i < n_chunks; i++) {
            __m256i w = packed_k_chunk8(quants, n_chunks * j + i, h, f);
            if (f.lookup) w = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80));
            for (int t = 0; t < PACKED_TOKENS; t++)
                sub[t] = _mm256_dpbusd_avx_epi32(sub[t], w, _mm256_set1_epi32(read_i32((const unsigned char *)x[(size_t)t * x_stride].qs + len * j + 4 * i)));
        }
        __m256i sc = _mm256_cvtepi8_epi32(half_bytes(sc_bytes, h));
        for (int t = 0; t < PACKED_TOKENS; t++) sumi[t] = _mm256_add_epi32(sumi[t], _mm256_mullo_epi32(sub[t], sc));
        if (f.offset || f.mins) packed_k_extra_for(extra, sc_bytes, m_bytes, meta, h, x, x_stride, PACKED_TOKENS, j, f);
    }
    for (int t = 0; t < PACKED_TOKENS; t++) {
        if (f.offset) sumi[t] = _mm256_sub_epi32(sumi[t], _mm256_mullo_epi32(extra[t], _mm256_set1_epi32(f.offset)));
        summ[t] = extra[t];
    }
}
#endif

// sumi[s][t] and summ[s][t] of one super-block (quants, meta), rows
// 8h..8h+7 of half h = h0 + s for the n_h halves from h0, for the n_t
// positions x[t * x_stride]. Each sub-block's scales are unpacked once for
// the halves taken together. far: how far ahead to ask for the lines
// meanwhile (prefetch_share), 0: not at all.
static inline __attribute__((always_inline)) void packed_k_sums(__m256i sumi[2][PACKED_TOKENS], __m256i summ[2][PACKED_TOKENS],
                                                                 const unsigned char *quants, const unsigned char *meta, int h0, int n_h,
                                                                 const BlockQ8_K *x, size_t x_stride, int n_t, size_t far, PackedLayout f) {
    int len = QK_K / f.n_subs, n_chunks = len / 4, run = k_int16_run(f), offset = f.lookup ? 0 : f.offset;
    __m256i part[2][PACKED_TOKENS], extra[2][PACKED_TOKENS]; // int16 runs; sum of sc_j (or m_j) * xsum_j
    for (int s = 0; s < n_h; s++)
        for (int t = 0; t < n_t; t++) sumi[s][t] = extra[s][t] = _mm256_setzero_si256();
    #pragma GCC unroll 16
    for (int j = 0; j < f.n_subs; j++) { // unrolled: each chunk's shifts become constants
        if (far) prefetch_share(quants, far, k_lines(f), j, f.n_subs);
        __m128i sc_bytes, m_bytes; // the 16 rows'
        packed_k_scales(&sc_bytes, &m_bytes, meta, j, f);
        __m256i sc_pairs[2]; // row 8h + r's scale at int16 2r and 2r+1
        for (int s = 0; s < n_h; s++) {
            __m128i sc_half = half_bytes(sc_bytes, h0 + s);
            sc_pairs[s] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sc_half, sc_half));
        }
        #pragma GCC unroll 8
        for (int i = 0; i < n_chunks; i++)
            for (int s = 0; s < n_h; s++) {
                __m256i w = packed_k_chunk8(quants, n_chunks * j + i, h0 + s, f), abs_w = f.lookup ? _mm256_sign_epi8(w, w) : w;
                for (int t = 0; t < n_t; t++) {
                    __m256i xi = _mm256_set1_epi32(read_i32((const unsigned char *)x[(size_t)t * x_stride].qs + len * j + 4 * i));
                    __m256i products = _mm256_maddubs_epi16(abs_w, f.lookup ? _mm256_sign_epi8(xi, w) : xi);
                    part[s][t] = i % run ? add_to_run(part[s][t], products, n_t) : products;
                    if (i % run == run - 1) sumi[s][t] = _mm256_add_epi32(sumi[s][t], _mm256_madd_epi16(part[s][t], sc_pairs[s]));
                }
            }
        for (int s = 0; (offset || f.mins) && s < n_h; s++) packed_k_extra_for(extra[s], sc_bytes, m_bytes, meta, h0 + s, x, x_stride, n_t, j, f);
    }
    for (int s = 0; s < n_h; s++)
        for (int t = 0; t < n_t; t++) {
            if (offset) sumi[s][t] = _mm256_sub_epi32(sumi[s][t], _mm256_mullo_epi32(extra[s][t], _mm256_set1_epi32(offset)));
            summ[s][t] = extra[s][t];
        }
}

// n_t (1 or PACKED_TOKENS) positions x[t * col_blocks ..] against group
// g's rows: out[t * out_stride + r] for r < n_rows. Block by block, so the
// weights are read once, in order (one position: the lines ahead asked
// for a share with each sub-block, as the VNNI kernels do). One position
// takes both halves in one pass; a tile takes k_tile_halves a pass, so
// that its sums stay in registers.
static inline __attribute__((always_inline)) void packed_k_tile(float *out, size_t out_stride, const Matrix *m, int g,
                                                                 const BlockQ8_K *x, int n_t, int n_rows, PackedLayout f) {
    int n_blocks = col_blocks(m), n_h = n_t == 1 ? 2 : k_tile_halves(f);
    size_t meta_bytes = packed_layout(m->type)->meta_bytes;
    const unsigned char *end = packed_quants(m, (size_t)row_groups(m) * n_blocks);
    size_t far = prefetch_distance(m->type); // generation asks for lines this far ahead (0: none)
    float rows[PACKED_TOKENS][GROUP_ROWS];
    for (int h0 = 0; h0 < 2; h0 += n_h) {
        const unsigned char *meta = packed_meta(m, (size_t)g * n_blocks); // this group's, block by block
        __m256 acc[2][PACKED_TOKENS]; // [s][t]: half h0 + s
        for (int s = 0; s < n_h; s++)
            for (int t = 0; t < n_t; t++) acc[s][t] = _mm256_setzero_ps();
        for (int b = 0; b < n_blocks; b++, meta += meta_bytes) {
            const unsigned char *quants = packed_quants(m, (size_t)g * n_blocks + b);
            __m256i sumi[2][PACKED_TOKENS], summ[2][PACKED_TOKENS];
#if HAVE_AVX_VNNI
            if (n_t > 1) packed_k_sums_vnni(sumi[0], summ[0], quants, meta, h0, x + b, (size_t)n_blocks, f);
            else
#endif
            packed_k_sums(sumi, summ, quants, meta, h0, n_h, x + b, (size_t)n_blocks, n_t, n_t == 1 && quants + far < end ? far : 0, f);
            for (int s = 0; s < n_h; s++) {
                __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(meta + 16 * (h0 + s))));
                __m256 dmin = f.mins ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(meta + 32 + 16 * (h0 + s)))) : d;
                for (int t = 0; t < n_t; t++) {
                    __m256 xd = _mm256_set1_ps(x[(size_t)t * n_blocks + b].d);
                    acc[s][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[s][t]), _mm256_mul_ps(d, xd), acc[s][t]);
                    if (f.mins) acc[s][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(summ[s][t]), _mm256_mul_ps(dmin, xd), acc[s][t]);
                }
            }
        }
        for (int s = 0; s < n_h; s++)
            for (int t = 0; t < n_t; t++) _mm256_storeu_ps(rows[t] + 8 * (h0 + s), acc[s][t]);
    }
    for (int t = 0; t < n_t; t++) memcpy(out + (size_t)t * out_stride, rows[t], (size_t)n_rows * sizeof(float));
}
#endif

#if HAVE_AVX2
// Any number of positions for one format (a constant once inlined): tiles
// of AMX_TOKENS on AMX (where x_tiles holds their quants), then of
// PACKED_TOKENS, then one at a time.
static inline __attribute__((always_inline)) void packed_k_group_as(float *out, size_t out_stride, const Matrix *m, int g,
                                                                     const BlockQ8_K *x, const int8_t *x_tiles, int n, int n_rows, PackedLayout f) {
    int t = 0;
#if HAVE_AMX
    if (x_tiles && n >= AMX_TOKENS && amx_ready() && amx_take()) {
        t = n / AMX_TOKENS * AMX_TOKENS;
        packed_k_amx(out, out_stride, m, g, x, x_tiles, t, n_rows, f);
        amx_give();
    }
#else
    (void)x_tiles;
#endif
    for (; t + PACKED_TOKENS <= n; t += PACKED_TOKENS)
        packed_k_tile(out + (size_t)t * out_stride, out_stride, m, g, x + (size_t)t * col_blocks(m), PACKED_TOKENS, n_rows, f);
    for (; t < n; t++)
        packed_k_tile(out + (size_t)t * out_stride, out_stride, m, g, x + (size_t)t * col_blocks(m), 1, n_rows, f);
}

// packed_k_group_plain's SIMD twin: one compiled kernel per type. x_tiles:
// NULL, or x's first n / AMX_TOKENS * AMX_TOKENS positions as amx_arrange
// puts them, for the AMX tiles.
static void packed_k_group(float *out, size_t out_stride, const Matrix *m, int g, const BlockQ8_K *x, const int8_t *x_tiles,
                           int n, int n_rows) {
    switch (m->type) {
    case TYPE_Q2_K: packed_k_group_as(out, out_stride, m, g, x, x_tiles, n, n_rows, *packed_layout(TYPE_Q2_K)); break;
    case TYPE_Q3_K: packed_k_group_as(out, out_stride, m, g, x, x_tiles, n, n_rows, *packed_layout(TYPE_Q3_K)); break;
    case TYPE_Q4_K: packed_k_group_as(out, out_stride, m, g, x, x_tiles, n, n_rows, *packed_layout(TYPE_Q4_K)); break;
    case TYPE_Q5_K: packed_k_group_as(out, out_stride, m, g, x, x_tiles, n, n_rows, *packed_layout(TYPE_Q5_K)); break;
    case TYPE_Q6_K: packed_k_group_as(out, out_stride, m, g, x, x_tiles, n, n_rows, *packed_layout(TYPE_Q6_K)); break;
    case TYPE_IQ4_XS: packed_k_group_as(out, out_stride, m, g, x, x_tiles, n, n_rows, *packed_layout(TYPE_IQ4_XS)); break;
    default: no_packed_layout(m->type);
    }
}

#endif

// The threads a parallel region gets.
static int threads_available(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* ----------------------------------------------------------------------------
   Threads on a busy machine. OpenMP's threads meet at the end of every
   product, so when another program holds a core, the thread of ours that
   waits for it holds up every meeting: two threads then run slower than
   one (a third slower on our 2-core machines, a thousand times on some).
   Unless the count is fixed (--threads, OMP_NUM_THREADS), run.c starts on
   the cores free at the start (cores_free) and each kind of step
   (generation's tokens, prefill's blocks) times itself, moving between
   fewer threads and all of them:
   - the steps keep a recent time a position for each count, and move to
     the other count as soon as theirs is a seventh slower than its;
   - now and then three steps run on the other count to time it again (one
     if it is half as slow again): 0.5 s after the start, then less often
     each time it loses (doubling up to 8 s), and at once when a step takes
     three times the recent ones (another program took a core). A try of
     more threads waits while cores_free still sees the cores taken. On an
     idle machine the tries cost a step on fewer threads every 8 s.
   The count changes no result: every row of a product and every head of
   attention is computed by one thread, whichever. */

enum { TRY_FIRST_MS = 500, TRY_LAST_MS = 8000, TRY_STEPS = 3 };

// Cores that no other program runs on now: Linux's count of runnable tasks
// (/proc/loadavg), the least of `looks` looks 1 ms apart, less this
// process's one running thread (so: called where our other threads are not
// running). Elsewhere, every core.
static int cores_free(int cores, int looks) {
    int least = INT_MAX;
#if HAVE_LINUX
    for (int i = 0; i < looks; i++) {
        FILE *f = fopen("/proc/loadavg", "r");
        int running = 0;
        if (f && fscanf(f, "%*f %*f %*f %d/", &running) == 1 && running >= 1 && running < least) least = running;
        if (f) fclose(f);
        if (i + 1 < looks) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
#else
    (void)looks;
#endif
    if (least == INT_MAX) return cores;
    return cores - (least - 1) > 1 ? cores - (least - 1) : 1;
}

// Both kinds of step move between `most` threads and fewer (the free cores
// when fewer than most are, else one), starting on fewer if the machine is
// busy now.
static void threads_adapt(Transformer *t, int most, int free_cores) {
    int busy = free_cores < most;
    double first = TRY_FIRST_MS / 1000.0;
    for (int k = 0; k < 2; k++)
        t->threads[k] = (ThreadChoice){.adapt = most > 1, .count = {busy ? free_cores : 1, most}, .now = !busy,
                                       .wait = first, .next_try = now_seconds() + first};
}

static void set_thread_count(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

// The count for a step starting at time `now`; free_cores is cores_free
// (the tests give another).
static int threads_next(ThreadChoice *tc, double now, int (*free_cores)(int cores, int looks)) {
    if (!tc->trying && tc->per[tc->now] > 0 && now >= tc->next_try) {
        int more = tc->count[!tc->now] > tc->count[tc->now];
        if (more && free_cores(tc->count[1], 1) < tc->count[!tc->now]) { // still busy: not worth a try
            tc->wait = 2 * tc->wait < TRY_LAST_MS / 1000.0 ? 2 * tc->wait : TRY_LAST_MS / 1000.0;
            tc->next_try = now + tc->wait;
        } else {
            tc->trying = TRY_STEPS;
            tc->try_sum = 0;
        }
    }
    return tc->count[tc->trying ? !tc->now : tc->now];
}

static void threads_begin(ThreadChoice *tc) {
    if (!tc->adapt) return;
    tc->started = now_seconds();
    set_thread_count(threads_next(tc, tc->started, cores_free));
}

// The choice after a step that took `per` seconds a position, at time `now`
// (apart from threads_end so that the tests can give it any times).
static void threads_record(ThreadChoice *tc, double per, double now) {
    double first = TRY_FIRST_MS / 1000.0, last = TRY_LAST_MS / 1000.0;
    int here = tc->now, other = !here;
    if (tc->trying) {
        tc->try_sum += per;
        int lost = per > 1.5 * tc->per[here]; // one step is enough to tell
        if (--tc->trying > 0 && !lost) return;
        tc->per[other] = lost ? per : tc->try_sum / TRY_STEPS;
        tc->trying = 0;
        int better = tc->per[other] < 0.9 * tc->per[here];
        tc->wait = better ? first : (2 * tc->wait < last ? 2 * tc->wait : last);
        tc->next_try = now + tc->wait;
        if (better) tc->now = other;
        return;
    }
    if (tc->per[here] > 0 && per > 3 * tc->per[here]) tc->next_try = now; // a core was taken: time the other now
    tc->per[here] = tc->per[here] > 0 ? 0.75 * tc->per[here] + 0.25 * per : per;
    if (tc->per[other] > 0 && tc->per[here] > 1.15 * tc->per[other]) tc->now = other;
}

static void threads_end(ThreadChoice *tc, int positions) {
    if (!tc->adapt) return;
    double now = now_seconds();
    threads_record(tc, (now - tc->started) / positions, now);
}

// Row group gi of the matrices ms, numbered across them in order, against n
// positions of x quantized: Q8_K rows xk for the K-quants, else ActBlocks xq
// (x_tiles: the AMX copy of xk, or NULL).
static void product_group(float *const *outs, const Matrix *const *ms, int gi, const ActBlock *xq, const BlockQ8_K *xk,
                          const int8_t *x_tiles, int n) {
    int i = 0, g = gi;
    while (g >= row_groups(ms[i])) g -= row_groups(ms[i++]);
    const Matrix *m = ms[i];
    int n_blocks = col_blocks(m);
    int n_rows = m->rows - g * GROUP_ROWS < GROUP_ROWS ? m->rows - g * GROUP_ROWS : GROUP_ROWS;
    float *o = outs[i] + (size_t)g * GROUP_ROWS;
    if (type_traits[m->type].act_type == TYPE_Q8_K) { // all positions at once (the AMX tiles take 16)
#if HAVE_AVX2
        if (!use_plain_kernels) { packed_k_group(o, (size_t)m->rows, m, g, xk, x_tiles, n, n_rows); return; }
#endif
        (void)x_tiles;
        packed_k_group_plain(o, (size_t)m->rows, m, g, xk, n, n_rows);
        return;
    }
    for (int t = 0; t < n; t += PACKED_TOKENS) {
        int n_t = n - t < PACKED_TOKENS ? n - t : PACKED_TOKENS;
#if HAVE_AVX2
        if (!use_plain_kernels) { packed_group(o + (size_t)t * m->rows, (size_t)m->rows, m, g, xq + (size_t)t * n_blocks, n_t, n_rows); continue; }
#endif
        packed_group_plain(o + (size_t)t * m->rows, (size_t)m->rows, m, g, xq + (size_t)t * n_blocks, n_t, n_rows);
    }
}

/* Generation's split of the row groups. Thread i starts on the i-th of nt
   equal runs of consecutive groups: one long stream of weights for the
   prefetchers to follow. A thread whose run is done moves the back half of
   the longest run left into its own, and goes on there: on a shared machine
   two threads do not run equally fast, and this way neither idles while
   more than a group is left, without cutting the streams short (faster
   than OpenMP's dynamic schedule: BENCHMARKS.md).
   A run is one word, next << 32 | end, so that its owner taking a group
   from the front and a thief cutting off the back change it with one
   compare-and-swap. One cache line each, so that owners do not slow each
   other. MAX_RUNS: more threads than that share out the groups as prefill
   does. */
#define MAX_RUNS 64

struct WorkRun {
    _Atomic uint64_t groups; // next << 32 | end: the groups next..end-1 are left
    char pad[64 - sizeof(uint64_t)];
};
_Static_assert(sizeof(WorkRun) == 64, "a run fills one cache line");

static uint64_t run_word(uint32_t next, uint32_t end) { return (uint64_t)next << 32 | end; }
static uint32_t run_left(uint64_t word) {
    uint32_t next = (uint32_t)(word >> 32), end = (uint32_t)word;
    return end > next ? end - next : 0;
}

// Run i: the i-th of nt equal parts of the groups 0..total-1.
static void start_runs(WorkRun *runs, int nt, int total) {
    for (int i = 0; i < nt; i++) {
        uint32_t next = (uint32_t)((int64_t)total * i / nt), end = (uint32_t)((int64_t)total * (i + 1) / nt);
        atomic_store_explicit(&runs[i].groups, run_word(next, end), memory_order_relaxed);
    }
}

// Takes a quarter of what is left of run r (at least a group) from its
// front: the first group taken, and in *count how many; 0 when r is empty.
// Not a group at a time: a compare-and-swap is a locked instruction (a full
// fence on x86), and one per group showed in generation's profile.
static int take_groups(WorkRun *r, int *first) {
    uint64_t word = atomic_load_explicit(&r->groups, memory_order_relaxed);
    while (run_left(word) > 0) {
        uint32_t count = run_left(word) / 4 > 0 ? run_left(word) / 4 : 1;
        if (atomic_compare_exchange_weak_explicit(&r->groups, &word, word + ((uint64_t)count << 32), memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *first = (int)(word >> 32);
            return (int)count;
        }
    }
    return 0;
}

// Moves the back half of the longest of the nt runs (all of it, if one
// group) into runs[me], which is empty. 0 when every run is empty.
static int steal_groups(WorkRun *runs, int nt, int me) {
    for (;;) {
        int victim = -1;
        uint64_t word = 0;
        for (int i = 0; i < nt; i++) {
            uint64_t w = atomic_load_explicit(&runs[i].groups, memory_order_relaxed);
            if (run_left(w) > run_left(word)) victim = i, word = w;
        }
        if (victim < 0) return 0;
        uint32_t next = (uint32_t)(word >> 32), end = (uint32_t)word, middle = next + (end - next) / 2;
        if (atomic_compare_exchange_strong_explicit(&runs[victim].groups, &word, run_word(next, middle), memory_order_relaxed,
                                                    memory_order_relaxed)) {
            atomic_store_explicit(&runs[me].groups, run_word(middle, end), memory_order_relaxed);
            return 1;
        }
    }
}

// matmul_packed for one position: x is quantized once, before the threads
// start, and each thread works through its run of the total row groups.
// Not once by each thread: two vCPUs may sit far apart, and the second
// thread would first read all of x from the first one's cache.
static void matmul_packed_one(float *const *outs, const Matrix *const *ms, const float *x, int total, MatmulScratch *mm) {
    int cols = ms[0]->cols, type = ms[0]->type, nt = threads_available();
    ActBlock *xq = mm->act_blocks;
    BlockQ8_K *xk = (BlockQ8_K *)mm->act;
    if (type_traits[type].act_type == TYPE_Q8_K) quantize_padded(xk, x, cols, TYPE_Q8_K);
    else quantize_act(xq, x, cols, type);
    start_runs(mm->runs, nt, total); // before the threads start: a thread may steal from one not yet started
    #pragma omp parallel
    {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        do {
            for (int first, taken; (taken = take_groups(&mm->runs[me], &first)) > 0;)
                for (int gi = first; gi < first + taken; gi++) product_group(outs, ms, gi, xq, xk, NULL, 1);
        } while (steal_groups(mm->runs, nt, me));
    }
}

// outs[i] (n, ms[i].rows) = x (n, cols) @ ms[i]^T for count packed matrices
// of one width that share the input x, quantized into mm as their types
// take it (same_packed_x): ActBlocks (one 32-value type) or Q8_K rows
// (K-quants). One parallel region: the threads quantize the positions once,
// then take the row groups of all the matrices as they finish, so each
// weight is read once and no thread idles while work is left.
static void matmul_packed(float *const *outs, const Matrix *const *ms, int count, const float *x, int n, MatmulScratch *mm) {
    int cols = ms[0]->cols, type = ms[0]->type, n_blocks = col_blocks(ms[0]), total = 0;
    int k_quant = type_traits[type].act_type == TYPE_Q8_K; // Q4_K, Q6_K: x as Q8_K rows in mm->act
    ActBlock *xq = mm->act_blocks;
    BlockQ8_K *xk = (BlockQ8_K *)mm->act;
    for (int i = 0; i < count; i++) total += row_groups(ms[i]);
    if (n == 1 && threads_available() <= MAX_RUNS) {
        matmul_packed_one(outs, ms, x, total, mm);
        return;
    }
    // Prefill: a group a turn. A few positions (the end of a prompt): about
    // two turns per thread, long runs of consecutive groups that the
    // hardware prefetchers follow.
    int turn = n >= PACKED_TOKENS ? 1 : (total + 2 * threads_available() - 1) / (2 * threads_available());
    (void)turn; // read only by the OpenMP pragma
    int8_t *x_tiles = NULL; // the quants again for the AMX tiles
#if HAVE_AMX
    if (k_quant && n >= AMX_TOKENS && amx_ready() && !use_plain_kernels) x_tiles = mm->amx_x; // asked here, before the threads start
#endif
    #pragma omp parallel
    {
        int t, gi;
        #pragma omp for schedule(static)
        for (t = 0; t < n; t++) {
            if (k_quant) quantize_padded(xk + (size_t)t * n_blocks, x + (size_t)t * cols, cols, TYPE_Q8_K);
            else quantize_act(xq + (size_t)t * n_blocks, x + (size_t)t * cols, cols, type);
#if HAVE_AMX
            if (x_tiles && t < n / AMX_TOKENS * AMX_TOKENS) amx_arrange(x_tiles, xk + (size_t)t * n_blocks, t, n_blocks);
#endif
        }
        #pragma omp for schedule(dynamic, turn)
        for (gi = 0; gi < total; gi++) product_group(outs, ms, gi, xq, xk, x_tiles, n);
    }
}

/* ----------------------------------------------------------------------------
   The matrix-product dispatch, whole. Every product of the model goes
   through matmul_shared (or matmul, its form for one matrix): outs[i]
   (n, rows) = x (n, cols) @ ms[i]^T for n positions.
   1. x holding a NaN or infinity makes every output NaN and nothing else
      runs: there is nothing to round such a value to, and the loops stop on
      logits that are not finite. This is the only place that checks.
   2. Each matrix's kernel was chosen once, at load (choose_kernels), from
      the weight types' table and this build's capabilities:
        KERNEL_PACKED  a type with a packed layout, in builds with the
                       packed integer kernels (packed_simd: AVX2 or
                       AVX-512 VNNI, every quantized type): repacked at
                       load; matrices that share x (wq wk wv; w1 w3) run in
                       one parallel region with x quantized once
        KERNEL_F32     F32: dot_f32 per row for one position, register
                       tiles (matmat_f32) for a block of positions
        KERNEL_ROWS    any type: x converted once to the type's act_type,
                       then the type's dot for each row and position
   3. use_plain_kernels (the benchmark's "before", and the tests) sends every
      product to the plain twins of the same kernels. */

// out (n, m.rows) = x (n, m.cols) @ m^T with the table's dot products: x in
// m's activation format (mm.act), rows split across the threads (in
// prefill four at a time where the type has dot4), each read once against
// every position while it is in L1.
static void matmul_rows(float *out, const float *x, int n, const Matrix *m, MatmulScratch *mm) {
    const TypeTraits *tt = &type_traits[m->type];
    int cols = padded_cols(m->type, m->cols);
    size_t row_bytes = type_row_bytes(m->type, m->cols), act_bytes = type_row_bytes(tt->act_type, m->cols);
    const unsigned char *act = (const unsigned char *)x;
    if (tt->act_type != TYPE_F32) {
        int t;
        #pragma omp parallel for private(t) schedule(static) if (n > 1)
        for (t = 0; t < n; t++) quantize_padded(mm->act + (size_t)t * act_bytes, x + (size_t)t * m->cols, m->cols, tt->act_type);
        act = mm->act;
    }
    float (*dot)(const void *, const void *, int) = use_plain_kernels ? tt->dot_plain : tt->dot;
    // Prefill takes rows four at a time where the type can (each activation
    // block is read once for four rows); generation one at a time: four rows
    // read side by side, a block of each in turn, lose the hardware
    // prefetchers' streams
    int step = n > 1 && tt->dot4 && !use_plain_kernels ? 4 : 1, units = (m->rows + step - 1) / step, u;
    #pragma omp parallel for private(u) schedule(static)
    for (u = 0; u < units; u++) {
        int first = u * step, count = m->rows - first < step ? m->rows - first : step;
        const unsigned char *rows = (const unsigned char *)m->data + (size_t)first * row_bytes;
        for (int t = 0; t < n; t++) {
            float *o = out + (size_t)t * m->rows + first;
            if (count == 4) tt->dot4(o, rows, row_bytes, act + (size_t)t * act_bytes, cols);
            else
                for (int r = 0; r < count; r++) o[r] = dot(rows + (size_t)r * row_bytes, act + (size_t)t * act_bytes, cols);
        }
    }
}

// Whether packed matrices of types a and b take x quantized the same way,
// so that one region serves both: one type, or two K-quants (x as Q8_K
// rows; a Q4_K_M layer's Q4_K wq and wk with its Q6_K wv).
static int same_packed_x(int a, int b) {
    return a == b || (type_traits[a].act_type == TYPE_Q8_K && type_traits[b].act_type == TYPE_Q8_K);
}

static void matmul_shared(float *const *outs, const Matrix *const *ms, int count, const float *x, int n,
                          MatmulScratch *mm) {
    if (!all_finite(x, (size_t)n * ms[0]->cols)) {
        for (int i = 0; i < count; i++)
            for (size_t j = 0; j < (size_t)n * ms[i]->rows; j++) outs[i][j] = NAN;
        return;
    }
    int together = 1;
    for (int i = 0; i < count; i++) together &= ms[i]->kernel == KERNEL_PACKED && same_packed_x(ms[i]->type, ms[0]->type);
    if (together) { matmul_packed(outs, ms, count, x, n, mm); return; }
    for (int i = 0; i < count; i++) {
        const Matrix *m = ms[i];
        if (m->kernel == KERNEL_PACKED) matmul_packed(&outs[i], &ms[i], 1, x, n, mm);
        else if (m->kernel == KERNEL_F32 && n > 1 && !use_plain_kernels) matmat_f32(outs[i], x, n, m->data, m->rows, m->cols, mm->tiles);
        else matmul_rows(outs[i], x, n, m, mm);
    }
}

static void matmul(float *out, const float *x, int n, const Matrix *m, MatmulScratch *mm) {
    matmul_shared(&out, &m, 1, x, n, mm);
}

// Bytes of x in the widest activation format, for up to BATCH positions.
static size_t act_bytes_max(int max_cols) {
    size_t most = 0;
    for (int t = 0; t < TYPE_COUNT; t++)
        if (type_supported(t) && type_row_bytes(type_traits[t].act_type, max_cols) > most)
            most = type_row_bytes(type_traits[t].act_type, max_cols);
    return most;
}

static int alloc_matmul_scratch(MatmulScratch *mm, int max_cols) {
    mm->tiles = calloc((size_t)BATCH * max_cols, sizeof(float));
    mm->act_blocks = calloc((size_t)BATCH * ((max_cols + QK - 1) / QK), sizeof(ActBlock));
    mm->act = calloc((size_t)BATCH, act_bytes_max(max_cols));
    mm->runs = aligned_alloc(64, MAX_RUNS * sizeof(WorkRun));
#if HAVE_AMX
    mm->amx_x = aligned_alloc(64, (size_t)BATCH * padded_cols(TYPE_Q8_K, max_cols)); // a multiple of 64
    if (!mm->amx_x) return -1;
#endif
    return mm->tiles && mm->act_blocks && mm->act && mm->runs ? 0 : -1;
}

static void free_matmul_scratch(MatmulScratch *mm) {
    free(mm->tiles);
    free(mm->act_blocks);
    free(mm->act);
    free(mm->amx_x);
    free(mm->runs);
    memset(mm, 0, sizeof *mm);
}

// Whether this build has a SIMD kernel for type's packed layout (AVX2 or
// AVX-512 VNNI: every packed type).
static int packed_simd(int type) { return HAVE_AVX2 && type_traits[type].packed != NULL; }

static int choose_kernel(int type) {
    if (packed_simd(type)) return KERNEL_PACKED;
    return type == TYPE_F32 ? KERNEL_F32 : KERNEL_ROWS;
}

// The model's matrices: each layer's (layer_matrices), then the classifier.
static Matrix *model_matrix(TransformerWeights *w, int n_layers, int i) {
    if (i == LAYER_MATRICES * n_layers) return &w->wcls;
    return layer_matrix(&w->layers[i / LAYER_MATRICES], i % LAYER_MATRICES);
}

/* A long load shows itself as llama.cpp's does: once it has taken a second,
   a line of dots grows to 40 as the work gets done, on a terminal only (a
   log or a pipe stays clean). */
typedef struct {
    FILE *out;    // stderr
    int tty;      // out is a terminal
    double start; // seconds
    int shown, dots;
} Progress;

static Progress progress_start(FILE *out) {
    return (Progress){out, isatty(fileno(out)), now_seconds(), 0, 0};
}

static void progress_show(Progress *p, const char *what, size_t done, size_t total) {
    if (!p->tty || total == 0 || (!p->shown && now_seconds() - p->start < 1.0)) return;
    if (!p->shown) fprintf(p->out, "run: %s ", what);
    p->shown = 1;
    for (int want = (int)(40.0 * (double)done / (double)total); p->dots < want; p->dots++) fputc('.', p->out);
    if (done >= total) fputs(" done\n", p->out);
    fflush(p->out);
}

// The matrices choose_kernels sets up: the model's, then every expert's.
static int kernel_matrix_count(const Transformer *t) {
    return LAYER_MATRICES * t->config.n_layers + 1 + t->config.n_layers * t->config.n_experts * 3;
}
static Matrix *kernel_matrix(Transformer *t, int i) {
    int n_model = LAYER_MATRICES * t->config.n_layers + 1;
    return i < n_model ? model_matrix(&t->weights, t->config.n_layers, i) : &t->weights.experts[i - n_model];
}

// Gives back the mapped file's pages from the 2 MB folio that holds start
// to the one that holds end (through_end), or to the last folio boundary
// before end (the rest is still to be read): Linux maps a file's large
// folio whole when any byte of it is read.
static void give_back_folios(const Transformer *t, uintptr_t start, uintptr_t end, int through_end) {
    uintptr_t folio = (uintptr_t)2 << 20, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t first = (uintptr_t)t->map, last = ((uintptr_t)t->map + t->map_size + page - 1) / page * page;
    start = start / folio * folio;
    end = through_end ? (end + folio - 1) / folio * folio : end / folio * folio;
    start = start > first ? start : first;
    end = end < last ? end : last;
    if (end > start) give_back_pages((void *)start, end - start);
}

#if HAVE_LINUX
static size_t bytes_of(const Matrix *m) { return (size_t)m->rows * type_row_bytes(m->type, m->cols); }

// Bytes [start, end) of the mapped file, and whether they are packed.
typedef struct { uintptr_t start, end; int packed; } MapRange;

static int range_order(const void *a, const void *b) {
    uintptr_t x = ((const MapRange *)a)->start, y = ((const MapRange *)b)->start;
    return x < y ? -1 : x > y;
}

// Pages [p, p + bytes) of the mapped file become an anonymous copy at the
// same addresses, read-only as before.
static int copy_to_anonymous(unsigned char *p, size_t bytes) {
    size_t chunk = (size_t)2 << 20;
    unsigned char *copy = malloc(bytes < chunk ? bytes : chunk);
    if (!copy) return -1;
    for (size_t at = 0; at < bytes; at += chunk) {
        size_t n = bytes - at < chunk ? bytes - at : chunk;
        memcpy(copy, p + at, n);
        if (mmap(p + at, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
            free(copy);
            return -1;
        }
        memcpy(p + at, copy, n);
        mprotect(p + at, n, PROT_READ);
    }
    free(copy);
    return 0;
}

// Linux maps a whole large folio of a file (up to 2 MB) on a read fault, so
// reading a norm that sits between two packed matrices would bring back
// pages of both that packing gave back: for a small model, a third of its
// size again. So after packing, everything the forward still reads from
// the file (the header, vectors, matrices without a packed copy) becomes an
// anonymous copy at the same addresses, and the packed originals' pages are
// given back once more; the forward then never touches their folios. (An
// untied embedding stays mapped: its rows are read as the prompt needs
// them.)
static int keep_reads_apart(Transformer *t, int n_matrices) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 0, kept = 0;
    MapRange *ranges = malloc((size_t)(n_matrices + 1) * sizeof(MapRange));
    if (!ranges) return -1;
    for (int i = 0; i < n_matrices; i++) {
        Matrix *m = kernel_matrix(t, i);
        if (m->packed) ranges[n++] = (MapRange){(uintptr_t)m->data, (uintptr_t)m->data + bytes_of(m), 1};
    }
    const Matrix *embedding = &t->weights.token_embedding;
    if (!t->config.shared_classifier)
        ranges[n++] = (MapRange){(uintptr_t)embedding->data, (uintptr_t)embedding->data + bytes_of(embedding), 0};
    qsort(ranges, n, sizeof(MapRange), range_order);
    // ranges of one kind less than 64 bytes apart are one (GGUF pads tensors
    // to 32 bytes; the experts' slabs of one tensor touch), cut to whole pages
    for (size_t i = 0; i < n;) {
        MapRange r = ranges[i];
        for (i++; i < n && ranges[i].packed == r.packed && ranges[i].start < r.end + 64; i++)
            r.end = ranges[i].end > r.end ? ranges[i].end : r.end;
        r.start = (r.start + page - 1) / page * page, r.end = r.end / page * page;
        if (r.start < r.end) ranges[kept++] = r;
    }
    // every copy first (reading the pages between maps the folios around them), then every give-back
    uintptr_t from = (uintptr_t)t->map, end = ((uintptr_t)t->map + t->map_size + page - 1) / page * page;
    int err = 0;
    for (size_t i = 0; i <= kept && !err; i++) {
        uintptr_t to = i < kept ? ranges[i].start : end;
        if (to > from) err = copy_to_anonymous((unsigned char *)from, to - from);
        if (i < kept && ranges[i].end > from) from = ranges[i].end;
    }
    for (size_t i = 0; i < kept && !err; i++)
        if (ranges[i].packed) give_back_pages((void *)ranges[i].start, ranges[i].end - ranges[i].start);
    free(ranges);
    return err;
}
#else
static int keep_reads_apart(Transformer *t, int n_matrices) { (void)t, (void)n_matrices; return 0; }
#endif

// Brings in the pages of fresh memory, every thread its share at once: the
// kernel clears each page (a huge page: 2 MB) at its first touch, and the
// threads packing a small matrix would wait on one page's clearing.
static void touch_pages(unsigned char *p, size_t bytes) {
    long page = sysconf(_SC_PAGESIZE), n = (long)(bytes / (size_t)page), i;
    #pragma omp parallel for schedule(static)
    for (i = 0; i < n; i++) p[i * page] = 0;
}

// Sets every matrix's kernel, and packs those whose kernel reads the
// packed layout (pack_groups) into one allocation; the copy replaces the
// mapped original in memory.
static int choose_kernels(Transformer *t, const char *path) {
    int n_matrices = kernel_matrix_count(t);
    size_t total = 0;
    for (int i = 0; i < n_matrices; i++) {
        Matrix *m = kernel_matrix(t, i);
        m->kernel = choose_kernel(m->type);
        if (m->kernel == KERNEL_PACKED) total += (packed_size(m) + 63) / 64 * 64;
    }
    if (total == 0) return 0;
#if HAVE_AVX2
    choose_prefetch();
#endif
    size_t huge = (size_t)2 << 20; // on 2 MB boundaries, for huge pages
    if (posix_memalign((void **)&t->packed, huge, total) != 0) {
        t->packed = NULL;
        return fail("%s: out of memory for the packed weights (%zu bytes)", path, total);
    }
    ask_huge_pages(t->packed, total); // a hint: without it, 4 KB pages
    touch_pages(t->packed, total);
    size_t at = 0;
    Progress progress = progress_start(stderr);
    char what[600];
    snprintf(what, sizeof what, "loading %s", path);
    for (int i = 0; i < n_matrices; i++) {
        Matrix *m = kernel_matrix(t, i);
        if (m->kernel != KERNEL_PACKED) continue;
        m->packed = t->packed + at;
        // in slices of about 8 MB, each slice's original pages given back
        // once it is packed: the model is never in memory twice
        size_t row_bytes = type_row_bytes(m->type, m->cols);
        uintptr_t rows = (uintptr_t)m->data;
        int n_groups = row_groups(m), step = (int)(((size_t)8 << 20) / (GROUP_ROWS * row_bytes) + 1);
        for (int g = 0; g < n_groups; g += step) {
            int g_end = g + step < n_groups ? g + step : n_groups, row_end = g_end * GROUP_ROWS < m->rows ? g_end * GROUP_ROWS : m->rows;
            pack_groups(t->packed + at, m, g, g_end);
            give_back_folios(t, rows + (size_t)g * GROUP_ROWS * row_bytes, rows + (size_t)row_end * row_bytes, g_end == n_groups);
            progress_show(&progress, what, at + packed_size(m) / n_groups * g_end, total);
        }
        at += (packed_size(m) + 63) / 64 * 64;
    }
    // a tied embedding's rows are looked up in the classifier's packed copy
    if (t->config.shared_classifier) t->weights.token_embedding.packed = t->weights.wcls.packed;
    if (keep_reads_apart(t, n_matrices) != 0) return fail("%s: out of memory while mapping its weights", path);
    return 0;
}

/* ----------------------------------------------------------------------------
   File formats and loading: llama2.c version 0, our RUNC format, GGUF, and
   the tokenizer files. Loaders and parsers do not exit: they check every
   size in 64-bit arithmetic before touching a weight, and fail with one
   line in error_message. */

// Our own format: a 256-byte header, then 64-byte-aligned tensors (README).
// Version 1 has one weight type for every matrix; version 2 (mixes such as
// Q4_K_M) follows the header with a table of each matrix's own type.
#define RUNC_MAGIC 0x434E5552u // the bytes "RUNC"
#define RUNC_VERSION 1
#define RUNC_VERSION_TYPES 2
#define RUNC_HEADER_SIZE 256
#define RUNC_ALIGN 64
#define V0_HEADER_SIZE 28

// Limits that keep every size computation far from overflowing 64 bits
// while admitting any real model (Llama 3 405B has dim 16384).
#define MAX_DIM (1 << 16)
#define MAX_HIDDEN (1 << 20)
#define MAX_HEAD_SIZE 1024
#define MAX_EXPERTS 256
#define MAX_LAYERS (1 << 12)
#define MAX_VOCAB (1 << 24)
#define MAX_SEQ_LEN (1 << 24)

static int check_config(const Config *c, const char *path) {
    if (c->dim <= 0 || c->hidden_dim <= 0 || c->n_layers <= 0 || c->n_heads <= 0 ||
        c->n_kv_heads <= 0 || c->vocab_size <= 0 || c->seq_len <= 0)
        return fail("%s: header has a zero or negative size (dim %d, hidden_dim %d, n_layers %d, "
                    "n_heads %d, n_kv_heads %d, vocab_size %d, seq_len %d)", path, c->dim,
                    c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, c->seq_len);
    if (c->dim > MAX_DIM || c->hidden_dim > MAX_HIDDEN || c->n_layers > MAX_LAYERS ||
        c->vocab_size > MAX_VOCAB || c->seq_len > MAX_SEQ_LEN)
        return fail("%s: header sizes out of range (dim %d, hidden_dim %d, n_layers %d, vocab_size %d, "
                    "seq_len %d)", path, c->dim, c->hidden_dim, c->n_layers, c->vocab_size, c->seq_len);
    if (c->n_heads % c->n_kv_heads != 0)
        return fail("%s: n_heads %d is not a multiple of n_kv_heads %d", path, c->n_heads, c->n_kv_heads);
    if (c->head_size <= 0 || c->head_size > MAX_HEAD_SIZE || (int64_t)c->n_heads * c->head_size > MAX_DIM)
        return fail("%s: head size %d (with %d heads) is out of range", path, c->head_size, c->n_heads);
    if (c->head_size % 2 != 0)
        return fail("%s: head size %d is odd; RoPE rotates pairs", path, c->head_size);
    if (!(c->rope_theta > 0.0f) || !isfinite(c->rope_theta))
        return fail("%s: rope_theta %g is not a positive number", path, c->rope_theta);
    if (!(c->rope_scale > 0.0f) || !isfinite(c->rope_scale))
        return fail("%s: RoPE scaling factor %g is not a positive number", path, 1.0f / c->rope_scale);
    if (!(c->norm_eps > 0.0f) || !(c->norm_eps < 1.0f))
        return fail("%s: rms_norm_eps %g is not in (0, 1)", path, c->norm_eps);
    if (c->bos_id < 0 || c->bos_id >= c->vocab_size || c->eos_id < 0 || c->eos_id >= c->vocab_size)
        return fail("%s: BOS id %d or EOS id %d is outside the vocabulary of %d", path, c->bos_id,
                    c->eos_id, c->vocab_size);
    return 0;
}

// Walks the tensors of a checkpoint in file order. With base == NULL it only
// adds up sizes, so the exact file size can be checked before any weight is
// touched; with base set it returns where each tensor starts.
typedef struct {
    const char *base;
    uint64_t offset;
    uint64_t align;              // 1 for version 0, RUNC_ALIGN for our format
    const unsigned char *types;  // RUNC version 2: each matrix's type (runc_type), else NULL
} TensorWalk;

// RUNC version 2's table: one int32 type per matrix in file order, the
// embedding (0), then each of layer_matrices over the layers (part p, layer
// l: 1 + p * n_layers + l), then wcls when unshared. Without a table every
// matrix is weight_type.
static int runc_matrix_count(const Config *c) { return 1 + LAYER_MATRICES * c->n_layers + !c->shared_classifier; }

static int runc_type(const unsigned char *types, int index, const Config *c) {
    return types ? read_i32(types + 4 * (size_t)index) : c->weight_type;
}

static const char *walk_tensor(TensorWalk *w, uint64_t bytes) {
    w->offset = (w->offset + w->align - 1) / w->align * w->align;
    const char *p = w->base ? w->base + w->offset : NULL;
    w->offset += bytes;
    return p;
}

static const char *walk_stacked(TensorWalk *w, const Config *c, int rows, int cols, int type) {
    return walk_tensor(w, (uint64_t)c->n_layers * rows * type_row_bytes(type, cols));
}

// Part p (layer_matrices[p]) of our format, its layers back to back, each
// layer in its own type.
static const char *walk_part(TensorWalk *w, const Config *c, int p) {
    int rows = config_size(c, layer_matrices[p].rows), cols = config_size(c, layer_matrices[p].cols);
    uint64_t bytes = 0;
    for (int l = 0; l < c->n_layers; l++)
        bytes += (uint64_t)rows * type_row_bytes(runc_type(w->types, 1 + p * c->n_layers + l, c), cols);
    return walk_tensor(w, bytes);
}

// Where each tensor starts; the per-layer ones hold all layers back to back.
typedef struct {
    const char *token_embedding, *rms_att, *rms_ffn, *rms_final, *wcls;
    const char *parts[LAYER_MATRICES]; // layer_matrices' order
} TensorStarts;

// llama2.c version 0: embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3,
// rms_final, two legacy RoPE tables, [wcls]. Returns the file size it implies.
static uint64_t walk_v0(TensorWalk *w, TensorStarts *t, const Config *c) {
    int wt = c->weight_type;
    t->token_embedding = walk_tensor(w, (uint64_t)c->vocab_size * type_row_bytes(wt, c->dim));
    t->rms_att = walk_stacked(w, c, 1, c->dim, TYPE_F32);
    for (int p = 0; p < LAYER_MATRICES; p++) { // the attention's matrices, rms_ffn, then the feed-forward's
        if (p == 4) t->rms_ffn = walk_stacked(w, c, 1, c->dim, TYPE_F32);
        const LayerMatrix *lm = &layer_matrices[p];
        t->parts[p] = walk_stacked(w, c, config_size(c, lm->rows), config_size(c, lm->cols), wt);
    }
    t->rms_final = walk_tensor(w, (uint64_t)c->dim * sizeof(float));
    walk_tensor(w, (uint64_t)c->seq_len * c->head_size * sizeof(float)); // legacy RoPE tables
    t->wcls = c->shared_classifier ? t->token_embedding
                                   : walk_tensor(w, (uint64_t)c->vocab_size * type_row_bytes(wt, c->dim));
    return w->offset;
}

// Our format: the norms first (always F32), then the matrices in weight_type
// (version 2: each in its type from the table).
static uint64_t walk_runc(TensorWalk *w, TensorStarts *t, const Config *c) {
    t->rms_att = walk_stacked(w, c, 1, c->dim, TYPE_F32);
    t->rms_ffn = walk_stacked(w, c, 1, c->dim, TYPE_F32);
    t->rms_final = walk_tensor(w, (uint64_t)c->dim * sizeof(float));
    t->token_embedding = walk_tensor(w, (uint64_t)c->vocab_size * type_row_bytes(runc_type(w->types, 0, c), c->dim));
    for (int p = 0; p < LAYER_MATRICES; p++) t->parts[p] = walk_part(w, c, p);
    // A shared classifier has no entry in the table: read the type only when unshared.
    if (c->shared_classifier) {
        t->wcls = t->token_embedding;
    } else {
        int wcls_type = runc_type(w->types, 1 + LAYER_MATRICES * c->n_layers, c);
        t->wcls = walk_tensor(w, (uint64_t)c->vocab_size * type_row_bytes(wcls_type, c->dim));
    }
    return w->offset;
}

// Points the weights at the tensors; types: RUNC version 2's table or NULL.
static void point_weights(TransformerWeights *w, const TensorStarts *t, const Config *c, const unsigned char *types) {
    int L = c->n_layers;
    w->token_embedding = (Matrix){.data = t->token_embedding, .type = runc_type(types, 0, c), .rows = c->vocab_size,
                                  .cols = c->dim};
    w->wcls = c->shared_classifier ? w->token_embedding
                                   : (Matrix){.data = t->wcls, .type = runc_type(types, 1 + LAYER_MATRICES * L, c),
                                              .rows = c->vocab_size, .cols = c->dim};
    w->rms_final = (const float *)t->rms_final;
    for (int l = 0; l < L; l++) {
        LayerWeights *lw = &w->layers[l];
        lw->rms_att = (const float *)t->rms_att + (size_t)l * c->dim;
        lw->rms_ffn = (const float *)t->rms_ffn + (size_t)l * c->dim;
    }
    for (int p = 0; p < LAYER_MATRICES; p++) { // each part's layers back to back, each in its own type
        const char *at = t->parts[p];
        int rows = config_size(c, layer_matrices[p].rows), cols = config_size(c, layer_matrices[p].cols);
        for (int l = 0; l < L; l++) {
            int type = runc_type(types, 1 + p * L + l, c);
            *layer_matrix(&w->layers[l], p) = (Matrix){.data = at, .type = type, .rows = rows, .cols = cols};
            at += (size_t)rows * type_row_bytes(type, cols);
        }
    }
}

// Refuses an MXFP4 matrix of our format with a NaN scale (mxfp4_nan_block),
// naming it as write_matrix does.
static int runc_check_blocks(TransformerWeights *w, const Config *c, const char *path) {
    int n = LAYER_MATRICES * c->n_layers;
    for (int i = -1; i <= n; i++) { // -1: the embedding
        const Matrix *m = i < 0 ? &w->token_embedding : model_matrix(w, c->n_layers, i);
        if (m->type != TYPE_MXFP4) continue;
        int64_t bad = mxfp4_nan_block(m->data, (uint64_t)m->rows * type_row_bytes(m->type, m->cols) / sizeof(BlockMXFP4));
        if (bad < 0) continue;
        const char *what = i < 0 ? "the token embedding" : i == n ? "the classifier" : layer_matrices[i % LAYER_MATRICES].name;
        if (i >= 0 && i < n)
            return fail("%s: layer %d's %s has an MXFP4 block (number %lld) whose scale byte is 255, E8M0's NaN: "
                        "the file is damaged, or its writer is broken", path, i / LAYER_MATRICES, what, (long long)bad);
        return fail("%s: %s has an MXFP4 block (number %lld) whose scale byte is 255, E8M0's NaN: the file is "
                    "damaged, or its writer is broken", path, what, (long long)bad);
    }
    return 0;
}

static int parse_header_v0(Config *c, const unsigned char *h, size_t size, const char *path) {
    if (size < V0_HEADER_SIZE)
        return fail("%s: %zu bytes is too small for a checkpoint header", path, size);
    if (isalpha(h[0]) && isalpha(h[1]) && isalpha(h[2]) && isalpha(h[3])) // a v0 header starts with dim
        return fail("%s: unknown file format '%.4s' (run.c reads GGUF, RUNC and llama2.c version 0)", path, h);
    c->dim = read_i32(h);
    c->hidden_dim = read_i32(h + 4);
    c->n_layers = read_i32(h + 8);
    c->n_heads = read_i32(h + 12);
    c->n_kv_heads = read_i32(h + 16);
    int vocab = read_i32(h + 20);
    c->seq_len = read_i32(h + 24);
    c->shared_classifier = vocab > 0; // negative: a separate classifier is stored at the end
    c->vocab_size = vocab == INT_MIN ? 0 : abs(vocab);
    c->head_size = c->n_heads > 0 ? c->dim / c->n_heads : 0;
    c->rope_theta = 10000.0f;
    c->rope_scale = 1.0f;
    c->norm_eps = 1e-5f;
    c->bos_id = 1;
    c->eos_id = 2;
    c->weight_type = TYPE_F32;
    return 0;
}

static int parse_header_runc(Config *c, const unsigned char *h, size_t size, const char *path) {
    if (size < RUNC_HEADER_SIZE)
        return fail("%s: %zu bytes is too small for a run.c header (%d bytes)", path, size, RUNC_HEADER_SIZE);
    int version = read_i32(h + 4);
    if (version != RUNC_VERSION && version != RUNC_VERSION_TYPES)
        return fail("%s: run.c format version %d is not supported (this build reads versions %d and %d)", path,
                    version, RUNC_VERSION, RUNC_VERSION_TYPES);
    c->dim = read_i32(h + 8);
    c->hidden_dim = read_i32(h + 12);
    c->n_layers = read_i32(h + 16);
    c->n_heads = read_i32(h + 20);
    c->n_kv_heads = read_i32(h + 24);
    c->vocab_size = read_i32(h + 28);
    c->seq_len = read_i32(h + 32);
    c->head_size = read_i32(h + 36);
    c->rope_theta = read_f32(h + 40);
    c->rope_scale = 1.0f;
    c->norm_eps = read_f32(h + 44);
    c->shared_classifier = read_i32(h + 48);
    c->bos_id = read_i32(h + 52);
    c->eos_id = read_i32(h + 56);
    c->weight_type = read_i32(h + 60);
    if (c->shared_classifier != 0 && c->shared_classifier != 1)
        return fail("%s: shared_classifier is %d, not 0 or 1", path, c->shared_classifier);
    if (!type_supported(c->weight_type))
        return fail("%s: weight type %d (%s) is not supported (%s)", path, c->weight_type,
                    type_name((uint32_t)c->weight_type), supported_type_names());
    return 0;
}

/* Files given as something they are not, recognized by their first bytes so
   that the message can say what the file is and what to do with it. */

enum { FILE_OTHER, FILE_PYTORCH, FILE_LLAMA2C_V1, FILE_SAFETENSORS, FILE_SENTENCEPIECE, FILE_TOKENIZER_BIN,
       FILE_LFS_POINTER, FILE_HTML, FILE_TEXT, FILE_ZEROS };

static int file_kind(const unsigned char *h, size_t n) {
    if (n >= 4 && memcmp(h, "PK\x03\x04", 4) == 0) return FILE_PYTORCH; // a zip archive
    if (n >= 4 && (uint32_t)read_i32(h) == 0x616b3432u) return FILE_LLAMA2C_V1; // llama2.c's versions 1 and 2
    if (n >= 10 && read_u64(h) > 1 && read_u64(h) < n && h[8] == '{' && h[9] == '"') return FILE_SAFETENSORS;
    // SentencePiece's ModelProto: field 1 (a piece, length-delimited), whose field 1 is its text
    if (n >= 4 && h[0] == 0x0A && h[1] < 0x80 && h[2] == 0x0A && h[3] < 0x80 && (size_t)h[3] + 4 <= n)
        return FILE_SENTENCEPIECE;
    // llama2.c's tokenizer.bin: max_token_length, then the score, length and text of each token
    int32_t max_len = n >= 12 ? read_i32(h) : 0, len = n >= 12 ? read_i32(h + 8) : 0;
    if (max_len > 0 && max_len <= 4096 && len > 0 && len <= max_len && (size_t)len + 12 <= n) {
        int text = 1;
        for (int i = 0; i < len; i++) text &= h[12 + i] >= 0x20;
        if (text) return FILE_TOKENIZER_BIN;
    }
    // what a failed download leaves: a Git LFS pointer, an error page, other text, or zeros
    size_t head = n < 512 ? n : 512, printable = 0, zeros = 0;
    for (size_t i = 0; i < head; i++) {
        printable += h[i] >= 0x20 || h[i] == '\n' || h[i] == '\r' || h[i] == '\t';
        zeros += h[i] == 0;
    }
    size_t lead = 0; // an error page may start with blank lines
    while (lead < head && (h[lead] == ' ' || h[lead] == '\n' || h[lead] == '\r' || h[lead] == '\t')) lead++;
    if (n >= 24 && memcmp(h, "version https://git-lfs", 23) == 0) return FILE_LFS_POINTER;
    if (lead + 5 <= n && (!strncasecmp((const char *)h + lead, "<html", 5) || !strncasecmp((const char *)h + lead, "<!doc", 5)))
        return FILE_HTML;
    if (head >= 4 && printable == head) return FILE_TEXT;
    return head >= 28 && zeros == head ? FILE_ZEROS : FILE_OTHER;
}

// What a file of that kind is and what to do, or NULL for FILE_OTHER.
static const char *file_advice(int kind) {
    switch (kind) {
    case FILE_PYTORCH: return "is a PyTorch checkpoint (a zip archive); convert its model with export.py --hf DIR OUT "
                              "(a Hugging Face directory) or export.py --meta DIR OUT (Meta's consolidated.*.pth)";
    case FILE_LLAMA2C_V1: return "is a llama2.c version 1 or 2 checkpoint; convert it with export.py --llama2c FILE OUT";
    case FILE_SAFETENSORS: return "is a safetensors file (Hugging Face weights); convert its model directory with "
                                  "export.py --hf DIR OUT";
    case FILE_SENTENCEPIECE: return "is a SentencePiece model (tokenizer.model); make a tokenizer.bin from it with "
                                    "export.py --tokenizer FILE OUT, and give that with -z";
    case FILE_TOKENIZER_BIN: return "is a llama2.c tokenizer (tokenizer.bin); give it with -z, and the model as the "
                                    "first argument";
    case FILE_LFS_POINTER: return "is a Git LFS pointer, not the file itself: fetch it (git lfs pull, or download the "
                                  "file's own link)";
    case FILE_HTML: return "is a web page, not a model (a failed download?); download the file itself";
    case FILE_TEXT: return "is a text file, not a model";
    case FILE_ZEROS: return "starts with nothing but zero bytes: an incomplete download or copy?";
    default: return NULL;
    }
}

// 1 if path is a directory holding config.json, as Hugging Face models do.
static int is_hf_directory(const char *path) {
    char config[4096];
    struct stat st;
    snprintf(config, sizeof config, "%s/config.json", path);
    return stat(config, &st) == 0 && S_ISREG(st.st_mode);
}

// A model or tokenizer must be a regular file, checked before it is opened:
// opening a FIFO would wait for a writer forever.
static int check_input(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return fail("%s: cannot open: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode) && is_hf_directory(path))
        return fail("%s: is a Hugging Face model directory; convert it with export.py --hf %s OUT, then run OUT", path, path);
    if (S_ISDIR(st.st_mode)) return fail("%s: is a directory, not a file", path);
    if (!S_ISREG(st.st_mode)) return fail("%s: is not a regular file (a FIFO or device?)", path);
    return 0;
}

// RUNC version 2's type table: present whole, every type one run.c reads.
static int runc_check_types(const unsigned char *types, const Config *c, size_t size, const char *path) {
    int n = runc_matrix_count(c);
    if (size < RUNC_HEADER_SIZE + 4 * (size_t)n)
        return fail("%s: file ends inside its table of %d matrix types", path, n);
    for (int i = 0; i < n; i++)
        if (!type_supported(runc_type(types, i, c)))
            return fail("%s: matrix %d has weight type %d (%s), which is not supported (%s)", path, i,
                        runc_type(types, i, c), type_name((uint32_t)runc_type(types, i, c)), supported_type_names());
    return 0;
}

/* The files mapped now (the model; a GGUF tokenizer while it is read), so
   that a fault in one names it. Reading a mapped page past the end of its
   file raises SIGBUS: the file was cut short after run.c mapped it (a
   download or a conversion still writing it in place, say). By default
   that kills the process without a word; on_bus_error says which file and
   exits. */
#define MAX_MAPPED 4
typedef struct {
    const char *volatile start; // the mapping, size bytes; NULL: a free slot (volatile: the handler reads it)
    size_t size;
    char *path;        // the file's name, for the message (owned)
} MappedFile;
static MappedFile mapped_files[MAX_MAPPED];

static void write_stderr(const char *s) {
    for (size_t n = strlen(s); n > 0;) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

// Set by the first thread to fault on a cut-short file: with several
// threads reading the weights, each can fault at once, and their messages
// came out interleaved ("run: run: m.binm.bin: ...", seen in CI).
static atomic_flag bus_error_told = ATOMIC_FLAG_INIT;

// Only async-signal-safe calls: strlen, write, unlink, signal, raise, pause,
// _exit, and a lock-free atomic flag.
void on_bus_error(int sig, siginfo_t *info, void *context) {
    (void)context;
    const char *at = info->si_addr, *path = NULL;
    for (int i = 0; i < MAX_MAPPED; i++)
        if (mapped_files[i].start && at >= mapped_files[i].start && at < mapped_files[i].start + mapped_files[i].size)
            path = mapped_files[i].path;
    if (!path) { // not a mapped file: a fault of run.c's own, left to crash as usual
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    if (atomic_flag_test_and_set(&bus_error_told))
        for (;;) pause(); // another thread says it and exits the process; returning would fault again
    if (unfinished_output) unlink(unfinished_output);
    write_stderr("run: ");
    write_stderr(path);
    write_stderr(": the file was cut short while run.c was reading it (is something still writing it?); run again once it is complete\n");
    _exit(1);
}

void catch_bus_errors(void) {
    struct sigaction on_fault = {0};
    on_fault.sa_sigaction = on_bus_error;
    on_fault.sa_flags = SA_SIGINFO;
    sigaction(SIGBUS, &on_fault, NULL);
}

static void unmap_file(void *map, size_t size) {
    for (int i = 0; i < MAX_MAPPED; i++)
        if (mapped_files[i].start == map) {
            mapped_files[i].start = NULL; // first: the handler may run at any time
            free(mapped_files[i].path);
            mapped_files[i].path = NULL;
        }
    munmap(map, size);
}

static int map_file(const char *path, void **map, size_t *size) {
    if (check_input(path) != 0) return -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return fail("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return fail("%s: cannot stat: %s", path, strerror(errno)); }
    if (!S_ISREG(st.st_mode)) { close(fd); return fail("%s: is not a regular file", path); }
    if (st.st_size == 0) { close(fd); return fail("%s: file is empty", path); }
    if ((uint64_t)st.st_size > SIZE_MAX) { close(fd); return fail("%s: file too large to map", path); }
    *size = (size_t)st.st_size;
    *map = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); // the mapping keeps the file open
    if (*map == MAP_FAILED) return fail("%s: cannot map: %s", path, strerror(errno));
    char *name = strdup(path);
    if (!name) { munmap(*map, *size); return fail("%s: out of memory", path); }
    for (int i = 0; i < MAX_MAPPED; i++)
        if (!mapped_files[i].start) {
            mapped_files[i].path = name;
            mapped_files[i].size = *size;
            mapped_files[i].start = *map; // last: the slot is whole before the handler can match it
            return 0;
        }
    free(name); // more files than slots: mapped, but a fault in it will not be named
    return 0;
}

/* GGUF, llama.cpp's format (versions 2 and 3): a header, metadata key/value
   pairs, tensor infos, then tensor data at an aligned offset. Parsing only
   indexes the mapped file; every read is bounds-checked, since the file may
   come from anywhere. */

#define GGUF_MAGIC 0x46554747u // the bytes "GGUF"
enum { GGUF_U8, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING,
       GGUF_ARRAY, GGUF_U64, GGUF_I64, GGUF_F64, GGUF_N_TYPES };

typedef struct {
    const char *key;
    size_t key_len;
    uint32_t type;
    const unsigned char *value; // where the value starts in the file
    uint32_t elem_type;         // arrays: element type and count
    uint64_t count;
    const unsigned char *elems; // arrays: the first element
} GgufValue;

typedef struct {
    const char *name;
    size_t name_len;
    int n_dims;
    uint64_t dims[4]; // dims[0] is the row length (GGML's ne[0])
    uint32_t type;
    uint64_t offset;  // from the start of the data section
    uint64_t size;
} GgufTensor;

typedef struct {
    GgufValue *values;   // (n_values)
    uint64_t n_values;
    GgufTensor *tensors; // (n_tensors)
    uint64_t n_tensors;
    const unsigned char *data;
    uint64_t data_size;
} Gguf;

typedef struct { const unsigned char *p, *end; } Cursor;

// Takes n bytes; NULL (and the cursor spent) if fewer remain.
static const unsigned char *take(Cursor *c, uint64_t n) {
    if (n > (uint64_t)(c->end - c->p)) { c->p = c->end; return NULL; }
    const unsigned char *at = c->p;
    c->p += n;
    return at;
}

static int take_u32(Cursor *c, uint32_t *v) {
    const unsigned char *p = take(c, 4);
    if (p) *v = (uint32_t)read_i32(p);
    return p ? 0 : -1;
}

static int take_u64(Cursor *c, uint64_t *v) {
    const unsigned char *p = take(c, 8);
    if (p) *v = read_u64(p);
    return p ? 0 : -1;
}

static int take_string(Cursor *c, const char **s, size_t *len) {
    uint64_t n;
    if (take_u64(c, &n) != 0) return -1;
    const unsigned char *p = take(c, n);
    if (!p) return -1;
    *s = (const char *)p;
    *len = (size_t)n;
    return 0;
}

static uint64_t gguf_scalar_size(uint32_t type) {
    static const uint64_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return type < GGUF_N_TYPES ? sizes[type] : 0;
}

// Steps over one value of the given type (arrays may nest a few levels).
static int skip_value(Cursor *c, uint32_t type, int depth) {
    if (type >= GGUF_N_TYPES || depth > 3) return -1;
    if (type == GGUF_STRING) { const char *s; size_t n; return take_string(c, &s, &n); }
    if (type != GGUF_ARRAY) return take(c, gguf_scalar_size(type)) ? 0 : -1;
    uint32_t elem_type;
    uint64_t count;
    if (take_u32(c, &elem_type) != 0 || take_u64(c, &count) != 0 || elem_type >= GGUF_N_TYPES) return -1;
    uint64_t size = gguf_scalar_size(elem_type);
    if (size > 0) {
        if (count > (uint64_t)(c->end - c->p) / size) { c->p = c->end; return -1; } // runs past the end
        take(c, count * size);
        return 0;
    }
    for (uint64_t i = 0; i < count; i++)
        if (skip_value(c, elem_type, depth + 1) != 0) return -1;
    return 0;
}

static const GgufValue *gguf_find(const Gguf *g, const char *key) {
    size_t n = strlen(key);
    for (uint64_t i = 0; i < g->n_values; i++)
        if (g->values[i].key_len == n && memcmp(g->values[i].key, key, n) == 0) return &g->values[i];
    return NULL;
}

// An integer-valued key as int64; def when absent; -1 from the call when
// it has another type.
static int gguf_int(const Gguf *g, const char *key, int64_t def, int64_t *out) {
    const GgufValue *v = gguf_find(g, key);
    *out = def;
    if (!v) return 0;
    const unsigned char *p = v->value;
    switch (v->type) {
    case GGUF_U8: case GGUF_BOOL: *out = p[0]; return 0;
    case GGUF_I8: *out = (int8_t)p[0]; return 0;
    case GGUF_U16: *out = p[0] | p[1] << 8; return 0;
    case GGUF_I16: *out = (int16_t)(p[0] | p[1] << 8); return 0;
    case GGUF_U32: *out = (uint32_t)read_i32(p); return 0;
    case GGUF_I32: *out = read_i32(p); return 0;
    case GGUF_U64: case GGUF_I64: *out = (int64_t)read_u64(p); return 0;
    default: return -1;
    }
}

static int gguf_float(const Gguf *g, const char *key, float def, float *out) {
    const GgufValue *v = gguf_find(g, key);
    *out = def;
    if (!v) return 0;
    if (v->type == GGUF_F32) { *out = read_f32(v->value); return 0; }
    if (v->type == GGUF_F64) { double d; uint64_t u = read_u64(v->value); memcpy(&d, &u, 8); *out = (float)d; return 0; }
    return -1;
}

// A string key: its bytes (not NUL-terminated) and length; NULL when absent.
static const char *gguf_string(const Gguf *g, const char *key, size_t *len) {
    const GgufValue *v = gguf_find(g, key);
    if (!v || v->type != GGUF_STRING) return NULL;
    *len = (size_t)read_u64(v->value);
    return (const char *)v->value + 8;
}

static void gguf_free(Gguf *g) {
    free(g->values);
    free(g->tensors);
    memset(g, 0, sizeof *g);
}

// Orders (name, length) pairs, for finding a name given twice.
typedef struct { const char *name; size_t len; } NameSpan;
static int compare_name_spans(const void *a, const void *b) {
    const NameSpan *x = a, *y = b;
    int c = memcmp(x->name, y->name, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

// A name given twice among n (a metadata key or a tensor), or NULL; *dup
// its length. The first copy would win in silence, so such a file is refused.
static const char *repeated_name(NameSpan *names, uint64_t n, size_t *dup) {
    qsort(names, (size_t)n, sizeof *names, compare_name_spans);
    for (uint64_t i = 1; i < n; i++)
        if (compare_name_spans(&names[i - 1], &names[i]) == 0) { *dup = names[i].len; return names[i].name; }
    return NULL;
}

static int gguf_check_unique(const Gguf *g, const char *path) {
    uint64_t most = g->n_values > g->n_tensors ? g->n_values : g->n_tensors;
    NameSpan *names = malloc((size_t)most * sizeof *names + 1);
    if (!names) return fail("%s: out of memory", path);
    size_t len = 0;
    for (uint64_t i = 0; i < g->n_values; i++) names[i] = (NameSpan){g->values[i].key, g->values[i].key_len};
    const char *key = repeated_name(names, g->n_values, &len);
    int err = key ? fail("%s: metadata key %.*s is given twice", path, (int)(len < 96 ? len : 96), key) : 0;
    for (uint64_t i = 0; i < g->n_tensors && !err; i++) names[i] = (NameSpan){g->tensors[i].name, g->tensors[i].name_len};
    const char *tensor = err ? NULL : repeated_name(names, g->n_tensors, &len);
    if (tensor) err = fail("%s: tensor %.*s is given twice", path, (int)(len < 96 ? len : 96), tensor);
    free(names);
    return err;
}

static int compare_tensor_offset(const void *a, const void *b) {
    const GgufTensor *x = *(const GgufTensor *const *)a, *y = *(const GgufTensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

// Checks each tensor's shape, type, alignment and extent, and that no two overlap.
static int gguf_check_tensors(Gguf *g, const unsigned char *base, uint64_t alignment, const char *path) {
    uint64_t file_size = (uint64_t)(g->data - base) + g->data_size;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        GgufTensor *t = &g->tensors[i];
        // a type run.c does not compute with is never read (gguf_weight refuses it
        // for a model), so the file still serves as a vocabulary (-z)
        if (!type_supported(t->type)) continue;
        int block_size = type_traits[t->type].block_size;
        if (t->dims[0] % (uint64_t)block_size != 0)
            return fail("%s: tensor %.*s has rows of %llu, not a multiple of %s's block of %d", path,
                        (int)t->name_len, t->name, (unsigned long long)t->dims[0], type_name(t->type), block_size);
        // each dim is below 2^31 (checked when read), so no product below can wrap
        uint64_t rows = 1, row_bytes = type_row_bytes((int)t->type, (int)t->dims[0]);
        for (int d = 1; d < t->n_dims && rows <= (1ull << 32); d++) rows *= t->dims[d];
        if (rows > g->data_size / row_bytes) // also keeps rows * row_bytes from wrapping
            return fail("%s: truncated: tensor %.*s alone needs more than the file's %llu bytes", path,
                        (int)t->name_len, t->name, (unsigned long long)file_size);
        t->size = rows * row_bytes;
        // data is read in place: F32 at multiples of 4, the others' blocks (16-bit fields) of 2, MXFP4's (bytes) anywhere
        uint64_t natural = t->type == TYPE_F32 ? 4 : t->type == TYPE_MXFP4 ? 1 : 2;
        if (t->offset % alignment != 0 || ((uint64_t)(g->data - base) + t->offset) % natural != 0)
            return fail("%s: tensor %.*s is misaligned (offset %llu)", path, (int)t->name_len, t->name,
                        (unsigned long long)t->offset);
        if (t->offset > g->data_size || t->size > g->data_size - t->offset)
            return fail("%s: truncated: tensor %.*s ends at byte %llu, but the file has %llu bytes", path,
                        (int)t->name_len, t->name, (unsigned long long)((uint64_t)(g->data - base) + t->offset + t->size),
                        (unsigned long long)file_size);
    }
    GgufTensor **order = malloc((size_t)g->n_tensors * sizeof *order + 1);
    if (!order) return fail("%s: out of memory", path);
    for (uint64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, (size_t)g->n_tensors, sizeof *order, compare_tensor_offset);
    int err = 0;
    for (uint64_t i = 1; i < g->n_tensors && !err; i++)
        if (order[i - 1]->offset + order[i - 1]->size > order[i]->offset)
            err = fail("%s: tensors %.*s and %.*s overlap", path, (int)order[i - 1]->name_len, order[i - 1]->name,
                       (int)order[i]->name_len, order[i]->name);
    free(order);
    return err;
}

// Indexes a GGUF file mapped at map[0..size). 0 ok; -1 with error_message.
static int gguf_parse(Gguf *g, const unsigned char *map, size_t size, const char *path) {
    memset(g, 0, sizeof *g);
    Cursor c = {.p = map, .end = map + size};
    uint32_t magic = 0, version = 0;
    if (take_u32(&c, &magic) != 0 || magic != GGUF_MAGIC) return fail("%s: not a GGUF file", path);
    if (take_u32(&c, &version) != 0 || (version != 2 && version != 3))
        return fail("%s: GGUF version %u is not supported (2 and 3 are)", path, version);
    if (take_u64(&c, &g->n_tensors) != 0 || take_u64(&c, &g->n_values) != 0)
        return fail("%s: truncated: the file has %zu bytes, less than a GGUF header's 24", path, size);
    uint64_t left = (uint64_t)(c.end - c.p);
    if (g->n_values > left / 12 || g->n_tensors > left / 24) // the smallest entries' sizes
        return fail("%s: truncated or damaged: its header counts %llu values and %llu tensors, more than its %zu "
                    "bytes can hold", path, (unsigned long long)g->n_values, (unsigned long long)g->n_tensors, size);
    g->values = calloc((size_t)g->n_values + 1, sizeof(GgufValue));
    g->tensors = calloc((size_t)g->n_tensors + 1, sizeof(GgufTensor));
    int err = 0;
    if (!g->values || !g->tensors) { err = fail("%s: out of memory", path); goto error; }
    for (uint64_t i = 0; i < g->n_values; i++) {
        GgufValue *v = &g->values[i];
        if (take_string(&c, &v->key, &v->key_len) != 0 || take_u32(&c, &v->type) != 0) {
            err = fail("%s: truncated: the file has %zu bytes and ends inside metadata key %llu of %llu", path, size,
                       (unsigned long long)i + 1, (unsigned long long)g->n_values);
            goto error;
        }
        v->value = c.p;
        if (v->type == GGUF_ARRAY && c.end - c.p >= 12) {
            v->elem_type = (uint32_t)read_i32(c.p);
            v->count = read_u64(c.p + 4);
            v->elems = c.p + 12;
        }
        if (skip_value(&c, v->type, 0) != 0) {
            int key_len = v->key_len < 64 ? (int)v->key_len : 64;
            err = c.p == c.end ? fail("%s: truncated: the file has %zu bytes and ends inside the value of %.*s "
                                      "(metadata %llu of %llu)", path, size, key_len, v->key,
                                      (unsigned long long)i + 1, (unsigned long long)g->n_values)
                               : fail("%s: the value of %.*s (metadata %llu) is malformed", path, key_len, v->key,
                                      (unsigned long long)i + 1);
            goto error;
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        GgufTensor *t = &g->tensors[i];
        uint32_t n_dims = 0;
        if (take_string(&c, &t->name, &t->name_len) != 0 || take_u32(&c, &n_dims) != 0 || n_dims < 1 || n_dims > 4) {
            err = c.p == c.end ? fail("%s: truncated: the file has %zu bytes and ends inside tensor info %llu of %llu",
                                      path, size, (unsigned long long)i + 1, (unsigned long long)g->n_tensors)
                               : fail("%s: GGUF tensor info %llu is malformed", path, (unsigned long long)i);
            goto error;
        }
        t->n_dims = (int)n_dims;
        int bad = 0;
        for (uint32_t d = 0; d < n_dims; d++)
            bad |= take_u64(&c, &t->dims[d]) != 0 || t->dims[d] == 0 || t->dims[d] > INT32_MAX;
        if (bad || take_u32(&c, &t->type) != 0 || take_u64(&c, &t->offset) != 0) {
            err = c.p == c.end ? fail("%s: truncated: the file has %zu bytes and ends inside tensor info %llu of %llu",
                                      path, size, (unsigned long long)i + 1, (unsigned long long)g->n_tensors)
                               : fail("%s: GGUF tensor info %llu is malformed", path, (unsigned long long)i);
            goto error;
        }
    }
    if ((err = gguf_check_unique(g, path)) != 0) goto error;
    int64_t alignment;
    if (gguf_int(g, "general.alignment", 32, &alignment) != 0 || alignment <= 0 || alignment > 65536 ||
        (alignment & (alignment - 1))) {
        err = fail("%s: general.alignment is not a power of two", path);
        goto error;
    }
    uint64_t data_start = ((uint64_t)(c.p - map) + (uint64_t)alignment - 1) / (uint64_t)alignment * (uint64_t)alignment;
    if (data_start > size && g->n_tensors > 0) {
        err = fail("%s: truncated: the file has %zu bytes and its tensor data would start at byte %llu", path, size,
                   (unsigned long long)data_start);
        goto error;
    }
    g->data = map + (data_start < size ? data_start : size);
    g->data_size = data_start < size ? size - data_start : 0;
    err = gguf_check_tensors(g, map, (uint64_t)alignment, path);
    if (err == 0) return 0;
error:
    gguf_free(g);
    return err;
}

static const GgufTensor *gguf_tensor(const Gguf *g, const char *name) {
    size_t n = strlen(name);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].name_len == n && memcmp(g->tensors[i].name, name, n) == 0) return &g->tensors[i];
    return NULL;
}

// Refuses an MXFP4 tensor with a NaN scale (mxfp4_nan_block). Only the
// tensors a model uses are read: a file serving as a vocabulary (-z) is not.
static int gguf_check_blocks(const Gguf *g, const GgufTensor *t, const char *path) {
    int64_t bad = t->type == TYPE_MXFP4 ? mxfp4_nan_block(g->data + t->offset, t->size / sizeof(BlockMXFP4)) : -1;
    if (bad < 0) return 0;
    return fail("%s: tensor %.*s has an MXFP4 block (number %lld) whose scale byte is 255, E8M0's NaN: the file "
                "is damaged, or its writer is broken", path, (int)t->name_len, t->name, (long long)bad);
}

// Points *m at the tensor called name, which must be (rows, cols); NULL
// m: a norm vector (cols), which must be F32.
static int gguf_weight(const Gguf *g, const char *name, int rows, int cols, Matrix *m, const float **vec,
                       const char *path) {
    const GgufTensor *t = gguf_tensor(g, name);
    if (!t) return fail("%s: tensor %s is missing", path, name);
    uint64_t t_rows = t->n_dims > 1 ? t->dims[1] : 1;
    if (t->n_dims > 2 || t->dims[0] != (uint64_t)cols || t_rows != (uint64_t)rows)
        return fail("%s: tensor %s has the wrong shape (expected %d x %d)", path, name, rows, cols);
    if (!type_supported(t->type))
        return fail("%s: tensor %s has type %s (%u), which run.c does not compute with (it reads %s); use a file "
                    "of one of those types, or re-quantize the F32/F16 model (./run -m quantize, or llama-quantize)",
                    path, name, type_name(t->type), t->type, supported_type_names());
    if (vec) {
        if (t->type != TYPE_F32)
            return fail("%s: vector %s is %s, not F32, which run.c reads norms in (convert the model again: "
                        "llama.cpp's converters and export.py keep norms F32)", path, name, type_name(t->type));
        *vec = (const float *)(g->data + t->offset);
    } else {
        *m = (Matrix){.data = g->data + t->offset, .type = (int)t->type, .rows = rows, .cols = cols};
    }
    return gguf_check_blocks(g, t, path);
}

// The architectures run.c computes, as data; what the tensors say (biases,
// q/k norms, sinks, experts) the loader finds by itself.
typedef struct {
    const char *name;
    int rope_neox;        // RoPE pairs dimension i with i + head_size/2
    int gate;             // GATE_*, the feed-forward's
    int gemma;            // the embedding scaled by sqrt(dim), norms after attention and the feed-forward
    int window_period;    // with attention.sliding_window, layer l slides when l % period < period - 1
    int window_required;  // 1: attention.sliding_window must be given
    const char *ffn_norm; // the norm before the feed-forward, blk.N.NAME.weight
} Architecture;
static const Architecture architectures[] = {
    {"llama", 0, GATE_SILU, 0, 0, 0, "ffn_norm"},
    {"qwen2", 1, GATE_SILU, 0, 0, 0, "ffn_norm"},
    {"qwen3", 1, GATE_SILU, 0, 0, 0, "ffn_norm"},
    {"qwen3moe", 1, GATE_SILU, 0, 0, 0, "ffn_norm"},
    {"gemma3", 1, GATE_GELU, 1, 6, 0, "ffn_norm"},
    {"gpt-oss", 1, GATE_CLAMPED, 0, 2, 1, "post_attention_norm"},
};
#define ARCHITECTURE_NAMES "llama, qwen2, qwen3, qwen3moe, gemma3 and gpt-oss"

// The file's architecture, or NULL when run.c computes no such.
static const Architecture *gguf_architecture(const Gguf *g) {
    size_t len;
    const char *name = gguf_string(g, "general.architecture", &len);
    for (size_t i = 0; name && i < sizeof architectures / sizeof *architectures; i++)
        if (strlen(architectures[i].name) == len && !memcmp(architectures[i].name, name, len)) return &architectures[i];
    return NULL;
}

// The key ARCH.suffix (llama.embedding_length, qwen2.embedding_length, ...).
static const char *arch_key(char *key, size_t size, const char *arch, const char *suffix) {
    snprintf(key, size, "%s.%s", arch, suffix);
    return key;
}

// RoPE scaling from ARCH.rope.scaling.type/factor (or the older
// ARCH.rope.scale_linear): linear (also when no type is given) divides
// positions by the factor; Llama
// 3.1's scaling comes as the rope_freqs tensor (gguf_weights) instead.
static int gguf_rope_scaling(Config *c, const Gguf *g, const char *arch, const char *path) {
    char key[96];
    size_t len = 0;
    const char *type = gguf_string(g, arch_key(key, sizeof key, arch, "rope.scaling.type"), &len);
    float factor = 1.0f;
    int yarn = type && len == 4 && !memcmp(type, "yarn", 4);
    if (type && !yarn && !(len == 4 && !memcmp(type, "none", 4)) && !(len == 6 && !memcmp(type, "linear", 6)))
        return fail("%s: rope.scaling.type '%.*s' is not supported (none, linear and yarn are)", path,
                    (int)(len < 64 ? len : 64), type);
    // as llama.cpp: no type is linear, and the factor is rope.scaling.factor
    // where given, else the older rope.scale_linear
    int err = gguf_float(g, arch_key(key, sizeof key, arch, "rope.scale_linear"), 1.0f, &factor);
    if (gguf_find(g, arch_key(key, sizeof key, arch, "rope.scaling.factor")))
        err |= gguf_float(g, key, 1.0f, &factor);
    if (type && len == 4 && !memcmp(type, "none", 4)) factor = 1.0f;
    if (err || !(factor > 0.0f) || !isfinite(factor))
        return fail("%s: the RoPE scaling factor is not a positive number", path);
    c->rope_scale = 1.0f / factor;
    if (!yarn) return 0;
    // YaRN: the trained context (default: context_length) sets which pairs
    // are interpolated; the variants that scale attention otherwise
    // (DeepSeek's log multiplier, an attention factor) are refused
    int64_t context;
    float other;
    if (gguf_int(g, arch_key(key, sizeof key, arch, "rope.scaling.original_context_length"), c->seq_len, &context) != 0 ||
        context < 1 || context > INT32_MAX)
        return fail("%s: metadata %s is not a positive context length", path, key);
    c->rope_yarn_context = (int)context;
    static const char *const refused[] = {"rope.scaling.yarn_log_multiplier", "rope.scaling.attn_factor"};
    for (int i = 0; i < 2; i++)
        if (gguf_find(g, arch_key(key, sizeof key, arch, refused[i])) &&
            (gguf_float(g, key, 0.0f, &other) != 0 || other != (i == 0 ? 0.0f : 1.0f)))
            return fail("%s: metadata %s is a YaRN variant run.c does not compute", path, key);
    return 0;
}

// The sliding window (attention.sliding_window) and the layers that use
// it: every layer l with l % period < period - 1. Gemma 3's local layers
// turn RoPE with a base of their own (rope.freq_base_swa, default 10000)
// and no scaling; gpt-oss's as the others do (a base of their own is
// refused: no file has one).
static int gguf_window(Config *c, const Gguf *g, const Architecture *a, const char *path) {
    char key[96];
    const char *arch = a->name;
    int64_t window = 0, period = a->window_period;
    if (!gguf_find(g, arch_key(key, sizeof key, arch, "attention.sliding_window")))
        return a->window_required ? fail("%s: metadata %s is missing", path, key) : 0; // every layer global
    if (gguf_int(g, key, 0, &window) != 0 || window <= 0 || window > c->seq_len)
        return fail("%s: metadata %s is not a window in [1, context_length %d]", path, key, c->seq_len);
    if (gguf_int(g, arch_key(key, sizeof key, arch, "attention.sliding_window_pattern"), period, &period) != 0 ||
        period < 1 || period > c->n_layers + 1)
        return fail("%s: metadata %s is not a layer period in [1, %d]", path, key, c->n_layers + 1);
    c->window = (int)window;
    c->window_period = (int)period;
    float base = a->gemma ? 10000.0f : c->rope_theta; // llama.cpp's default for these layers
    if (gguf_float(g, arch_key(key, sizeof key, arch, "rope.freq_base_swa"), base, &base) != 0 || !(base > 0.0f) ||
        !isfinite(base))
        return fail("%s: metadata %s is not a positive number", path, key);
    if (a->gemma) c->rope_theta_local = base;
    else if (base != c->rope_theta)
        return fail("%s: metadata %s differs from rope.freq_base, which run.c does not compute for %s", path, key, arch);
    return 0;
}

// Gemma 3's fields: post-norms, the embedding times sqrt(dim), the query
// scale, the logits' soft cap (where the file has one).
static int gguf_gemma(Config *c, const Gguf *g, const char *arch, const char *path) {
    char key[96];
    c->post_norms = 1;
    c->embed_scale = sqrtf((float)c->dim);
    // llama.cpp's rule, after Gemma's own code: the 27B (62 layers) scales
    // queries by 1/sqrt(dim / n_heads), the others by 1/sqrt(head_size);
    // a file's attention.scale, where given, decides
    c->query_scale = 1.0f / sqrtf((float)(c->n_layers == 62 ? c->dim / c->n_heads : c->head_size));
    if (gguf_float(g, arch_key(key, sizeof key, arch, "attention.scale"), c->query_scale, &c->query_scale) != 0 ||
        !(c->query_scale > 0.0f) || !isfinite(c->query_scale))
        return fail("%s: metadata %s is not a positive number", path, key);
    if (gguf_float(g, arch_key(key, sizeof key, arch, "final_logit_softcapping"), 0.0f, &c->logit_softcap) != 0 ||
        !(c->logit_softcap >= 0.0f) || !isfinite(c->logit_softcap))
        return fail("%s: metadata %s is not a number >= 0", path, key);
    return 0;
}

static int gguf_config(Config *c, const Gguf *g, const char *path) {
    size_t len;
    int64_t split = 0, part = 0; // llama-gguf-split's parts: only the first has the metadata
    gguf_int(g, "split.count", 0, &split), gguf_int(g, "split.no", 0, &part);
    if (split > 1)
        return fail("%s: is part %lld of %lld of a split model; join the parts into one file first (llama.cpp's "
                    "llama-gguf-split --merge FIRST_PART OUT.gguf)", path, (long long)part + 1, (long long)split);
    const char *name = gguf_string(g, "general.architecture", &len);
    if (!name) return fail("%s: GGUF file has no general.architecture (a vocabulary-only file?)", path);
    const Architecture *a = gguf_architecture(g);
    if (!a)
        return fail("%s: architecture '%.*s' is not supported (" ARCHITECTURE_NAMES " are)", path,
                    (int)(len < 64 ? len : 64), name);
    const char *arch = a->name;
    char key[96];
    if (g->n_tensors == 0)
        return fail("%s: a vocabulary-only GGUF file (no tensors): it can tokenize (-m tokenize) or serve as -z, "
                    "not run", path);
    const GgufTensor *emb = gguf_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2) return fail("%s: tensor token_embd.weight is missing", path);
    static const char *const keys[] = {"embedding_length", "feed_forward_length", "block_count", "attention.head_count",
                                       "attention.head_count_kv", "context_length", "tokenizer.ggml.bos_token_id",
                                       "tokenizer.ggml.eos_token_id"};
    int64_t v[8];
    for (int i = 0; i < 8; i++) { // the first six are ARCH.name; a missing one is 0, refused below by name
        if (i < 6) arch_key(key, sizeof key, arch, keys[i]);
        else snprintf(key, sizeof key, "%s", keys[i]);
        if (gguf_int(g, key, i == 4 ? v[3] : i == 6 ? 1 : i == 7 ? 2 : 0, &v[i]) != 0)
            return fail("%s: metadata %s is not an integer (one value for all layers is what run.c reads)", path, key);
        if (v[i] < INT32_MIN || v[i] > INT32_MAX)
            return fail("%s: metadata %s = %lld is out of range", path, key, (long long)v[i]);
        if (i < 6 && v[i] <= 0)
            return fail("%s: metadata %s is %s", path, key, gguf_find(g, key) ? "not a positive number" : "missing");
    }
    if (gguf_float(g, arch_key(key, sizeof key, arch, "rope.freq_base"), 10000.0f, &c->rope_theta) != 0 ||
        gguf_float(g, arch_key(key, sizeof key, arch, "attention.layer_norm_rms_epsilon"), 1e-5f, &c->norm_eps) != 0)
        return fail("%s: metadata %s is not a number", path, key);
    *c = (Config){.dim = (int)v[0], .hidden_dim = (int)v[1], .n_layers = (int)v[2], .n_heads = (int)v[3],
                  .n_kv_heads = (int)v[4], .vocab_size = (int)emb->dims[1], .seq_len = (int)v[5],
                  .head_size = v[3] > 0 ? (int)(v[0] / v[3]) : 0, .rope_theta = c->rope_theta,
                  .rope_neox = a->rope_neox, .gate = a->gate, .norm_eps = c->norm_eps,
                  .shared_classifier = gguf_tensor(g, "output.weight") == NULL,
                  .bos_id = (int)v[6], .eos_id = (int)v[7], .weight_type = (int)emb->type};
    // a mixture of experts: each expert as wide as feed_forward_length (Mixtral), or
    // expert_feed_forward_length (qwen3moe, whose feed_forward_length is unused)
    int64_t experts, used, expert_width;
    if (gguf_int(g, arch_key(key, sizeof key, arch, "expert_count"), 0, &experts) != 0 || experts < 0 ||
        experts > MAX_EXPERTS)
        return fail("%s: metadata %s is not a count of experts in [0, %d]", path, key, MAX_EXPERTS);
    if (gguf_int(g, arch_key(key, sizeof key, arch, "expert_used_count"), 0, &used) != 0 ||
        (experts > 0 && (used < 1 || used > experts)))
        return fail("%s: metadata %s is not in [1, expert_count %lld]", path, key, (long long)experts);
    c->n_experts = (int)experts;
    c->n_experts_used = experts > 0 ? (int)used : 0;
    if (experts > 0 && (!strcmp(arch, "qwen3moe") || !strcmp(arch, "gpt-oss"))) {
        if (gguf_int(g, arch_key(key, sizeof key, arch, "expert_feed_forward_length"), 0, &expert_width) != 0 ||
            expert_width <= 0 || expert_width > MAX_HIDDEN)
            return fail("%s: metadata %s is %s", path, key, gguf_find(g, key) ? "not a positive width" : "missing");
        c->hidden_dim = (int)expert_width;
    }
    // a head size of its own (Qwen3-0.6B: dim 1024, 16 heads of 128; Mistral Nemo)
    int64_t key_length, value_length;
    if (gguf_int(g, arch_key(key, sizeof key, arch, "attention.key_length"), c->head_size, &key_length) != 0 ||
        key_length <= 0 || key_length > MAX_HEAD_SIZE)
        return fail("%s: metadata %s is not a head size in [1, %d]", path, key, MAX_HEAD_SIZE);
    if (gguf_int(g, arch_key(key, sizeof key, arch, "attention.value_length"), key_length, &value_length) != 0 ||
        value_length != key_length)
        return fail("%s: metadata %s is not attention.key_length = %lld (values of another size than keys are not "
                    "supported)", path, key, (long long)key_length);
    c->head_size = (int)key_length;
    int64_t rope_dims;
    if (gguf_int(g, arch_key(key, sizeof key, arch, "rope.dimension_count"), c->head_size, &rope_dims) != 0 ||
        rope_dims != c->head_size)
        return fail("%s: %s.rope.dimension_count %lld is not the head size %d (partial RoPE is not supported)",
                    path, arch, (long long)rope_dims, c->head_size);
    if (a->gemma && gguf_gemma(c, g, arch, path) != 0) return -1;
    if (gguf_window(c, g, a, path) != 0) return -1;
    return gguf_rope_scaling(c, g, arch, path);
}

// The tensors a model's layers hold: ".weight" for all, ".bias" for attn_q/k/v only.
// (and the architecture's norm before the feed-forward)
static const char *const layer_tensors[] = {"attn_norm.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias",
                                            "attn_output.bias", "attn_q_norm.weight", "attn_k_norm.weight",
                                            "attn_sinks.weight"};
// and those of an architecture with post-norms (gemma3)
static const char *const post_norm_tensors[] = {"post_attention_norm.weight", "post_ffw_norm.weight"};
// and the matrices (layer_matrices; the dense feed-forward's, or a mixture of experts)
static const char *const expert_tensors[] = {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_down_exps.weight",
                                             "ffn_up_exps.weight", "ffn_gate_inp.bias", "ffn_gate_exps.bias",
                                             "ffn_down_exps.bias", "ffn_up_exps.bias"};

// Refuses a tensor run.c would not read: computing without it would give
// other logits than the file's own program (a bias on attn_output, a
// layer beyond block_count, another architecture's norms).
static int gguf_check_used(const Gguf *g, const Config *c, const char *path) {
    const Architecture *a = gguf_architecture(g);
    static const char *const top[] = {"token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight"};
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *name = g->tensors[i].name;
        int len = (int)(g->tensors[i].name_len < 96 ? g->tensors[i].name_len : 96), used = 0, layer = -1, at = 0;
        char text[100], prefix[24];
        memcpy(text, name, (size_t)len);
        text[len] = '\0';
        for (size_t k = 0; k < sizeof top / sizeof *top; k++) used |= strcmp(text, top[k]) == 0;
        // blk.N. with N written as run.c writes it (no sign, no leading zeros)
        char *end = text;
        long number = strncmp(text, "blk.", 4) ? -1 : strtol(text + 4, &end, 10);
        if (number >= 0 && number <= INT_MAX && end > text + 4 && *end == '.') layer = (int)number, at = (int)(end + 1 - text);
        int in_layer = layer >= 0 && snprintf(prefix, sizeof prefix, "blk.%d.", layer) == at && !strncmp(text, prefix, (size_t)at);
        if (in_layer && layer >= c->n_layers)
            return fail("%s: tensor %s is in layer %d, but block_count says %d layers", path, text, layer, c->n_layers);
        for (size_t k = 0; in_layer && k < sizeof layer_tensors / sizeof *layer_tensors; k++)
            used |= strcmp(text + at, layer_tensors[k]) == 0;
        used |= in_layer && !strncmp(text + at, a->ffn_norm, strlen(a->ffn_norm)) && !strcmp(text + at + strlen(a->ffn_norm), ".weight");
        for (size_t k = 0; in_layer && c->post_norms && k < 2; k++) used |= strcmp(text + at, post_norm_tensors[k]) == 0;
        for (int k = 0; in_layer && k < LAYER_MATRICES; k++) {
            size_t n = strlen(layer_matrices[k].gguf);
            if (layer_matrices[k].ffn && c->n_experts > 0) continue;
            used |= !strncmp(text + at, layer_matrices[k].gguf, n) && !strcmp(text + at + n, ".weight");
        }
        for (size_t k = 0; in_layer && c->n_experts > 0 && k < sizeof expert_tensors / sizeof *expert_tensors; k++)
            used |= strcmp(text + at, expert_tensors[k]) == 0;
        if (!used)
            return fail("%s: tensor %s is not one run.c computes with (per layer it reads attn_norm, attn_q/k/v and "
                        "their biases, attn_output, ffn_norm and ffn_gate/up/down): a file for another kind of model?",
                        path, text);
    }
    return 0;
}

// The experts of layer l's 3-D tensor blk.l.SUFFIX.weight (rows, cols,
// n_experts: expert e's matrix the e-th slab), as n_experts Matrix records
// 3 apart from out (their kernels are chosen, and packed, with the model's).
static int gguf_experts(const Gguf *g, int l, const char *suffix, int n_experts, int rows, int cols, Matrix *out,
                        const char *path) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);
    const GgufTensor *t = gguf_tensor(g, name);
    char one[64];
    snprintf(one, sizeof one, "blk.%d.ffn_gate.0.weight", l);
    if (!t && gguf_tensor(g, one))
        return fail("%s: its experts are one tensor each (%s: an older layout); convert the model again with a "
                    "current llama.cpp", path, one);
    if (!t) return fail("%s: tensor %s is missing", path, name);
    if (t->n_dims != 3 || t->dims[0] != (uint64_t)cols || t->dims[1] != (uint64_t)rows || t->dims[2] != (uint64_t)n_experts)
        return fail("%s: tensor %s has the wrong shape (expected %d experts of %d x %d)", path, name, n_experts, rows, cols);
    if (!type_supported(t->type))
        return fail("%s: tensor %s has type %s (%u), which run.c does not compute with (it reads %s)", path, name,
                    type_name(t->type), t->type, supported_type_names());
    if (gguf_check_blocks(g, t, path)) return -1;
    size_t slab = (size_t)rows * type_row_bytes((int)t->type, cols);
    for (int e = 0; e < n_experts; e++)
        out[3 * e] = (Matrix){.data = g->data + t->offset + e * slab, .type = (int)t->type, .rows = rows, .cols = cols};
    return 0;
}

static int gguf_weights(TransformerWeights *w, const Config *c, const Gguf *g, const char *path) {
    int q_dim = c->n_heads * c->head_size;
    const Architecture *a = gguf_architecture(g);
    char name[64];
    if (gguf_weight(g, "token_embd.weight", c->vocab_size, c->dim, &w->token_embedding, NULL, path) ||
        gguf_weight(g, "output_norm.weight", 1, c->dim, NULL, &w->rms_final, path))
        return -1;
    if (c->shared_classifier) w->wcls = w->token_embedding;
    else if (gguf_weight(g, "output.weight", c->vocab_size, c->dim, &w->wcls, NULL, path)) return -1;
    if (gguf_tensor(g, "rope_freqs.weight") &&
        gguf_weight(g, "rope_freqs.weight", 1, c->head_size / 2, NULL, &w->rope_freqs, path))
        return -1;
    for (int l = 0; l < c->n_layers; l++) {
        LayerWeights *lw = &w->layers[l];
        int n_exp = c->n_experts > 0 ? c->n_experts : 1; // (an expert's bias in a dense model is refused)
        struct { const char *name; int rows, cols; const float **bias; } optional[] = {
            {"attn_q.bias", 1, q_dim, &lw->bq}, {"attn_k.bias", 1, kv_dim(c), &lw->bk},
            {"attn_v.bias", 1, kv_dim(c), &lw->bv}, {"attn_output.bias", 1, c->dim, &lw->bo},
            {"attn_sinks.weight", 1, c->n_heads, &lw->sinks}, {"ffn_gate_inp.bias", 1, n_exp, &lw->router_bias},
            {"ffn_gate_exps.bias", n_exp, c->hidden_dim, &lw->expert_b1},
            {"ffn_down_exps.bias", n_exp, c->dim, &lw->expert_b2},
            {"ffn_up_exps.bias", n_exp, c->hidden_dim, &lw->expert_b3}};
        for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++) { // for any architecture that has them
            snprintf(name, sizeof name, "blk.%d.%s", l, optional[i].name);
            if (gguf_tensor(g, name) && gguf_weight(g, name, optional[i].rows, optional[i].cols, NULL, optional[i].bias, path))
                return -1;
        }
        struct { const char *suffix; const float **norm; } head_norms[] = {{"attn_q_norm", &lw->q_norm},
                                                                          {"attn_k_norm", &lw->k_norm}};
        for (size_t i = 0; i < 2; i++) { // qwen3's and gemma3's, optional
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, head_norms[i].suffix);
            if (gguf_tensor(g, name) && gguf_weight(g, name, 1, c->head_size, NULL, head_norms[i].norm, path)) return -1;
        }
        const float **post[2] = {&lw->post_att_norm, &lw->post_ffn_norm};
        for (int i = 0; c->post_norms && i < 2; i++) { // required where the architecture has them
            snprintf(name, sizeof name, "blk.%d.%s", l, post_norm_tensors[i]);
            if (gguf_weight(g, name, 1, c->dim, NULL, post[i], path)) return -1;
        }
        int period = c->window_period;
        lw->window = c->window > 0 && l % period < period - 1 ? c->window : 0;
        struct { const char *suffix; const float **norm; } norms[] = {{"attn_norm", &lw->rms_att}, {a->ffn_norm, &lw->rms_ffn}};
        for (int i = 0; i < 2; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, norms[i].suffix);
            if (gguf_weight(g, name, 1, c->dim, NULL, norms[i].norm, path)) return -1;
        }
        for (int k = 0; k < LAYER_MATRICES; k++) {
            const LayerMatrix *lm = &layer_matrices[k];
            if (lm->ffn && c->n_experts > 0) continue; // experts instead
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, lm->gguf);
            if (gguf_weight(g, name, config_size(c, lm->rows), config_size(c, lm->cols), layer_matrix(lw, k), NULL, path))
                return -1;
        }
        if (c->n_experts > 0) { // the router and the experts instead of the dense feed-forward
            Matrix *experts = w->experts + (size_t)l * c->n_experts * 3;
            lw->experts = experts;
            snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
            if (gguf_weight(g, name, c->n_experts, c->dim, &lw->router, NULL, path) ||
                gguf_experts(g, l, "ffn_gate_exps", c->n_experts, c->hidden_dim, c->dim, experts, path) ||
                gguf_experts(g, l, "ffn_down_exps", c->n_experts, c->dim, c->hidden_dim, experts + 1, path) ||
                gguf_experts(g, l, "ffn_up_exps", c->n_experts, c->hidden_dim, c->dim, experts + 2, path))
                return -1;
            lw->router.kernel = lw->router.type == TYPE_F32 ? KERNEL_F32 : KERNEL_ROWS; // small: not repacked
        }
    }
    return gguf_check_used(g, c, path);
}

/* The byte-level BPE vocabulary of a GGUF file (tokenizer.ggml.model
   "gpt2"): tokens spelled with GPT-2's printable stand-ins for bytes (the
   space is U+0120 'Ġ'); merges "A B", whose order is their rank;
   token_type; BOS/EOS ids; add_bos_token; and pre, which names the
   pre-tokenizer. */

// tokenizer.ggml.pre as llama.cpp's converter writes it. Llama 3's
// tokenizer.json also sets ignore_merges: a word that is a token is taken whole.
static const struct { const char *name; int pre, ignore_merges; } bpe_pre_names[] = {
    {"llama-bpe", PRE_LLAMA3, 1}, {"llama3", PRE_LLAMA3, 1}, {"llama-v3", PRE_LLAMA3, 1},
    {"dbrx", PRE_LLAMA3, 0},      {"smaug-bpe", PRE_LLAMA3, 0},
    {"qwen2", PRE_QWEN2, 0},      {"stablelm2", PRE_QWEN2, 0},
    {"gpt-2", PRE_GPT2, 0},       {"mpt", PRE_GPT2, 0},         {"olmo", PRE_GPT2, 0},
    {"smollm", PRE_DIGITS, 0},    {"starcoder", PRE_DIGITS, 0}, {"refact", PRE_DIGITS, 0},
    {"gpt-4o", PRE_O200K, 1}, // tiktoken takes a word that is a token whole
};

/* GPT-2 spells each byte as one code point: printable Latin-1 bytes
   (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) as themselves, the other 68 bytes, in
   order, as U+0100 onwards. Loading needs only the way back: the byte a
   code point stands for, or -1. */
static int char_byte(uint32_t c) {
    if ((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) return (int)c;
    if (c < 0x100 || c >= 0x100 + 68) return -1;
    int n = (int)(c - 0x100);
    return n <= 32 ? n : n <= 66 ? 0x7F + (n - 33) : 0xAD;
}

// Writes the raw bytes that GPT-2-spelled s[0..n) stands for into out (room
// for n) and returns their count, or -1 if s is not made of stand-ins.
static int gpt2_bytes(const char *s, size_t n, char *out) {
    int k = 0;
    for (size_t i = 0; i < n;) {
        int clen = utf8_char((const unsigned char *)s + i, n - i);
        int b = char_byte(utf8_decode((const unsigned char *)s + i, clen));
        if (b < 0 || (clen == 1 && (unsigned char)s[i] >= 0x80)) return -1;
        out[k++] = (char)b;
        i += (size_t)clen;
    }
    return k;
}

// The array key, of count values (0: any) of type or type2; NULL if not so.
static const GgufValue *gguf_array(const Gguf *g, const char *key, uint32_t type, uint32_t type2, uint64_t count) {
    const GgufValue *v = gguf_find(g, key);
    if (!v || v->type != GGUF_ARRAY || (v->elem_type != type && v->elem_type != type2)) return NULL;
    return count == 0 || v->count == count ? v : NULL;
}

// Fills vocab/piece_len/kind from the tokens and their types: normal
// tokens as raw bytes, the others as their text.
static int bpe_tokens(Tokenizer *tk, const GgufValue *tokens, const GgufValue *types, const char *path) {
    const unsigned char *p = tokens->elems; // lengths checked by gguf_parse
    for (int i = 0; i < tk->vocab_size; i++) {
        size_t n = (size_t)read_u64(p);
        const char *text = (const char *)p + 8;
        p += 8 + n;
        if (n > INT_MAX) return fail("%s: token %d is %zu bytes long", path, i, n);
        int type = types ? read_i32(types->elems + 4 * (size_t)i) : TOKEN_NORMAL;
        tk->kind[i] = type == 2 || type == 3 ? TOKEN_CONTROL : type == 4 ? TOKEN_USER_DEFINED
                    : type == 5 ? TOKEN_UNUSED : TOKEN_NORMAL;
        char *out = tk->vocab[i] = malloc(n + 1);
        if (!out) return fail("%s: out of memory", path);
        int k = tk->kind[i] == TOKEN_NORMAL ? gpt2_bytes(text, n, out) : -1;
        if (k < 0) { // not a normal token, or one no text can make
            if (tk->kind[i] == TOKEN_NORMAL) tk->kind[i] = TOKEN_UNUSED;
            memcpy(out, text, n);
            k = (int)n;
        }
        out[k] = '\0';
        tk->piece_len[i] = k;
    }
    return 0;
}

// Fills the merge table from tokenizer.ggml.merges. A merge ranks by its
// place in the list; a repeated pair keeps its first rank. A merge whose
// result is not a normal token can never apply and is skipped. Merges are
// known by what they make, so loading looks up one token per merge.
static int bpe_merges(Tokenizer *tk, const GgufValue *merges, const char *path) {
    if (merges->count >= (1u << 24)) // ranks must stay exact as float scores
        return fail("%s: tokenizer.ggml.merges has %llu merges (at most 2^24)", path,
                    (unsigned long long)merges->count);
    tk->pairs_size = 16;
    while (tk->pairs_size < (size_t)merges->count + merges->count / 2) tk->pairs_size *= 2; // at most 2/3 full
    tk->pairs = malloc(tk->pairs_size * sizeof *tk->pairs);
    if (!tk->pairs) return fail("%s: out of memory", path);
    for (size_t i = 0; i < tk->pairs_size; i++) tk->pairs[i].merged = -1;
    char *raw = NULL;
    size_t raw_size = 0;
    const unsigned char *p = merges->elems;
    for (int rank = 0; rank < (int)merges->count; rank++) {
        size_t n = (size_t)read_u64(p);
        const char *text = (const char *)p + 8;
        p += 8 + n;
        if (n > raw_size) {
            free(raw);
            raw_size = 2 * n;
            raw = malloc(raw_size);
            if (!raw) return fail("%s: out of memory", path);
        }
        const char *space = n > 1 ? memchr(text + 1, ' ', n - 1) : NULL; // "A B"; A is never empty
        if (!space) { free(raw); return fail("%s: merge %d is not two tokens \"A B\"", path, rank); }
        size_t n_left = (size_t)(space - text);
        int k_left = gpt2_bytes(text, n_left, raw);
        int k_right = k_left < 0 ? -1 : gpt2_bytes(space + 1, n - n_left - 1, raw + k_left);
        if (k_right < 0) continue;
        // its parts are tokens too: symbols are always tokens (encode checks)
        int merged = lookup_piece(tk, raw, (size_t)(k_left + k_right));
        if (merged < 0) continue;
        BpePair *slot = &tk->pairs[pair_slot(tk, merged, k_left)];
        if (slot->merged < 0) *slot = (BpePair){.merged = merged, .left_len = k_left, .rank = rank};
    }
    free(raw);
    return 0;
}

// The trie node reached from node by byte b, added if new; -1 if the trie
// (room for its capacity) is full.
static int user_trie_step(Tokenizer *tk, int node, unsigned char b, int capacity) {
    int *link = &tk->user_trie[node].child;
    while (*link >= 0 && tk->user_trie[*link].byte != b) link = &tk->user_trie[*link].sibling;
    if (*link >= 0) return *link;
    if (tk->n_user_nodes == capacity) return -1;
    tk->user_trie[tk->n_user_nodes] = (UserNode){.child = -1, .sibling = -1, .id = -1, .byte = b};
    *link = tk->n_user_nodes;
    return tk->n_user_nodes++;
}

// The user-defined tokens (of either kind of vocabulary) and the trie of
// their spellings in text, so that encoding finds the longest at a place in
// one walk (Gemma has thousands). A SentencePiece piece's space is spelled
// U+2581, as the piece was written; of two tokens spelled alike the first
// counts.
static int bpe_user_tokens(Tokenizer *tk, const char *path) {
    int n = 0;
    size_t bytes = 1;
    for (int id = 0; id < tk->vocab_size; id++)
        if (tk->kind[id] == TOKEN_USER_DEFINED && tk->piece_len[id] > 0) {
            n++;
            for (int i = 0; i < tk->piece_len[id]; i++) bytes += tk->vocab[id][i] == ' ' && !tk->byte_level ? 3 : 1;
        }
    if (bytes > INT_MAX) return fail("%s: the user-defined tokens are too long", path);
    tk->user_tokens = malloc((size_t)n * sizeof(int) + 1);
    tk->user_trie = malloc(bytes * sizeof *tk->user_trie);
    if (!tk->user_tokens || !tk->user_trie) return fail("%s: out of memory", path);
    tk->user_trie[0] = (UserNode){.child = -1, .sibling = -1, .id = -1};
    tk->n_user_nodes = 1;
    for (int id = 0; id < tk->vocab_size; id++) {
        if (tk->kind[id] != TOKEN_USER_DEFINED || tk->piece_len[id] == 0) continue;
        tk->user_tokens[tk->n_user_tokens++] = id;
        int node = 0;
        for (int i = 0; i < tk->piece_len[id] && node >= 0; i++) {
            unsigned char c = (unsigned char)tk->vocab[id][i];
            if (c == ' ' && !tk->byte_level) // U+2581
                for (int k = 0; k < 3 && node >= 0; k++) node = user_trie_step(tk, node, "\xE2\x96\x81"[k], (int)bytes);
            else node = user_trie_step(tk, node, c, (int)bytes);
        }
        if (node < 0) return fail("%s: the user-defined tokens do not fit their trie", path); // cannot happen
        if (tk->user_trie[node].id < 0) tk->user_trie[node].id = id;
    }
    return 0;
}

static int gguf_vocab_bpe(Tokenizer *tk, const Gguf *g, const char *path, int vocab_size) {
    size_t len;
    const char *pre = gguf_string(g, "tokenizer.ggml.pre", &len);
    if (!pre) return fail("%s: byte-level BPE tokenizer without tokenizer.ggml.pre (its pre-tokenizer)", path);
    int found = -1;
    for (size_t i = 0; i < sizeof bpe_pre_names / sizeof *bpe_pre_names; i++)
        if (strlen(bpe_pre_names[i].name) == len && memcmp(bpe_pre_names[i].name, pre, len) == 0) found = (int)i;
    if (found < 0)
        return fail("%s: pre-tokenizer '%.*s' is not supported (supported: llama-bpe, dbrx, smaug-bpe, qwen2, "
                    "stablelm2, gpt-2, mpt, olmo, smollm, starcoder, refact, gpt-4o)", path, (int)(len < 64 ? len : 64), pre);
    const GgufValue *tokens = gguf_array(g, "tokenizer.ggml.tokens", GGUF_STRING, GGUF_STRING, 0);
    if (!tokens) return fail("%s: tokenizer.ggml.tokens is missing", path);
    if (tokens->count != (uint64_t)vocab_size)
        return fail("%s: tokenizer has %llu tokens but the model has vocab_size %d (tokenizer of another model?)",
                    path, (unsigned long long)tokens->count, vocab_size);
    const GgufValue *types = gguf_array(g, "tokenizer.ggml.token_type", GGUF_I32, GGUF_U32, tokens->count);
    if (!types && gguf_find(g, "tokenizer.ggml.token_type"))
        return fail("%s: tokenizer.ggml.token_type does not match the tokens", path);
    const GgufValue *merges = gguf_array(g, "tokenizer.ggml.merges", GGUF_STRING, GGUF_STRING, 0);
    if (!merges) return fail("%s: tokenizer.ggml.merges is missing", path);
    if (tokenizer_alloc(tk, vocab_size) != 0) return fail("%s: out of memory", path);
    tk->byte_level = 1;
    tk->pre = bpe_pre_names[found].pre;
    tk->ignore_merges = bpe_pre_names[found].ignore_merges;
    if (bpe_tokens(tk, tokens, types, path) != 0) return -1;
    if (index_pieces(tk) != 0) return fail("%s: out of memory", path);
    for (int id = 0; id < vocab_size; id++)
        if (tk->kind[id] == TOKEN_NORMAL && tk->piece_len[id] == 1 && lookup_piece(tk, tk->vocab[id], 1) == id)
            tk->byte_token[(unsigned char)tk->vocab[id][0]] = id;
    if (bpe_merges(tk, merges, path) != 0 || bpe_user_tokens(tk, path) != 0) return -1;
    int64_t bos, eos, add_bos;
    if (gguf_int(g, "tokenizer.ggml.bos_token_id", -1, &bos) || gguf_int(g, "tokenizer.ggml.eos_token_id", -1, &eos) ||
        gguf_int(g, "tokenizer.ggml.add_bos_token", tk->ignore_merges, &add_bos) || bos < -1 || bos >= vocab_size ||
        eos < -1 || eos >= vocab_size || (add_bos && bos < 0))
        return fail("%s: tokenizer.ggml BOS/EOS ids or add_bos_token are invalid", path);
    tk->bos_id = (int)bos;
    tk->eos_id = (int)eos;
    tk->add_bos = add_bos != 0;
    return 0;
}

// The SentencePiece vocabulary of a GGUF file (tokenizer.ggml.model
// "llama"): tokenizer.ggml.* arrays, pieces spelled with U+2581, which
// become spaces here as in tokenizer.bin.
static int gguf_vocab_sentencepiece(Tokenizer *tk, const Gguf *g, const char *path, int vocab_size) {
    const GgufValue *tokens = gguf_find(g, "tokenizer.ggml.tokens");
    const GgufValue *scores = gguf_find(g, "tokenizer.ggml.scores");
    const GgufValue *types = gguf_find(g, "tokenizer.ggml.token_type");
    if (!tokens || tokens->type != GGUF_ARRAY || tokens->elem_type != GGUF_STRING)
        return fail("%s: tokenizer.ggml.tokens is missing", path);
    if (tokens->count != (uint64_t)vocab_size)
        return fail("%s: tokenizer has %llu tokens but the model has vocab_size %d (tokenizer of another model?)",
                    path, (unsigned long long)tokens->count, vocab_size);
    if ((scores && (scores->type != GGUF_ARRAY || scores->elem_type != GGUF_F32 || scores->count != tokens->count)) ||
        (types && (types->type != GGUF_ARRAY || (types->elem_type != GGUF_I32 && types->elem_type != GGUF_U32) ||
                   types->count != tokens->count)))
        return fail("%s: tokenizer.ggml.scores or token_type does not match the tokens", path);
    if (tokenizer_alloc(tk, vocab_size) != 0) return fail("%s: out of memory", path);
    const unsigned char *p = tokens->elems; // checked by gguf_parse
    for (int i = 0; i < vocab_size; i++) {
        size_t n = (size_t)read_u64(p);
        const char *piece = (const char *)p + 8;
        p += 8 + n;
        char *out = tk->vocab[i] = malloc(n + 1);
        if (!out) return fail("%s: out of memory", path);
        size_t k = 0;
        for (size_t j = 0; j < n; j++) {
            if (j + 2 < n && memcmp(piece + j, "\xE2\x96\x81", 3) == 0) { out[k++] = ' '; j += 2; }
            else out[k++] = piece[j];
        }
        out[k] = '\0';
        tk->piece_len[i] = (int)k;
        tk->scores[i] = scores ? read_f32(scores->elems + 4 * (size_t)i) : 0.0f;
        int type = types ? read_i32(types->elems + 4 * (size_t)i) : 0;
        // user-defined pieces (4) merge like normal ones and are also found
        // whole in the text; unused ones (5) never merge
        tk->kind[i] = type == 1 ? TOKEN_NORMAL : type == 4 && k > 0 ? TOKEN_USER_DEFINED : type == 2 ? TOKEN_UNKNOWN
                    : type == 3 || type == 5 ? TOKEN_CONTROL
                    : type == 6 && is_byte_piece(out, (int)k) ? TOKEN_BYTE : guess_kind(out, (int)k);
    }
    if (index_vocab(tk) != 0) return fail("%s: out of memory", path);
    if (bpe_user_tokens(tk, path) != 0) return -1;
    int64_t bos, eos, add_bos, add_prefix;
    if (gguf_int(g, "tokenizer.ggml.bos_token_id", 1, &bos) || gguf_int(g, "tokenizer.ggml.eos_token_id", 2, &eos) ||
        gguf_int(g, "tokenizer.ggml.add_bos_token", 1, &add_bos) ||
        gguf_int(g, "tokenizer.ggml.add_space_prefix", 1, &add_prefix) || bos < 0 || bos >= vocab_size || eos < 0 ||
        eos >= vocab_size)
        return fail("%s: tokenizer.ggml BOS/EOS ids or flags are invalid", path);
    tk->bos_id = (int)bos;
    tk->eos_id = (int)eos;
    tk->add_bos = add_bos != 0;
    tk->add_dummy_prefix = add_prefix != 0;
    return 0;
}

static void add_eog(Tokenizer *tk, int64_t id) {
    if (id < 0 || id >= tk->vocab_size || id == tk->eos_id || tk->n_eog == MAX_EOG) return;
    for (int i = 0; i < tk->n_eog; i++)
        if (tk->eog[i] == id) return;
    tk->eog[tk->n_eog++] = (int)id;
}

// The end-of-generation tokens besides EOS, as llama.cpp finds them: the
// EOT and EOM ids the file names, and every token spelled as one of the
// end-of-turn markers models use (Llama 3's <|eot_id|> and <|end_of_text|>,
// ChatML's <|im_end|>, Qwen's <|endoftext|>, harmony's <|return|> and
// <|call|>, ...). In harmony (gpt-oss) <|end|> ends a message, not the
// reply: with <|return|> and <|call|> there, it is not one of them.
static void gguf_eog(Tokenizer *tk, const Gguf *g) {
    static const char *const markers[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                          "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<|return|>", "<|call|>"};
    int64_t id;
    if (gguf_int(g, "tokenizer.ggml.eot_token_id", -1, &id) == 0) add_eog(tk, id);
    if (gguf_int(g, "tokenizer.ggml.eom_token_id", -1, &id) == 0) add_eog(tk, id);
    for (int i = 0; i < tk->vocab_size; i++)
        for (size_t m = 0; m < sizeof markers / sizeof *markers; m++)
            if (tk->vocab[i][0] == '<' || tk->vocab[i][0] == '_')
                if (!strcmp(tk->vocab[i], markers[m])) add_eog(tk, i);
    int end = token_spelled(tk, "<|end|>");
    if (end < 0 || token_spelled(tk, "<|return|>") < 0 || token_spelled(tk, "<|call|>") < 0) return;
    for (int i = 0; i < tk->n_eog; i++)
        if (tk->eog[i] == end) tk->eog[i] = tk->eog[--tk->n_eog];
}

// The vocabulary of a GGUF file: SentencePiece or byte-level BPE.
// vocab_size 0: as many tokens as the file holds (a vocabulary on its own).
static int gguf_vocab(Tokenizer *tk, const Gguf *g, const char *path, int vocab_size) {
    size_t len;
    const char *model = gguf_string(g, "tokenizer.ggml.model", &len);
    if (!model) return fail("%s: GGUF file has no tokenizer (tokenizer.ggml.model); give one with -z", path);
    const GgufValue *tokens = gguf_find(g, "tokenizer.ggml.tokens");
    if (vocab_size == 0 && tokens && tokens->type == GGUF_ARRAY && tokens->count > 0 && tokens->count <= INT32_MAX)
        vocab_size = (int)tokens->count;
    int err;
    if (len == 5 && memcmp(model, "llama", 5) == 0) err = gguf_vocab_sentencepiece(tk, g, path, vocab_size);
    else if (len == 4 && memcmp(model, "gpt2", 4) == 0) err = gguf_vocab_bpe(tk, g, path, vocab_size);
    else
        return fail("%s: tokenizer '%.*s' is not supported (SentencePiece 'llama' and byte-level BPE 'gpt2' are)",
                    path, (int)(len < 64 ? len : 64), model);
    if (err) return -1;
    tk->ids_known = 1;
    gguf_eog(tk, g);
    const char *template = gguf_string(g, "tokenizer.chat_template", &len);
    if (template) {
        tk->chat_template = recognize_template(template, len);
        tk->template_early = tk->chat_template == TEMPLATE_DEEPSEEK_R1 && deepseek_r1_early(template, len);
    }
    return 0;
}

static int tokenizer_open_gguf(Tokenizer *tk, const char *path, int vocab_size) {
    void *map;
    size_t size;
    if (map_file(path, &map, &size) != 0) return -1;
    Gguf g;
    int err = gguf_parse(&g, map, size, path);
    if (!err) {
        err = gguf_vocab(tk, &g, path, vocab_size);
        gguf_free(&g);
    }
    unmap_file(map, size);
    if (err) tokenizer_close(tk);
    return err;
}

// 1 if path is a GGUF file with no tensors (a vocabulary-only file).
static int gguf_without_tensors(const char *path) {
    unsigned char header[24];
    FILE *f = fopen(path, "rb");
    int n = f ? (int)fread(header, 1, sizeof header, f) : 0;
    if (f) fclose(f);
    return n == 24 && (uint32_t)read_i32(header) == GGUF_MAGIC && read_u64(header + 8) == 0;
}

// Reads a tokenizer that must hold exactly vocab_size tokens (the model's):
// llama2.c's tokenizer.bin, or the vocabulary inside a GGUF file.
int tokenizer_open(Tokenizer *tk, const char *path, int vocab_size) {
    memset(tk, 0, sizeof *tk);
    if (check_input(path) != 0) return -1;
    FILE *f = fopen(path, "rb");
    if (!f) return fail("%s: cannot open: %s", path, strerror(errno));
    unsigned char magic[16];
    size_t got = fread(magic, 1, sizeof magic, f);
    int is_gguf = got >= 4 && (uint32_t)read_i32(magic) == GGUF_MAGIC;
    rewind(f);
    if (is_gguf) { fclose(f); return tokenizer_open_gguf(tk, path, vocab_size); }
    int kind = file_kind(magic, got);
    if (kind != FILE_OTHER && kind != FILE_TOKENIZER_BIN) { fclose(f); return fail("%s: %s", path, file_advice(kind)); }
    if (tokenizer_alloc(tk, vocab_size) != 0) { fclose(f); return fail("%s: out of memory", path); }
    unsigned char word[4];
    int err = 0;
    if (fread(word, 1, 4, f) != 4) err = fail("%s: too short for a tokenizer (no header)", path);
    for (int i = 0; i < vocab_size && !err; i++) {
        unsigned char entry[8];
        if (fread(entry, 1, 8, f) != 8) {
            err = fail("%s: ends after %d tokens but the model has vocab_size %d (tokenizer of another model?)",
                       path, i, vocab_size);
            break;
        }
        tk->scores[i] = read_f32(entry);
        int len = read_i32(entry + 4);
        if (len < 0 || len > 65536 || !isfinite(tk->scores[i])) {
            err = fail("%s: token %d has a bad length %d or score: not a llama2.c tokenizer.bin (a model?)", path, i, len);
            break;
        }
        tk->vocab[i] = malloc((size_t)len + 1);
        if (!tk->vocab[i]) { err = fail("%s: out of memory", path); break; }
        if (fread(tk->vocab[i], 1, (size_t)len, f) != (size_t)len) {
            err = fail("%s: ends inside token %d of %d (truncated)", path, i, vocab_size);
            break;
        }
        tk->vocab[i][len] = '\0';
        tk->piece_len[i] = len;
        tk->kind[i] = guess_kind(tk->vocab[i], len);
    }
    if (!err && fgetc(f) != EOF)
        err = fail("%s: holds more tokens than the model's vocab_size %d (tokenizer of another model?)",
                   path, vocab_size);
    fclose(f);
    if (!err && index_vocab(tk) != 0) err = fail("%s: out of memory", path);
    if (err) tokenizer_close(tk);
    return err;
}

void transformer_close(Transformer *t) {
    free_run_state(&t->state);
    free(t->packed);
    free(t->weights.layers);
    free(t->weights.experts);
    if (t->map) unmap_file(t->map, t->map_size);
    memset(t, 0, sizeof *t);
}

static int gguf_open_model(Transformer *t, const char *path) {
    Gguf g;
    if (gguf_parse(&g, t->map, t->map_size, path) != 0) { transformer_close(t); return -1; }
    Config *c = &t->config;
    int err = gguf_config(c, &g, path);
    if (!err) err = check_config(c, path);
    if (!err && !(t->weights.layers = calloc((size_t)c->n_layers, sizeof(LayerWeights))))
        err = fail("%s: out of memory", path);
    if (!err && c->n_experts > 0 && !(t->weights.experts = calloc((size_t)c->n_layers * c->n_experts * 3, sizeof(Matrix))))
        err = fail("%s: out of memory", path);
    if (!err) err = gguf_weights(&t->weights, c, &g, path);
    gguf_free(&g);
    return err;
}

// Maps a checkpoint (llama2.c version 0, ours, or GGUF), checks it
// completely and points the weights into it. 0 ok; -1 with error_message.
static int load_weights(Transformer *t, const char *path) {
    if (map_file(path, &t->map, &t->map_size) != 0) return -1;
    const unsigned char *h = t->map;
    Config *c = &t->config;
    t->is_gguf = t->map_size >= 4 && (uint32_t)read_i32(h) == GGUF_MAGIC;
    if (t->is_gguf) return gguf_open_model(t, path);
    int runc = t->map_size >= 4 && (uint32_t)read_i32(h) == RUNC_MAGIC;
    int err = runc ? parse_header_runc(c, h, t->map_size, path) : parse_header_v0(c, h, t->map_size, path);
    if (err == 0) err = check_config(c, path);
    // these formats' heads split dim (a head size of its own is GGUF's alone)
    if (err == 0 && c->dim % c->n_heads != 0)
        err = fail("%s: dim %d is not a multiple of n_heads %d", path, c->dim, c->n_heads);
    if (err == 0 && c->head_size != c->dim / c->n_heads)
        err = fail("%s: head_size %d is not dim / n_heads = %d", path, c->head_size, c->dim / c->n_heads);
    const unsigned char *types = !err && runc && read_i32(h + 4) == RUNC_VERSION_TYPES ? h + RUNC_HEADER_SIZE : NULL;
    if (types && runc_check_types(types, c, t->map_size, path) != 0) return -1;

    // Size everything first (nothing is read), then point into the map.
    uint64_t header = runc ? RUNC_HEADER_SIZE : V0_HEADER_SIZE, align = runc ? RUNC_ALIGN : 1;
    if (types) header += 4 * (uint64_t)runc_matrix_count(c);
    TensorWalk walk = {.base = NULL, .offset = header, .align = align, .types = types};
    TensorStarts starts;
    uint64_t expected = err ? 0 : runc ? walk_runc(&walk, &starts, c) : walk_v0(&walk, &starts, c);
    if (!err && expected != t->map_size)
        err = fail("%s: file is %zu bytes but its header describes %llu bytes (%s)", path, t->map_size,
                   (unsigned long long)expected, t->map_size < expected ? "truncated" : "extra bytes at the end");
    // a file that is no checkpoint at all: say what it is instead
    const char *what = err && !runc ? file_advice(file_kind(h, t->map_size)) : NULL;
    if (what) return fail("%s: %s", path, what);
    if (err) return -1;
    t->weights.layers = calloc((size_t)c->n_layers, sizeof(LayerWeights));
    if (!t->weights.layers) return fail("%s: out of memory", path);
    walk = (TensorWalk){.base = t->map, .offset = header, .align = align, .types = types};
    if (runc) walk_runc(&walk, &starts, c);
    else walk_v0(&walk, &starts, c);
    point_weights(&t->weights, &starts, c, types);
    return runc_check_blocks(&t->weights, c, path);
}

// The checkpoint alone: its config (with a context of max_context
// positions: 0, or more than the model's, keeps the model's own), its
// tokenizer's metadata and the mapped weights, neither packed nor with a run
// state. What -m tokenize and -m quantize need: a 7B model's packing alone
// takes seconds.
int transformer_open_mapped(Transformer *t, const char *path, int max_context) {
    memset(t, 0, sizeof *t);
    if (load_weights(t, path) != 0) { transformer_close(t); return -1; }
    if (max_context > 0 && max_context < t->config.seq_len) t->config.seq_len = max_context;
    return 0;
}

// Loads a checkpoint, packs its weights for their kernels and allocates the
// run state. kv_type: the KV cache's, TYPE_F32 (exact) or TYPE_F16 (half the
// memory).
int transformer_open_kv(Transformer *t, const char *path, int max_context, int kv_type) {
    if (transformer_open_mapped(t, path, max_context) != 0) return -1;
    if (choose_kernels(t, path) != 0) { transformer_close(t); return -1; }
    if (alloc_run_state(&t->state, &t->config, t->weights.layers, kv_type) != 0) {
        fail("%s: out of memory for a context of %d positions (try a smaller -c)", path, t->config.seq_len);
        transformer_close(t);
        return -1;
    }
    return 0;
}

int transformer_open_context(Transformer *t, const char *path, int max_context) {
    return transformer_open_kv(t, path, max_context, TYPE_F32);
}

int transformer_open(Transformer *t, const char *path) { return transformer_open_context(t, path, 0); }

/* ----------------------------------------------------------------------------
   Quantize: rewrites a checkpoint (any format run.c reads) in our format with
   its matrices in any type the weight types' table can write (quantize),
   rounding as GGUF does. Norms stay F32. */

// quantize_padded for a writer: -1 if a value is not finite (nothing
// sensible to round it to).
static int quantize_row(void *out, const float *x, int n, int type) {
    if (!all_finite(x, (size_t)n)) return -1;
    quantize_padded(out, x, n, type);
    return 0;
}

// Writes zeros up to the next multiple of RUNC_ALIGN.
static int write_padding(FILE *f) {
    static const char zeros[RUNC_ALIGN];
    long at = ftell(f);
    size_t pad = at < 0 ? 0 : (RUNC_ALIGN - (size_t)at % RUNC_ALIGN) % RUNC_ALIGN;
    return at >= 0 && fwrite(zeros, 1, pad, f) == pad ? 0 : fail("write failed: %s", strerror(errno));
}

static int write_floats(FILE *f, const float *x, int n) {
    return fwrite(x, sizeof(float), (size_t)n, f) == (size_t)n ? 0 : fail("write failed: %s", strerror(errno));
}

// Rows rounded at once, side by side on the threads: each row is rounded on
// its own, so the bytes written do not depend on the thread count.
enum { WRITE_ROWS = 64 };

// Where a written tensor's values come from: row r of it as cols floats.
typedef void (*RowSource)(float *row, int64_t r, int cols, const void *from);

static void matrix_rows(float *row, int64_t r, int cols, const void *from) {
    (void)cols;
    dequantize_row(row, from, (int)r);
}

// Writes n_rows rows of cols values from source, rounded into type; rows:
// room for WRITE_ROWS rows of floats, out: for as many rows in type. what:
// the tensor, for the message when a weight is not finite.
static int write_rows(FILE *f, int64_t n_rows, int cols, int type, RowSource source, const void *from, float *rows,
                      unsigned char *out, const char *what) {
    size_t bytes = type_row_bytes(type, cols);
    for (int64_t i = 0; i < n_rows; i += WRITE_ROWS) {
        int n = n_rows - i < WRITE_ROWS ? (int)(n_rows - i) : WRITE_ROWS, bad = 0;
#pragma omp parallel for reduction(| : bad)
        for (int r = 0; r < n; r++) {
            float *row = rows + (size_t)r * cols;
            source(row, i + r, cols, from);
            bad |= quantize_row(out + (size_t)r * bytes, row, cols, type) != 0;
        }
        if (bad)
            return fail("%s has a weight that is not finite (NaN or infinity) in rows %lld-%lld", what, (long long)i,
                        (long long)(i + n - 1));
        if (fwrite(out, 1, (size_t)n * bytes, f) != (size_t)n * bytes) return fail("write failed: %s", strerror(errno));
        if (interrupted) return fail("interrupted (Ctrl-C); nothing written");
    }
    return 0;
}

// name: the matrix, as messages call it ("wq" of layer, or "the classifier"
// when layer < 0).
static int write_matrix(FILE *f, const Matrix *m, int type, float *rows, unsigned char *out, const char *name, int layer) {
    char what[64];
    if (layer >= 0) snprintf(what, sizeof what, "layer %d's %s", layer, name);
    else snprintf(what, sizeof what, "%s", name);
    return write_rows(f, m->rows, m->cols, type, matrix_rows, m, rows, out, what);
}

// The tensors of our format, in order (README), each aligned; types[i]:
// matrix i's type in runc_type's order.
static int write_runc_tensors(FILE *f, const Transformer *t, const int *types, float *rows, unsigned char *out) {
    const Config *c = &t->config;
    const TransformerWeights *w = &t->weights;
    int err = write_padding(f); // each tensor is aligned; its layers follow back to back
    for (int l = 0; l < c->n_layers && !err; l++) err = write_floats(f, w->layers[l].rms_att, c->dim);
    err = err || write_padding(f);
    for (int l = 0; l < c->n_layers && !err; l++) err = write_floats(f, w->layers[l].rms_ffn, c->dim);
    err = err || write_padding(f) || write_floats(f, w->rms_final, c->dim);
    err = err || write_padding(f) || write_matrix(f, &w->token_embedding, types[0], rows, out, "the token embedding", -1);
    for (int part = 0; part < LAYER_MATRICES && !err; part++) { // each of layer_matrices, stacked over layers
        err = write_padding(f);
        for (int l = 0; l < c->n_layers && !err; l++)
            err = write_matrix(f, layer_matrix(&w->layers[l], part), types[1 + part * c->n_layers + l], rows, out,
                               layer_matrices[part].name, l);
    }
    if (!c->shared_classifier)
        err = err || write_padding(f) ||
              write_matrix(f, &w->wcls, types[1 + LAYER_MATRICES * c->n_layers], rows, out, "the classifier", -1);
    return err ? -1 : 0;
}

static void put_i32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(u >> (8 * i));
}

/* llama-quantize's mixes: what it writes by default (no --pure, no
   importance matrix) for "Q2_K", "Q3_K_S", ..., "Q5_K_M", "MXFP4_MOE". */
enum { DTYPE_Q2_K_MIX = TYPE_COUNT, DTYPE_Q3_K_S, DTYPE_Q3_K_M, DTYPE_Q3_K_L, DTYPE_Q4_K_S, DTYPE_Q4_K_M,
       DTYPE_Q5_K_S, DTYPE_Q5_K_M, DTYPE_MXFP4_MOE, DTYPE_END };

typedef struct {
    const char *flag; // its --dtype
    const char *name; // llama-quantize's
    int base;         // TYPE_*: the type of most matrices
    int file_type;    // GGUF's general.file_type (llama.cpp's LLAMA_FTYPE_*)
} Mix;

static const Mix mixes[DTYPE_END - TYPE_COUNT] = {
    {"q2_k_mix", "Q2_K", TYPE_Q2_K, 10}, {"q3_k_s", "Q3_K_S", TYPE_Q3_K, 11}, {"q3_k_m", "Q3_K_M", TYPE_Q3_K, 12},
    {"q3_k_l", "Q3_K_L", TYPE_Q3_K, 13}, {"q4_k_s", "Q4_K_S", TYPE_Q4_K, 14}, {"q4_k_m", "Q4_K_M", TYPE_Q4_K, 15},
    {"q5_k_s", "Q5_K_S", TYPE_Q5_K, 16}, {"q5_k_m", "Q5_K_M", TYPE_Q5_K, 17},
    {"mxfp4_moe", "MXFP4_MOE", TYPE_MXFP4, 38}, // experts MXFP4, every other matrix Q8_0
};

static int is_mix(int dtype) { return dtype >= TYPE_COUNT && dtype < DTYPE_END; }

// A --dtype's name for messages: the mix's (Q4_K_M) or the type's.
static const char *dtype_name(int dtype) {
    return is_mix(dtype) ? mixes[dtype - TYPE_COUNT].name : type_name((uint32_t)dtype);
}

// general.file_type of a file quantized to dtype: the mix's, or for one type
// what llama-quantize --pure writes for it (its name for a K type is the _M
// mix's); -1 for a type llama.cpp has no file type for.
static int dtype_file_type(int dtype) {
    static const int pure[][2] = {{TYPE_F32, 0}, {TYPE_F16, 1}, {TYPE_Q4_0, 2}, {TYPE_Q4_1, 3}, {TYPE_Q8_0, 7},
                                  {TYPE_Q5_0, 8}, {TYPE_Q5_1, 9}, {TYPE_Q2_K, 10}, {TYPE_Q3_K, 12}, {TYPE_Q4_K, 15},
                                  {TYPE_Q5_K, 17}, {TYPE_Q6_K, 18}, {TYPE_IQ4_NL, 25}, {TYPE_IQ4_XS, 30},
                                  {TYPE_BF16, 32}, {TYPE_MXFP4, 38}};
    if (is_mix(dtype)) return mixes[dtype - TYPE_COUNT].file_type;
    for (size_t i = 0; i < sizeof pure / sizeof pure[0]; i++)
        if (pure[i][0] == dtype) return pure[i][1];
    return -1;
}

static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama-quantize's tensor categories, found by name as its tensor_get_category does.
enum { CAT_OTHER, CAT_TOKEN_EMBD, CAT_OUTPUT, CAT_ATTN_Q, CAT_ATTN_K, CAT_ATTN_V, CAT_ATTN_OUTPUT, CAT_FFN_UP,
       CAT_FFN_GATE, CAT_FFN_DOWN };

static int tensor_category(const char *name) {
    static const struct { const char *part; int category; } parts[] = {
        {"attn_v.weight", CAT_ATTN_V}, {"attn_k.weight", CAT_ATTN_K}, {"attn_q.weight", CAT_ATTN_Q},
        {"attn_output.weight", CAT_ATTN_OUTPUT}, {"ffn_up", CAT_FFN_UP}, {"ffn_gate", CAT_FFN_GATE},
        {"ffn_down", CAT_FFN_DOWN}};
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight")) return CAT_TOKEN_EMBD;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (strstr(name, parts[i].part)) return parts[i].category;
    return CAT_OTHER;
}

// What the mixes' rules read of a model.
typedef struct {
    int n_layers, n_heads, n_kv_heads, n_experts;
    int tied; // no output.weight: token_embd is the classifier too
} QuantShape;

/* A mix's type for a tensor, as llama-quantize's llama_tensor_get_type
   chooses it (llama.cpp, 2026) before the fallback for row lengths:
   - the classifier (output.weight, or token_embd.weight when tied): Q6_K
     (Q8_0 where rows are not whole blocks of the base type);
   - attn_v of layer i:  Q2_K: Q4_K if n_heads / n_kv_heads >= 4, else Q3_K;
     Q3_K_M: Q5_K for i < 2, else Q4_K; Q3_K_L: Q5_K; Q4_K_S: Q5_K for i < 4;
     Q4_K_M, Q5_K_M: Q6_K if use_more_bits(i, n_layers); then, in a 70B
     model (80 layers with grouped-query attention), Q3_K or Q4_K -> Q5_K;
   - ffn_down of layer i: Q2_K: Q3_K; Q3_K_M: Q5_K for i < n_layers / 16,
     else Q4_K; Q3_K_L: Q5_K; Q4_K_S: Q5_K for i < n_layers / 8; Q4_K_M,
     Q5_K_M: Q6_K if use_more_bits(i, n_layers);
   - attn_output: Q2_K: Q3_K; Q3_K_M: Q4_K; Q3_K_L: Q5_K;
   - with exactly 8 experts (Mixtral's count): attn_v and attn_k Q8_0, and
     attn_output Q5_K for Q2_K, Q3_K_S, Q3_K_M, Q4_K_S and Q4_K_M (others
     keep the base type);
   - MXFP4_MOE: expert tensors (3-D) MXFP4, every other matrix Q8_0;
   - everything else (attn_q, ffn_gate, ffn_up, an untied token_embd): the base.
   use_more_bits picks the first and last eighth of the layers and every
   third layer between (n = 32: layers 0-3, 6, 9, ..., 27, 28-31; n = 2:
   layer 1). A --dtype beyond the type ids names a mix; "q2_k" is GGUF's
   type alone (llama-quantize --pure), "q2_k_mix" the mix. */
static int mix_type(int dtype, const QuantShape *q, int category, int i, int row_len, int expert) {
    int L = q->n_layers, type = mixes[dtype - TYPE_COUNT].base, eight = q->n_experts == 8;
    int many = dtype == DTYPE_Q4_K_M || dtype == DTYPE_Q5_K_M;
    if (category == CAT_OUTPUT || (category == CAT_TOKEN_EMBD && q->tied))
        return dtype == DTYPE_MXFP4_MOE || row_len % type_traits[type].block_size ? TYPE_Q8_0 : TYPE_Q6_K;
    if (dtype == DTYPE_MXFP4_MOE) return expert ? TYPE_MXFP4 : TYPE_Q8_0;
    if (category == CAT_ATTN_V) {
        if (dtype == DTYPE_Q2_K_MIX) type = q->n_heads / q->n_kv_heads >= 4 ? TYPE_Q4_K : TYPE_Q3_K;
        if (dtype == DTYPE_Q3_K_M) type = i < 2 ? TYPE_Q5_K : TYPE_Q4_K;
        if (dtype == DTYPE_Q3_K_L || (dtype == DTYPE_Q4_K_S && i < 4)) type = TYPE_Q5_K;
        if (many && use_more_bits(i, L)) type = TYPE_Q6_K;
        if (L == 80 && q->n_heads != q->n_kv_heads && (type == TYPE_Q3_K || type == TYPE_Q4_K)) type = TYPE_Q5_K; // 70B
        if (eight) type = TYPE_Q8_0;
    } else if (category == CAT_ATTN_K) {
        if (eight) type = TYPE_Q8_0;
    } else if (category == CAT_ATTN_OUTPUT && eight) {
        if (dtype <= DTYPE_Q4_K_M && dtype != DTYPE_Q3_K_L) type = TYPE_Q5_K;
    } else if (category == CAT_ATTN_OUTPUT) {
        if (dtype == DTYPE_Q2_K_MIX) type = TYPE_Q3_K;
        if (dtype == DTYPE_Q3_K_M) type = TYPE_Q4_K;
        if (dtype == DTYPE_Q3_K_L) type = TYPE_Q5_K;
    } else if (category == CAT_FFN_DOWN) {
        if (dtype == DTYPE_Q2_K_MIX) type = TYPE_Q3_K;
        if (dtype == DTYPE_Q3_K_M) type = i < L / 16 ? TYPE_Q5_K : TYPE_Q4_K;
        if (dtype == DTYPE_Q3_K_L || (dtype == DTYPE_Q4_K_S && i < L / 8)) type = TYPE_Q5_K;
        if (many && use_more_bits(i, L)) type = TYPE_Q6_K;
    }
    return type;
}

// llama-quantize's fallback for a type whose blocks do not fit rows of
// row_len values: F16 when no fallback fits either; -1 when it has none.
static int fallback_type(int type, int row_len) {
    if (row_len % type_traits[type].block_size == 0) return type;
    int to;
    switch (type) {
    case TYPE_Q2_K: case TYPE_Q3_K: to = TYPE_Q4_0; break;
    case TYPE_Q4_K: to = TYPE_Q5_0; break;
    case TYPE_Q5_K: to = TYPE_Q5_1; break;
    case TYPE_Q6_K: to = TYPE_Q8_0; break;
    case TYPE_IQ4_XS: to = TYPE_IQ4_NL; break;
    default: return -1;
    }
    return row_len % type_traits[to].block_size ? TYPE_F16 : to;
}

// The type a quantizable tensor gets when quantizing to dtype: a type alone
// (--pure) or a mix, then the fallback; -1 if no type fits its rows.
static int tensor_dtype(int dtype, const QuantShape *q, int category, int layer, int row_len, int expert) {
    int type = is_mix(dtype) ? mix_type(dtype, q, category, layer, row_len, expert) : dtype;
    return type == TYPE_F32 || type == TYPE_F16 || type == TYPE_BF16 ? type : fallback_type(type, row_len);
}

static QuantShape quant_shape(const Config *c) {
    return (QuantShape){.n_layers = c->n_layers, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads,
                        .n_experts = c->n_experts, .tied = c->shared_classifier};
}

// The type of matrix index (runc_type's order) when quantizing to dtype.
static int matrix_dtype(int dtype, const Config *c, int index) {
    if (!is_mix(dtype)) return dtype;
    int L = c->n_layers, part = index >= 1 && index <= LAYER_MATRICES * L ? (index - 1) / L : -1, layer = (index - 1) % L;
    int category = index == 0 ? CAT_TOKEN_EMBD : CAT_OUTPUT, cols = c->dim;
    if (part >= 0) {
        char name[64];
        snprintf(name, sizeof name, "%s.weight", layer_matrices[part].gguf);
        category = tensor_category(name);
        cols = config_size(c, layer_matrices[part].cols);
    }
    QuantShape q = quant_shape(c);
    int type = tensor_dtype(dtype, &q, category, part >= 0 ? layer : 0, cols, 0);
    return type < 0 ? TYPE_F16 : type;
}

// Whether --dtype may name dtype: a type the table writes, or a mix.
static int dtype_writable(int dtype) {
    return is_mix(dtype) || (type_supported(dtype) && type_traits[dtype].quantize);
}

// The type of the first matrix of w that is quantized already, or -1.
static int quantized_type(const TransformerWeights *w, int n_layers) {
    for (int i = 0; i <= LAYER_MATRICES * n_layers; i++) {
        const Matrix *m = model_matrix((TransformerWeights *)w, n_layers, i); // only read
        if (m->type != TYPE_F32 && m->type != TYPE_F16 && m->type != TYPE_BF16) return m->type;
    }
    return -1;
}

// Writes t to out_path in our format with matrices of the given type (or
// mix). One type for all: version 1; a mix: version 2, with its table of
// types. The file appears only when complete (an Output: written beside it,
// then renamed).
int quantize_mode(const Transformer *t, const char *in_path, const char *out_path, int dtype) {
    const Config *c = &t->config;
    if (same_file(out_path, in_path)) return fail("%s: -o would overwrite the input checkpoint", out_path);
    // rounded twice: llama-quantize asks for --allow-requantize; here a notice
    int already = quantized_type(&t->weights, c->n_layers);
    if (already >= 0)
        fprintf(stderr, "run: %s: its weights are quantized already (%s); quantizing them again rounds them twice: "
                "the F32/F16 model, where you have it, gives better weights\n", in_path, type_name((uint32_t)already));
    int n_types = runc_matrix_count(c), *types = malloc((size_t)n_types * sizeof(int)), mixed = 0, widest = c->dim;
    if (!types) return fail("out of memory");
    for (int i = 0; i < n_types; i++) mixed |= (types[i] = matrix_dtype(dtype, c, i)) != types[0];
    if (c->hidden_dim > widest) widest = c->hidden_dim;
    if (c->n_heads * c->head_size > widest) widest = c->n_heads * c->head_size; // wo's rows
    size_t row_bytes = (size_t)widest * sizeof(float); // a short row of blocks can outgrow its floats
    for (int i = 0; i < n_types; i++)
        if (type_row_bytes(types[i], widest) > row_bytes) row_bytes = type_row_bytes(types[i], widest);
    int base = is_mix(dtype) ? mixes[dtype - TYPE_COUNT].base : dtype; // version 2: the mix's main type, for messages
    unsigned char header[RUNC_HEADER_SIZE] = {0};
    int32_t fields[] = {mixed ? RUNC_VERSION_TYPES : RUNC_VERSION, c->dim, c->hidden_dim, c->n_layers, c->n_heads,
                        c->n_kv_heads, c->vocab_size, c->seq_len, c->head_size};
    put_i32(header, (int32_t)RUNC_MAGIC);
    for (int i = 0; i < 9; i++) put_i32(header + 4 + 4 * i, fields[i]);
    memcpy(header + 40, &c->rope_theta, 4);
    memcpy(header + 44, &c->norm_eps, 4);
    put_i32(header + 48, c->shared_classifier);
    put_i32(header + 52, c->bos_id);
    put_i32(header + 56, c->eos_id);
    put_i32(header + 60, mixed ? base : types[0]);

    float *rows = malloc(WRITE_ROWS * (size_t)widest * sizeof(float));
    unsigned char *out = malloc(WRITE_ROWS * row_bytes);
    Output file; // refuses an OUT that is not a regular file, before anything is written
    int err = !rows || !out ? fail("out of memory") : output_open(&file, out_path);
    if (err) { free(rows); free(out); free(types); return err; }
    FILE *f = file.f;
    if (fwrite(header, 1, sizeof header, f) != sizeof header)
        err = fail("%s: write failed: %s", out_path, strerror(errno));
    for (int i = 0; i < n_types && mixed && !err; i++) {
        unsigned char entry[4];
        put_i32(entry, types[i]);
        if (fwrite(entry, 1, 4, f) != 4) err = fail("%s: write failed: %s", out_path, strerror(errno));
    }
    if (!err && write_runc_tensors(f, t, types, rows, out) != 0) {
        char why[sizeof error_message];
        snprintf(why, sizeof why, "%s", error_message);
        err = fail("%s -> %s: %s", in_path, out_path, why);
    }
    err = output_close(&file, err);
    free(rows); free(out); free(types);
    return err;
}

/* ----------------------------------------------------------------------------
   Quantize to GGUF (-o OUT.gguf): from a GGUF input, the very file
   llama-quantize writes for the same type or mix, so that llama.cpp and
   run.c can run and time the same bytes: the input's metadata in its order,
   then general.quantization_version and general.file_type (set last, as
   llama.cpp sets them); the tensors in llama.cpp's order (by layer, then
   by name); each matrix llama-quantize quantizes in the type tensor_dtype
   gives it, every other tensor copied; data aligned to general.alignment. */

#define GGUF_ALIGNMENT 32 // GGUF's default
#define GGUF_QUANTIZATION_VERSION 2 // of the K-quant and legacy blocks (ggml's GGML_QNT_VERSION)

// A growing byte buffer; err once an allocation failed.
typedef struct { unsigned char *data; size_t len, cap; int err; } Buffer;

static void put_bytes(Buffer *b, const void *p, size_t n) {
    if (b->err) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *grown = realloc(b->data, cap);
        if (!grown) { b->err = 1; return; }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void put_u32(Buffer *b, uint32_t v) {
    unsigned char p[4];
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
    put_bytes(b, p, 4);
}

static void put_u64(Buffer *b, uint64_t v) {
    unsigned char p[8];
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
    put_bytes(b, p, 8);
}

static void put_string(Buffer *b, const char *s, size_t len) {
    put_u64(b, len);
    put_bytes(b, s, len);
}

// Metadata pairs of the types writers add (GGUF_U32, GGUF_F32, GGUF_STRING).
static void put_kv_u32(Buffer *b, const char *key, uint32_t v) {
    put_string(b, key, strlen(key));
    put_u32(b, GGUF_U32);
    put_u32(b, v);
}

static void put_kv_f32(Buffer *b, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    put_string(b, key, strlen(key));
    put_u32(b, GGUF_F32);
    put_u32(b, bits);
}

static void put_kv_string(Buffer *b, const char *key, const char *v) {
    put_string(b, key, strlen(key));
    put_u32(b, GGUF_STRING);
    put_string(b, v, strlen(v));
}

// One metadata pair of g as it is in the file (key, type and value bytes).
static void put_kv_copy(Buffer *b, const GgufValue *v, const unsigned char *file_end) {
    Cursor c = {.p = v->value, .end = file_end};
    skip_value(&c, v->type, 0); // parsed once already: it fits
    put_string(b, v->key, v->key_len);
    put_u32(b, v->type);
    put_bytes(b, v->value, (size_t)(c.p - v->value));
}

// A tensor of a GGUF file being written.
typedef struct {
    char name[96];
    int n_dims;
    uint64_t dims[4];          // dims[0]: the row length
    int type;                  // TYPE_*: as written
    const unsigned char *same; // its bytes when copied as they are (same_bytes of them), else NULL:
    uint64_t same_bytes;
    RowSource source;          // its values, rounded into type
    const void *from;          // source's argument
} OutTensor;

static uint64_t out_rows(const OutTensor *t) { return t->dims[1] * t->dims[2] * t->dims[3]; }

static uint64_t out_bytes(const OutTensor *t) {
    return t->same ? t->same_bytes : type_row_bytes(t->type, (int)t->dims[0]) * out_rows(t);
}

static int write_zeros(FILE *f, uint64_t n) {
    static const char zeros[256];
    for (; n > 0; n -= n < 256 ? n : 256)
        if (fwrite(zeros, 1, n < 256 ? (size_t)n : 256, f) != (n < 256 ? n : 256)) return -1;
    return 0;
}

// Writes a GGUF v3 file to out_path: n_kv metadata pairs (meta's bytes),
// then the tensors; it appears only when complete.
int gguf_write(const char *out_path, const Buffer *meta, uint64_t n_kv, const OutTensor *tensors, int n_tensors,
               uint64_t alignment) {
    Buffer head = {0};
    put_u32(&head, GGUF_MAGIC);
    put_u32(&head, 3);
    put_u64(&head, (uint64_t)n_tensors);
    put_u64(&head, n_kv);
    put_bytes(&head, meta->data, meta->len);
    uint64_t offset = 0;
    int widest = 1;
    for (int i = 0; i < n_tensors; i++) {
        const OutTensor *t = &tensors[i];
        put_string(&head, t->name, strlen(t->name));
        put_u32(&head, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(&head, t->dims[d]);
        put_u32(&head, (uint32_t)t->type);
        put_u64(&head, offset);
        offset += (out_bytes(t) + alignment - 1) / alignment * alignment;
        if (!t->same && (int)t->dims[0] > widest) widest = (int)t->dims[0];
    }
    size_t row_bytes = (size_t)widest * sizeof(float);
    for (int i = 0; i < n_tensors; i++)
        if (!tensors[i].same && type_row_bytes(tensors[i].type, widest) > row_bytes)
            row_bytes = type_row_bytes(tensors[i].type, widest);
    float *rows = malloc(WRITE_ROWS * (size_t)widest * sizeof(float));
    unsigned char *out = malloc(WRITE_ROWS * row_bytes);
    Output file;
    int err = head.err || !rows || !out ? fail("out of memory") : output_open(&file, out_path);
    if (err) { free(head.data); free(rows); free(out); return err; }
    FILE *f = file.f;
    uint64_t pad = (alignment - head.len % alignment) % alignment;
    if (fwrite(head.data, 1, head.len, f) != head.len || write_zeros(f, pad) != 0)
        err = fail("%s: write failed: %s", out_path, strerror(errno));
    for (int i = 0; i < n_tensors && !err; i++) {
        const OutTensor *t = &tensors[i];
        uint64_t bytes = out_bytes(t);
        if (t->same) err = fwrite(t->same, 1, (size_t)bytes, f) != bytes ? fail("write failed: %s", strerror(errno)) : 0;
        else err = write_rows(f, (int64_t)out_rows(t), (int)t->dims[0], t->type, t->source, t->from, rows, out, t->name);
        if (!err && write_zeros(f, (alignment - bytes % alignment) % alignment) != 0)
            err = fail("write failed: %s", strerror(errno));
        if (err) {
            char why[sizeof error_message];
            snprintf(why, sizeof why, "%s", error_message);
            err = fail("%s: %s", out_path, why);
        }
    }
    err = output_close(&file, err);
    free(head.data); free(rows); free(out);
    return err;
}

// The layer of a tensor called blk.N.*, or -1.
static int tensor_layer(const char *name) {
    int layer = -1;
    return sscanf(name, "blk.%d.", &layer) == 1 ? layer : -1;
}

// llama.cpp's tensor order: by layer (tensors of no layer first), then by name.
static int compare_out_tensors(const void *a, const void *b) {
    const OutTensor *x = a, *y = b;
    int lx = tensor_layer(x->name), ly = tensor_layer(y->name);
    return lx != ly ? (lx < ly ? -1 : 1) : strcmp(x->name, y->name);
}

// Whether llama-quantize quantizes a tensor (its tensor_allows_quantization,
// for the tensors of the architectures run.c reads): a matrix or a stack of
// them whose name ends in "weight", except norms and the experts' router.
static int quantizable(const OutTensor *t) {
    size_t n = strlen(t->name);
    return t->n_dims >= 2 && n >= 6 && !strcmp(t->name + n - 6, "weight") && !strstr(t->name, "_norm.weight") &&
           !strstr(t->name, "ffn_gate_inp.weight");
}

// Sets a tensor copied as it is: data of the given type and shape (dims[0]
// the row length).
static void out_tensor(OutTensor *o, const char *name, const void *data, int type, int n_dims, const uint64_t *dims) {
    *o = (OutTensor){.type = type, .same = data, .dims = {1, 1, 1, 1}};
    snprintf(o->name, sizeof o->name, "%s", name);
    for (int d = 0; d < n_dims; d++)
        if ((o->dims[d] = dims[d]) > 1) o->n_dims = d + 1; // as ggml counts: trailing 1s dropped
    if (o->n_dims == 0) o->n_dims = 1;
    o->same_bytes = type_row_bytes(type, (int)o->dims[0]) * out_rows(o);
}

// Chooses o's type for dtype; a tensor that changes type is read through
// *slot. -1 (with the message) if no type fits its rows.
static int quantize_out_tensor(OutTensor *o, Matrix *slot, int dtype, const QuantShape *q, const char *path) {
    if (!quantizable(o)) return 0;
    int type = tensor_dtype(dtype, q, tensor_category(o->name), tensor_layer(o->name), (int)o->dims[0], o->dims[2] > 1);
    if (type < 0)
        return fail("%s: tensor %s has rows of %llu values, which %s's blocks do not fit and has no fallback for", path,
                    o->name, (unsigned long long)o->dims[0], type_name((uint32_t)(is_mix(dtype) ? TYPE_MXFP4 : dtype)));
    if (type == o->type) return 0; // llama-quantize copies a tensor already of its type
    if (out_rows(o) > INT32_MAX) return fail("%s: tensor %s has more than 2^31 rows", path, o->name);
    *slot = (Matrix){.data = o->same, .type = o->type, .rows = (int)out_rows(o), .cols = (int)o->dims[0]};
    o->same = NULL;
    o->type = type;
    o->source = matrix_rows;
    o->from = slot;
    return 0;
}

// A GGUF input's tensors as they are, and its metadata but for the keys
// quantize sets.
static int gguf_file_tensors(const Gguf *g, const unsigned char *file_end, OutTensor *out, Buffer *meta,
                             uint64_t *n_kv, const char *path) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const GgufTensor *in = &g->tensors[i];
        char name[sizeof out->name];
        if (in->name_len >= sizeof name) return fail("%s: a tensor name is longer than %zu bytes", path, sizeof name - 1);
        memcpy(name, in->name, in->name_len);
        name[in->name_len] = '\0';
        if (!type_supported(in->type))
            return fail("%s: tensor %s has type %s (%u), which run.c does not read, so cannot copy", path, name,
                        type_name(in->type), in->type);
        out_tensor(&out[i], name, g->data + in->offset, (int)in->type, in->n_dims, in->dims);
    }
    static const char *const replaced[] = {"general.quantization_version", "general.file_type", "split.no",
                                           "split.count", "split.tensors.count"};
    for (uint64_t i = 0; i < g->n_values; i++) {
        const GgufValue *v = &g->values[i];
        int skip = 0;
        for (size_t k = 0; k < sizeof replaced / sizeof replaced[0]; k++)
            skip |= v->key_len == strlen(replaced[k]) && !memcmp(v->key, replaced[k], v->key_len);
        if (skip) continue;
        put_kv_copy(meta, v, file_end);
        (*n_kv)++;
    }
    return 0;
}

// tokenizer.ggml.* for a llama2.c tokenizer (SentencePiece pieces with
// spaces for U+2581, BOS and EOS spelled "\n<s>\n" and "\n</s>\n").
static void put_spm_vocab(Buffer *b, uint64_t *n_kv, const Tokenizer *tk) {
    put_kv_string(b, "tokenizer.ggml.model", "llama");
    put_string(b, "tokenizer.ggml.tokens", strlen("tokenizer.ggml.tokens"));
    put_u32(b, GGUF_ARRAY);
    put_u32(b, GGUF_STRING);
    put_u64(b, (uint64_t)tk->vocab_size);
    for (int i = 0; i < tk->vocab_size; i++) {
        const char *p = tk->vocab[i];
        if (!strcmp(p, "\n<s>\n") || !strcmp(p, "\n</s>\n")) p++;
        Buffer piece = {0};
        for (int k = 0; k < tk->piece_len[i] - (p != tk->vocab[i] ? 2 : 0); k++)
            put_bytes(&piece, p[k] == ' ' ? "\xe2\x96\x81" : p + k, p[k] == ' ' ? 3 : 1);
        put_string(b, (const char *)piece.data, piece.len);
        b->err |= piece.err;
        free(piece.data);
    }
    put_string(b, "tokenizer.ggml.scores", strlen("tokenizer.ggml.scores"));
    put_u32(b, GGUF_ARRAY);
    put_u32(b, GGUF_F32);
    put_u64(b, (uint64_t)tk->vocab_size);
    for (int i = 0; i < tk->vocab_size; i++) {
        uint32_t bits;
        memcpy(&bits, &tk->scores[i], 4);
        put_u32(b, bits);
    }
    put_string(b, "tokenizer.ggml.token_type", strlen("tokenizer.ggml.token_type"));
    put_u32(b, GGUF_ARRAY);
    put_u32(b, GGUF_I32);
    put_u64(b, (uint64_t)tk->vocab_size);
    for (int i = 0; i < tk->vocab_size; i++) put_u32(b, tk->kind[i]);
    put_kv_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)tk->bos_id);
    put_kv_u32(b, "tokenizer.ggml.eos_token_id", (uint32_t)tk->eos_id);
    put_kv_u32(b, "tokenizer.ggml.unknown_token_id", (uint32_t)tk->unk_id);
    *n_kv += 7;
}

// A llama2.c or run.c checkpoint as GGUF's llama architecture: its config
// as metadata, its tokenizer tk, its tensors in llama.cpp's names (the
// same weights: both store RoPE's pairs side by side). out: room for
// 3 + (2 + LAYER_MATRICES) * n_layers.
static int model_tensors(const Transformer *t, const Tokenizer *tk, OutTensor *out, Buffer *meta, uint64_t *n_kv) {
    const Config *c = &t->config;
    const TransformerWeights *w = &t->weights;
    put_kv_string(meta, "general.architecture", "llama");
    put_kv_u32(meta, "llama.context_length", (uint32_t)c->seq_len);
    put_kv_u32(meta, "llama.embedding_length", (uint32_t)c->dim);
    put_kv_u32(meta, "llama.block_count", (uint32_t)c->n_layers);
    put_kv_u32(meta, "llama.feed_forward_length", (uint32_t)c->hidden_dim);
    put_kv_u32(meta, "llama.rope.dimension_count", (uint32_t)c->head_size);
    put_kv_u32(meta, "llama.attention.head_count", (uint32_t)c->n_heads);
    put_kv_u32(meta, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    put_kv_f32(meta, "llama.attention.layer_norm_rms_epsilon", c->norm_eps);
    put_kv_f32(meta, "llama.rope.freq_base", c->rope_theta);
    *n_kv += 10;
    put_spm_vocab(meta, n_kv, tk);
    int n = 0;
    uint64_t dim[1] = {(uint64_t)c->dim};
    out_tensor(&out[n++], "output_norm.weight", w->rms_final, TYPE_F32, 1, dim);
    const Matrix *embedding = &w->token_embedding;
    out_tensor(&out[n++], "token_embd.weight", embedding->data, embedding->type, 2,
               (uint64_t[]){(uint64_t)embedding->cols, (uint64_t)embedding->rows});
    if (!c->shared_classifier)
        out_tensor(&out[n++], "output.weight", w->wcls.data, w->wcls.type, 2,
                   (uint64_t[]){(uint64_t)w->wcls.cols, (uint64_t)w->wcls.rows});
    for (int l = 0; l < c->n_layers; l++) {
        LayerWeights *lw = &w->layers[l];
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        out_tensor(&out[n++], name, lw->rms_att, TYPE_F32, 1, dim);
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        out_tensor(&out[n++], name, lw->rms_ffn, TYPE_F32, 1, dim);
        for (int k = 0; k < LAYER_MATRICES; k++) {
            const Matrix *m = layer_matrix(lw, k);
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, layer_matrices[k].gguf);
            out_tensor(&out[n++], name, m->data, m->type, 2, (uint64_t[]){(uint64_t)m->cols, (uint64_t)m->rows});
        }
    }
    return n;
}

// -m quantize -o OUT.gguf: t mapped from in_path; tk, its tokenizer, for a
// checkpoint that holds none (llama2.c, run.c's format).
int quantize_gguf(const Transformer *t, const Tokenizer *tk, const char *in_path, const char *out_path, int dtype) {
    if (same_file(out_path, in_path)) return fail("%s: -o would overwrite the input checkpoint", out_path);
    int file_type = dtype_file_type(dtype);
    if (file_type < 0) return fail("%s: GGUF has no file type for %s; choose another --dtype", out_path, dtype_name(dtype));
    Gguf g = {0};
    if (t->is_gguf && gguf_parse(&g, t->map, t->map_size, in_path) != 0) return -1;
    int64_t alignment = GGUF_ALIGNMENT;
    gguf_int(&g, "general.alignment", GGUF_ALIGNMENT, &alignment);
    int n = t->is_gguf ? (int)g.n_tensors : 3 + (2 + LAYER_MATRICES) * t->config.n_layers, err = 0, already = -1;
    OutTensor *tensors = calloc((size_t)n + 1, sizeof *tensors);
    Matrix *sources = calloc((size_t)n + 1, sizeof *sources);
    Buffer meta = {0};
    uint64_t n_kv = 0;
    if (!tensors || !sources) err = fail("out of memory");
    else if (t->is_gguf) err = gguf_file_tensors(&g, (const unsigned char *)t->map + t->map_size, tensors, &meta, &n_kv, in_path);
    else n = model_tensors(t, tk, tensors, &meta, &n_kv);
    QuantShape q = quant_shape(&t->config);
    for (int i = 0; i < n && !err; i++) q.tied &= strcmp(tensors[i].name, "output.weight") != 0;
    for (int i = 0; i < n && !err; i++) {
        int from = tensors[i].type;
        err = quantize_out_tensor(&tensors[i], &sources[i], dtype, &q, in_path);
        if (!tensors[i].same && from != TYPE_F32 && from != TYPE_F16 && from != TYPE_BF16 && already < 0) already = from;
    }
    if (already >= 0)
        fprintf(stderr, "run: %s: its weights are quantized already (%s); quantizing them again rounds them twice: "
                "the F32/F16 model, where you have it, gives better weights\n", in_path, type_name((uint32_t)already));
    put_kv_u32(&meta, "general.quantization_version", GGUF_QUANTIZATION_VERSION);
    put_kv_u32(&meta, "general.file_type", (uint32_t)file_type);
    n_kv += 2;
    if (!err && meta.err) err = fail("out of memory");
    if (!err) {
        qsort(tensors, (size_t)n, sizeof *tensors, compare_out_tensors); // sources stay where from points
        err = gguf_write(out_path, &meta, n_kv, tensors, n, (uint64_t)alignment);
        if (err) {
            char why[sizeof error_message];
            snprintf(why, sizeof why, "%s", error_message);
            err = fail("%s -> %s", in_path, why);
        }
    }
    free(meta.data); free(tensors); free(sources);
    gguf_free(&g);
    return err;
}

/* ----------------------------------------------------------------------------
   Benchmark (-m bench): prompt processing and generation speed, and next to
   them the machine's own ceilings measured with the same threads: read
   bandwidth (the best of 3 passes summing a 1 GiB array), fp32 FMA
   throughput (independent multiply-add chains) and, for quantized weights
   in builds with the packed kernels, int8 multiply-add throughput. The
   machine may be shared, so each of BENCH_RUNS rounds measures the ceilings right before
   the model runs, and every figure is a median over the rounds. Then, for F32 weights, the same runs
   with the plain kernels (the "before"). */

#define BENCH_RUNS 5
#define BENCH_PROMPT 128 // prompt tokens, fed in blocks
#define BENCH_GENERATE 128 // tokens generated one at a time after the prompt
#define BENCH_ARRAY_BYTES ((size_t)1 << 30)

static volatile float bench_sink; // results the compiler must not drop

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The 1-minute load average (Linux), or -1: other work on the machine makes
// every figure noisy, and spinning OpenMP threads suffer most.
static double load_average(void) {
    double load = -1.0;
#if HAVE_LINUX
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &load) != 1) load = -1.0;
    if (f) fclose(f);
#endif
    return load;
}

// A 1 GiB array holding 0, 1, 2, ...; each thread touches the pages it will read.
static uint64_t *bench_array(void) {
    size_t n = BENCH_ARRAY_BYTES / sizeof(uint64_t), i;
    uint64_t *a = NULL;
    // in huge pages where Linux gives them, as the packed weights are
    if (posix_memalign((void **)&a, (size_t)2 << 20, BENCH_ARRAY_BYTES) != 0) return NULL;
    ask_huge_pages(a, BENCH_ARRAY_BYTES);
    #pragma omp parallel for private(i) schedule(static)
    for (i = 0; i < n; i++) a[i] = i;
    return a;
}

// Read bandwidth in GB/s: the best of BANDWIDTH_PASSES passes summing the
// array (as 64-bit integers, which vectorize), split across the threads; 0
// if a sum is wrong. The best, not one pass: a single pass after other
// work often reads slower, and a low ceiling would
// flatter the model's share of it.
#define BANDWIDTH_PASSES 3
static double read_bandwidth(const uint64_t *a) {
    size_t n = BENCH_ARRAY_BYTES / sizeof(uint64_t), i;
    double best = 0.0;
    for (int pass = 0; pass < BANDWIDTH_PASSES; pass++) {
        uint64_t sum = 0;
        double start = now_seconds();
        #pragma omp parallel for private(i) schedule(static) reduction(+ : sum)
        for (i = 0; i < n; i++) sum += a[i];
        double seconds = now_seconds() - start;
        if (sum != (uint64_t)n * (n - 1) / 2) return 0.0;
        if (BENCH_ARRAY_BYTES / seconds / 1e9 > best) best = BENCH_ARRAY_BYTES / seconds / 1e9;
    }
    return best;
}

/* The benchmark's FMA ceiling: FMA_CHAINS independent chains of
   multiply-adds in registers, iters steps each, with the widest vectors
   this build has; returns a sum so nothing is optimized away. */

#define FMA_CHAINS 12 // enough to cover FMA latency x FMA units on current cores

#if HAVE_AVX512
#define SIMD_NAME "AVX-512"
#define SIMD_FLOATS 16 // lanes of one vector
static float fma_chains(long iters, float seed) {
    __m512 a[FMA_CHAINS], m = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(seed);
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm512_fmadd_ps(a[i], m, b);
    float sum = 0.0f;
    for (int i = 0; i < FMA_CHAINS; i++) sum += _mm512_reduce_add_ps(a[i]);
    return sum;
}

#elif HAVE_AVX2
#define SIMD_NAME (HAVE_AVX_VNNI ? "AVX2 and AVX-VNNI" : "AVX2")
#define SIMD_FLOATS 8
static float fma_chains(long iters, float seed) {
    __m256 a[FMA_CHAINS], m = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(seed);
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm256_set1_ps((float)i);
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm256_fmadd_ps(a[i], m, b);
    float sum = 0.0f;
    for (int i = 0; i < FMA_CHAINS; i++) sum += sum_m256(a[i]);
    return sum;
}

#elif HAVE_NEON
#define SIMD_NAME "NEON"
#define SIMD_FLOATS 4
static float fma_chains(long iters, float seed) {
    float32x4_t a[FMA_CHAINS], m = vdupq_n_f32(0.999f), b = vdupq_n_f32(seed);
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = vdupq_n_f32((float)i);
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < FMA_CHAINS; i++) a[i] = vfmaq_f32(b, a[i], m);
    float sum = 0.0f;
    for (int i = 0; i < FMA_CHAINS; i++) sum += vaddvq_f32(a[i]);
    return sum;
}

#else
#define SIMD_NAME "plain C"
#define SIMD_FLOATS 1
static float fma_chains(long iters, float seed) {
    float a[FMA_CHAINS];
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = (float)i;
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < FMA_CHAINS; i++) a[i] = fmaf(a[i], 0.999f, seed);
    float sum = 0.0f;
    for (int i = 0; i < FMA_CHAINS; i++) sum += a[i];
    return sum;
}
#endif

/* The int8 ceiling, for the packed integer kernels: INT8_CHAINS chains of
   the 8-bit multiply those kernels take, VNNI's dpbusd (four byte products
   summed into each int32) or, without VNNI, maddubs (two summed into each
   int16, which saturate here: the time is what counts). Each step
   multiplies the chain's own value, so that no product is loop-invariant,
   and the chains are summed with adds at the end. 0 products: no packed
   kernels in this build. */

#if HAVE_AVX512_VNNI
#define INT8_PRODUCTS 64 // byte products per step of one chain
#define INT8_CHAINS 12
static int int8_chains(long iters, int seed) {
    __m512i a[INT8_CHAINS], s = _mm512_set1_epi8((char)seed), sum = _mm512_setzero_si512();
    for (int i = 0; i < INT8_CHAINS; i++) a[i] = _mm512_set1_epi32(i);
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < INT8_CHAINS; i++) a[i] = _mm512_dpbusd_epi32(a[i], a[i], s);
    for (int i = 0; i < INT8_CHAINS; i++) sum = _mm512_add_epi32(sum, a[i]);
    return _mm512_reduce_add_epi32(sum);
}

#elif HAVE_AVX2
#define INT8_PRODUCTS 32
#define INT8_CHAINS (HAVE_AVX_VNNI ? 12 : 8) // maddubs: its latency times its units
static int int8_chains(long iters, int seed) {
    __m256i a[INT8_CHAINS], s = _mm256_set1_epi8((char)seed), sum = _mm256_setzero_si256();
    for (int i = 0; i < INT8_CHAINS; i++) a[i] = _mm256_set1_epi32(i);
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < INT8_CHAINS; i++)
#if HAVE_AVX_VNNI
            a[i] = _mm256_dpbusd_avx_epi32(a[i], a[i], s);
#else
            a[i] = _mm256_maddubs_epi16(a[i], s);
#endif
    for (int i = 0; i < INT8_CHAINS; i++) sum = _mm256_add_epi32(sum, a[i]);
    return _mm256_extract_epi32(sum, 0);
}

#else
#define INT8_PRODUCTS 0
#define INT8_CHAINS 0
static int int8_chains(long iters, int seed) { return (int)iters + seed; }
#endif

// fp32 FMA throughput in GFLOP/s: each thread runs FMA_CHAINS chains of
// SIMD_FLOATS-wide multiply-adds (2 flops per lane).
static double fma_peak(void) {
    long iters = 10000000;
    float sum = 0.0f;
    double start = now_seconds();
    #pragma omp parallel reduction(+ : sum)
    sum += fma_chains(iters, 1e-3f);
    double seconds = now_seconds() - start;
    bench_sink += sum;
    return 2.0 * FMA_CHAINS * SIMD_FLOATS * (double)iters * threads_available() / seconds / 1e9;
}

// int8 multiply-add throughput in GOP/s (2 ops a product), or 0 where
// this build has no packed integer kernels.
static double int8_peak(void) {
    if (INT8_PRODUCTS == 0) return 0.0;
    long iters = 10000000;
    int sum = 0;
    double start = now_seconds();
    #pragma omp parallel reduction(+ : sum)
    sum += int8_chains(iters, 3);
    double seconds = now_seconds() - start;
    bench_sink += (float)sum;
    return 2.0 * INT8_CHAINS * INT8_PRODUCTS * (double)iters * threads_available() / seconds / 1e9;
}

// Bytes of the layers' matrices plus the classifier: what a generated token reads.
static double weight_bytes(const Transformer *t) {
    const Matrix *cls = &t->weights.wcls;
    double bytes = (double)cls->rows * type_row_bytes(cls->type, cls->cols);
    for (int l = 0; l < t->config.n_layers; l++) { // each layer: a mix gives layers different types
        LayerWeights *lw = &t->weights.layers[l];
        for (int k = 0; k < LAYER_MATRICES; k++) {
            const Matrix *m = layer_matrix(lw, k);
            bytes += (double)m->rows * type_row_bytes(m->type, m->cols);
        }
        if (!lw->experts) continue;
        // a mixture of experts: the router, and the experts a token runs (as large as expert 0's three)
        bytes += (double)lw->router.rows * type_row_bytes(lw->router.type, lw->router.cols);
        for (int i = 0; i < 3; i++)
            bytes += (double)t->config.n_experts_used * lw->experts[i].rows *
                     type_row_bytes(lw->experts[i].type, lw->experts[i].cols);
    }
    return bytes;
}

// Multiply-adds in one layer's matrices (per position).
static double layer_macs(const Config *c) {
    double q_dim = (double)c->n_heads * c->head_size;
    double experts = c->n_experts > 0 ? c->n_experts_used : 1; // a mixture: the experts a position runs, and the router
    return q_dim * c->dim * 2 + 2.0 * kv_dim(c) * c->dim + 3.0 * c->hidden_dim * c->dim * experts +
           (double)c->n_experts * c->dim;
}

typedef struct { double prompt_tps, generate_tps, bandwidth, peak, int8_peak; } BenchRound;

// Seconds of CPU time every core has spent busy since boot (Linux's
// /proc/stat: user, nice, system, irq, softirq, and steal: time the
// hypervisor gave to others), or -1.
static double machine_busy_seconds(void) {
    double busy = -1;
#if HAVE_LINUX
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long user, nice, system, idle, iowait, irq, softirq, steal = 0;
    if (f && fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle, &iowait, &irq,
                    &softirq, &steal) >= 7)
        busy = (double)(user + nice + system + irq + softirq + steal) / (double)sysconf(_SC_CLK_TCK);
    if (f) fclose(f);
#endif
    return busy;
}

// This process's CPU seconds, user and system.
static double own_cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

// The largest cache's size in bytes (Linux: the L3's, else the L2's), or 0.
static double cache_bytes(void) {
    long size = 0;
#if HAVE_LINUX && defined(_SC_LEVEL3_CACHE_SIZE)
    size = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (size <= 0) size = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return size > 0 ? (double)size : 0;
}

// One run from position 0: the prompt as a batch, then greedy generation.
static void bench_model(Transformer *t, const int *prompt, int n_prompt, int n_generate, BenchRound *r) {
    double start = now_seconds();
    float *logits = forward_batch(t, prompt, n_prompt, 0, NULL);
    double prompt_done = now_seconds();
    for (int i = 0; i < n_generate; i++) logits = forward(t, argmax(logits, t->config.vocab_size), n_prompt + i);
    r->prompt_tps = n_prompt / (prompt_done - start);
    r->generate_tps = n_generate / (now_seconds() - prompt_done);
}

// Medians over BENCH_RUNS rounds; the ceilings too when array is given.
static BenchRound bench_rounds(Transformer *t, const int *prompt, int n_prompt, int n_generate, const uint64_t *array) {
    double p[BENCH_RUNS], g[BENCH_RUNS], b[BENCH_RUNS], f[BENCH_RUNS], i8[BENCH_RUNS];
    for (int run = 0; run < BENCH_RUNS; run++) {
        BenchRound r = {0};
        if (array) { r.bandwidth = read_bandwidth(array); r.peak = fma_peak(); r.int8_peak = int8_peak(); }
        bench_model(t, prompt, n_prompt, n_generate, &r);
        p[run] = r.prompt_tps, g[run] = r.generate_tps, b[run] = r.bandwidth, f[run] = r.peak, i8[run] = r.int8_peak;
    }
    return (BenchRound){.prompt_tps = median(p, BENCH_RUNS), .generate_tps = median(g, BENCH_RUNS),
                        .bandwidth = median(b, BENCH_RUNS), .peak = median(f, BENCH_RUNS), .int8_peak = median(i8, BENCH_RUNS)};
}

int bench_mode(Transformer *t, const char *path) {
    const Config *c = &t->config;
    int n_prompt = c->seq_len / 2 < BENCH_PROMPT ? c->seq_len / 2 : BENCH_PROMPT;
    int n_generate = c->seq_len - n_prompt < BENCH_GENERATE ? c->seq_len - n_prompt : BENCH_GENERATE;
    if (n_prompt < 1 || n_generate < 1) return fail("%s: context of %d is too short to benchmark", path, c->seq_len);
    int prompt[BENCH_PROMPT];
    uint64_t state = 42;
    for (int i = 0; i < n_prompt; i++) prompt[i] = i == 0 ? c->bos_id : (int)(random_u32(&state) % (uint32_t)c->vocab_size);

    // what one generated token reads (the cache averaged over the generated
    // positions); the work of the prompt: matrices, attention, one classifier row
    double weights = weight_bytes(t);
    // the keys and values a generated token reads, on average: each layer's
    // positions before it, or its window's
    double kv_read = 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int p = n_prompt; p < n_prompt + n_generate; p++) {
            int window = t->weights.layers[l].window;
            kv_read += window > 0 && p + 1 > window ? window : p + 1;
        }
    kv_read *= 2.0 * kv_dim(c) * (t->state.key_cache ? sizeof(float) : sizeof(uint16_t)) / n_generate;
    double attention_macs = 2.0 * c->n_layers * c->n_heads * c->head_size * (n_prompt * (n_prompt + 1.0) / 2);
    double prompt_flops = 2.0 * (layer_macs(c) * c->n_layers * n_prompt + attention_macs + (double)c->vocab_size * c->dim);

    double load_before = load_average(), busy_before = machine_busy_seconds(), own_before = own_cpu_seconds();
    double started = now_seconds();
    BenchRound warm;
    bench_model(t, prompt, n_prompt, n_generate, &warm); // pages the weights in
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage); // before the bandwidth array
    double rss_mb = usage.ru_maxrss / 1024.0;
    uint64_t *array = bench_array();
    if (!array) return fail("out of memory for the bandwidth test");
    BenchRound fast = bench_rounds(t, prompt, n_prompt, n_generate, array);
    free(array);
    // the plain kernels' "before", for F32 weights up to 1 GB (beyond, it would take many minutes)
    BenchRound plain = {0};
    if (c->weight_type == TYPE_F32 && weights <= 1e9) {
        use_plain_kernels = 1;
        plain = bench_rounds(t, prompt, n_prompt, n_generate, NULL);
        use_plain_kernels = 0;
    }

    // other programs' share of the cores while it ran: its figures are low when they took any
    double others = busy_before < 0 ? 0 : (machine_busy_seconds() - busy_before - (own_cpu_seconds() - own_before)) /
                                               (now_seconds() - started);
    double gen_gbs = (weights + kv_read) * fast.generate_tps / 1e9;
    // a model that fits in the caches reads them, not memory: no share of the memory's bandwidth (where
    // the cache's size is unknown, a read faster than memory's says so); one larger than them reads memory,
    // even when faster than the bandwidth test (which then measured low)
    double cache = cache_bytes();
    int in_cache = cache > 0 ? weights + kv_read <= cache : gen_gbs > 0.95 * fast.bandwidth;
    char share[96], share_cell[16];
    snprintf(share, sizeof share, in_cache ? "the model fits in the caches, so not a share of memory's bandwidth"
                                           : "%.0f%% of read bandwidth", 100 * gen_gbs / fast.bandwidth);
    snprintf(share_cell, sizeof share_cell, in_cache ? "in cache" : "%.0f%%", 100 * gen_gbs / fast.bandwidth);
    double prompt_gflops = prompt_flops * fast.prompt_tps / n_prompt / 1e9;
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char plain_prompt[64] = "", plain_generate[64] = "", plain_cells[64] = "- | -";
    if (plain.prompt_tps > 0) {
        snprintf(plain_prompt, sizeof plain_prompt, " (plain kernels %.1f tok/s: %.1fx)", plain.prompt_tps,
                 fast.prompt_tps / plain.prompt_tps);
        snprintf(plain_generate, sizeof plain_generate, " (plain kernels %.1f tok/s: %.1fx)", plain.generate_tps,
                 fast.generate_tps / plain.generate_tps);
        snprintf(plain_cells, sizeof plain_cells, "%.1f | %.1f", plain.prompt_tps, plain.generate_tps);
    }
    printf("%s: %s, KV cache %s, %.1f MB read per generated token, %d thread%s, %s kernels, medians of %d runs\n", name,
           type_name((uint32_t)c->weight_type), t->state.key_cache ? "F32" : "F16", (weights + kv_read) / 1e6,
           threads_available(), threads_available() == 1 ? "" : "s", SIMD_NAME, BENCH_RUNS);
    // quantized layers multiply 8-bit integers (the packed kernels): their ceiling is int8's
    int integer = layer_matrix(&t->weights.layers[0], 0)->kernel == KERNEL_PACKED && fast.int8_peak > 0;
    char int8_cells[2][64] = {"", ""};
    if (integer) {
        snprintf(int8_cells[0], sizeof int8_cells[0], ", int8 peak %.1f GOP/s", fast.int8_peak);
        snprintf(int8_cells[1], sizeof int8_cells[1], " and %.0f%% of int8 peak", 100 * prompt_gflops / fast.int8_peak);
    }
    printf("  ceilings: read bandwidth %.1f GB/s, fp32 FMA peak %.1f GFLOP/s%s\n", fast.bandwidth, fast.peak, int8_cells[0]);
    printf("  prefill %d tokens: %.1f tok/s, %.1f GFLOP/s = %.0f%% of FMA peak%s%s\n", n_prompt, fast.prompt_tps,
           prompt_gflops, 100 * prompt_gflops / fast.peak, int8_cells[1], plain_prompt);
    printf("  generate %d tokens: %.1f tok/s, %.1f GB/s = %s%s\n", n_generate, fast.generate_tps, gen_gbs, share,
           plain_generate);
    printf("  peak RSS %.0f MB; load average %.2f before, %.2f after\n", rss_mb, load_before, load_average());
    if (others > 0.2)
        printf("  the machine was busy: other programs took %.1f cores on average while this ran, so every figure "
               "here is low\n", others);
    printf("| %s | %d | %.1f | %.0f%% | %.1f | %s | %.0f | %s | %.1f | %.1f |\n", name, threads_available(),
           fast.prompt_tps, 100 * prompt_gflops / fast.peak, fast.generate_tps, share_cell, rss_mb, plain_cells,
           fast.bandwidth, fast.peak);
    return 0;
}

/* ----------------------------------------------------------------------------
   Command line and main. llama2.c's short flags (run.c is a drop-in), and
   llama.cpp's long names where the meaning is the same; --name=value works
   for every long flag. A flag that the chosen mode does not use, or one
   given twice, is refused rather than ignored. */

enum { MODE_GENERATE = 1, MODE_CHAT = 2, MODE_TOKENIZE = 4, MODE_LOGITS = 8, MODE_BENCH = 16, MODE_QUANTIZE = 32,
       MODES_SAMPLING = MODE_GENERATE | MODE_CHAT, MODES_FORWARD = MODE_GENERATE | MODE_CHAT | MODE_LOGITS | MODE_BENCH,
       MODES_ALL = 63 };

static const char *const mode_names[] = {"generate", "chat", "tokenize", "logits", "bench", "quantize"};

enum { FLAG_TEMP, FLAG_TOP_P, FLAG_TOP_K, FLAG_MIN_P, FLAG_REPEAT_PENALTY, FLAG_REPEAT_LAST_N, FLAG_SEED, FLAG_STEPS,
       FLAG_CONTEXT, FLAG_PROMPT, FLAG_FILE, FLAG_TOKENIZER, FLAG_MODE, FLAG_SYSTEM, FLAG_OUTPUT, FLAG_DTYPE, FLAG_TRACE,
       FLAG_KV, FLAG_THREADS, FLAG_CHAT_TEMPLATE, FLAG_REASONING, FLAG_HIDE_REASONING, N_FLAGS };

typedef struct {
    const char *short_name; // llama2.c's, or NULL
    const char *long_name;  // llama.cpp's (or ours), or NULL
    int modes;              // the modes that use it
    int is_switch;          // takes no value
} Flag;

static const Flag cli_flags[N_FLAGS] = {
    [FLAG_TEMP] = {"-t", "--temp", MODES_SAMPLING, 0},
    [FLAG_TOP_P] = {"-p", "--top-p", MODES_SAMPLING, 0},
    [FLAG_TOP_K] = {"-k", "--top-k", MODES_SAMPLING, 0},
    [FLAG_MIN_P] = {NULL, "--min-p", MODES_SAMPLING, 0},
    [FLAG_REPEAT_PENALTY] = {NULL, "--repeat-penalty", MODES_SAMPLING, 0},
    [FLAG_REPEAT_LAST_N] = {NULL, "--repeat-last-n", MODES_SAMPLING, 0},
    [FLAG_SEED] = {"-s", "--seed", MODES_SAMPLING, 0},
    [FLAG_STEPS] = {"-n", NULL, MODES_SAMPLING, 0},
    [FLAG_CONTEXT] = {"-c", "--ctx-size", MODES_FORWARD, 0},
    [FLAG_PROMPT] = {"-i", "--prompt", MODE_GENERATE | MODE_CHAT | MODE_TOKENIZE, 0},
    [FLAG_FILE] = {"-f", "--file", MODE_GENERATE | MODE_CHAT | MODE_TOKENIZE | MODE_LOGITS, 0},
    [FLAG_TOKENIZER] = {"-z", NULL, MODE_GENERATE | MODE_CHAT | MODE_TOKENIZE | MODE_QUANTIZE, 0},
    [FLAG_MODE] = {"-m", NULL, MODES_ALL, 0},
    [FLAG_SYSTEM] = {"-y", "--system-prompt", MODE_CHAT, 0},
    [FLAG_OUTPUT] = {"-o", NULL, MODE_LOGITS | MODE_QUANTIZE, 0},
    [FLAG_DTYPE] = {NULL, "--dtype", MODE_QUANTIZE, 0},
    [FLAG_TRACE] = {NULL, "--trace", MODES_FORWARD & ~MODE_BENCH, 0},
    [FLAG_KV] = {NULL, "--kv", MODES_FORWARD, 0},
    [FLAG_THREADS] = {NULL, "--threads", MODES_ALL, 0},
    [FLAG_CHAT_TEMPLATE] = {NULL, "--chat-template", MODE_CHAT, 0},
    [FLAG_REASONING] = {NULL, "--reasoning", MODE_CHAT, 0},
    [FLAG_HIDE_REASONING] = {NULL, "--hide-reasoning", MODE_CHAT, 1},
};

typedef struct {
    const char *checkpoint;
    const char *tokenizer;     // -z
    const char *prompt;        // -i
    const char *prompt_file;   // -f (prompt text; token ids in logits mode)
    const char *system_prompt; // -y
    const char *mode;          // -m, one of mode_names
    int mode_bit;              // MODE_*
    const char *output;        // -o
    const char *trace;         // --trace
    int kv_type;               // --kv: TYPE_F32 or TYPE_F16
    int chat_template;         // --chat-template: a TEMPLATE_*, or TEMPLATE_NONE: the model's own
    int reasoning;             // --reasoning: a REASONING_*
    int hide_reasoning;        // --hide-reasoning
    int dtype;                 // --dtype (quantize mode), a TYPE_*
    int steps;                 // -n
    int steps_given;
    int context;               // -c
    int threads;               // --threads, 0: OpenMP's default
    uint64_t seed;             // -s
    int seed_given;
    SamplerParams sampling;
    char notes[512];           // notices for stderr, a line each ("-t 4 is the temperature here ...")
} Options;

void usage(FILE *f) {
    fprintf(f,
        "usage: run MODEL [options]      MODEL: a GGUF file, a llama2.c checkpoint or one of ours\n"
        "example: run stories15M.bin -z tokenizer.bin -t 0.8 -n 256 -i \"Once upon a time\"\n"
        "sampling:\n"
        "  -t, --temp <float>         temperature in [0, 100], 0 = greedy (default 1.0)\n"
        "  -p, --top-p <float>        top-p (nucleus) in [0, 1], 1 = off (default 0.9)\n"
        "  -k, --top-k <int>          top-k, 0 = off (default 0)\n"
        "      --min-p <float>        min-p in [0, 1], 0 = off (default 0)\n"
        "      --repeat-penalty <f>   repetition penalty in [0.01, 100], 1 = off (default 1.0)\n"
        "      --repeat-last-n <int>  tokens the penalty looks back over (default 64)\n"
        "  -s, --seed <int>           random seed (default: from the clock)\n"
        "  -n <int>                   generate: positions to run, prompt included; chat: tokens\n"
        "                             per reply; 0 = up to the context length (default 256)\n"
        "input and output:\n"
        "  -i, --prompt <string>      prompt (chat: the first message)\n"
        "  -f, --file <file>          prompt from a file, one final newline dropped\n"
        "                             (logits mode: the token ids)\n"
        "  -z <file>                  tokenizer: tokenizer.bin or a GGUF file (default: the GGUF\n"
        "                             model's own, else ./tokenizer.bin)\n"
        "  -y, --system-prompt <s>    system prompt (chat mode)\n"
        "      --chat-template <name> chat mode: llama2, llama3, chatml, zephyr, mistral, gemma,\n"
        "                             qwen3, harmony, deepseek-r1 (default: the model's own)\n"
        "      --reasoning <level>    chat mode: off | on | low | medium | high: Qwen3 thinks or\n"
        "                             not, gpt-oss reasons at that level (default: the template's)\n"
        "      --hide-reasoning       chat mode: print the answer, not the reasoning before it\n"
        "  -o <file>                  output file (logits and quantize modes)\n"
        "      --trace <file>         append every token id fed to the model, one per line\n"
        "mode and model:\n"
        "  -m <mode>                  generate | chat | tokenize | logits | bench | quantize\n"
        "                             (default generate)\n"
        "      --dtype <type>         quantize mode, one type for every matrix: f32 | f16 | q8_0 |\n"
        "                             q4_0 | q4_1 | q5_0 | q5_1 | q2_k | q3_k | q4_k | q5_k | q6_k |\n"
        "                             iq4_nl | iq4_xs | mxfp4; or a llama-quantize mix: q4_k_m |\n"
        "                             q5_k_m | q3_k_m | q2_k_mix (its Q2_K) | q3_k_s | q3_k_l |\n"
        "                             q4_k_s | q5_k_s\n"
        "  -c, --ctx-size <int>       context length: cap the model's to save KV-cache memory\n"
        "      --kv <type>            KV cache: f32 (exact, default) or f16 (half the memory)\n"
#ifdef _OPENMP
        "      --threads <int>        threads (default: OMP_NUM_THREADS, else every core)\n"
#else
        "      --threads <int>        1 only: this build has no OpenMP (make OPENMP=1)\n"
#endif
        "  -h, --help                 this help\n"
        "Long flags also take --name=value.\n");
}

// Plain decimal numbers only: strtof alone would also take " 1", "0x10",
// "inf" and "nan". A value too small for a float (1e-40) is kept as rounded.
static int parse_float(const char *flag, const char *s, float lo, float hi, float *out) {
    size_t plain = strspn(s, "0123456789.eE+-");
    char *end = (char *)s;
    errno = 0;
    float v = s[plain] == '\0' ? strtof(s, &end) : 0.0f;
    if (s[plain] != '\0' || end == s || *end != '\0')
        return fail("%s: '%s' is not a number", flag, s);
    if ((errno == ERANGE && fabsf(v) >= 1.0f) || v < lo || v > hi)
        return fail("%s: %s is out of range [%g, %g]", flag, s, lo, hi);
    *out = v;
    return 0;
}

// A file flag's value: not empty (caught here, not after the work).
static int file_name(const char *flag, const char *v, const char **out) {
    if (!*v) return fail("%s: the file name is empty", flag);
    *out = v;
    return 0;
}

static int parse_int(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (isspace((unsigned char)s[0]) || end == s || *end != '\0') return fail("%s: '%s' is not a whole number", flag, s);
    if (errno == ERANGE || v < lo || v > hi) return fail("%s: %s is out of range [%ld, %ld]", flag, s, lo, hi);
    *out = v;
    return 0;
}

static int parse_seed(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)s[0])) return fail("%s: '%s' is not a non-negative whole number", flag, s);
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0') return fail("%s: '%s' is not a non-negative whole number", flag, s);
    if (errno == ERANGE) return fail("%s: %s is out of range [0, %llu]", flag, s, ULLONG_MAX);
    *out = v;
    return 0;
}

// A type the table can write, by its GGML name in lower case (q8_0), or
// a mix by its flag (q4_k_m).
static int parse_dtype(const char *s, int *type) {
    char names[512] = "";
    for (int t = 0; t < DTYPE_END; t++) {
        if (!dtype_writable(t)) continue;
        char name[16];
        snprintf(name, sizeof name, "%s", is_mix(t) ? mixes[t - TYPE_COUNT].flag : type_name((uint32_t)t));
        for (char *p = name; *p; p++) *p = (char)tolower((unsigned char)*p);
        if (!strcmp(s, name)) { *type = t; return 0; }
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "", name);
    }
    return fail("--dtype: '%s' is not one of %s", s, names);
}

// The flag that arg names ("-t", "--temp", "--temp=0.5"), or -1; *value is
// what follows a long flag's '=' (else NULL).
static int find_flag(const char *arg, const char **value) {
    *value = NULL;
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    for (int f = 0; f < N_FLAGS; f++) {
        const char *s = cli_flags[f].short_name, *l = cli_flags[f].long_name;
        if ((!eq && s && !strcmp(arg, s)) || (l && strlen(l) == len && !strncmp(arg, l, len))) {
            if (eq) *value = eq + 1;
            return f;
        }
    }
    return -1;
}


// Adds a line to the notices main prints before it starts.
__attribute__((format(printf, 2, 3)))
static void add_note(Options *o, const char *format, ...) {
    size_t used = strlen(o->notes);
    if (used + 2 >= sizeof o->notes) return;
    if (used) o->notes[used++] = '\n';
    va_list args;
    va_start(args, format);
    vsnprintf(o->notes + used, sizeof o->notes - used, format, args);
    va_end(args);
}

static int set_flag(Options *o, int f, const char *name, const char *v) {
    SamplerParams *sp = &o->sampling;
    long n = 0;
    int err = 0;
    switch (f) {
    case FLAG_TEMP:
        err = parse_float(name, v, 0.0f, 100.0f, &sp->temperature);
        if (!err && !strcmp(name, "-t") && strspn(v, "0123456789") == strlen(v) && sp->temperature >= 2) // llama.cpp's -t
            add_note(o, "-t %s is the temperature here, as in llama2.c; threads are --threads", v);
        return err;
    case FLAG_TOP_P:
        if (parse_float(name, v, 0.0f, 1.0f, &sp->top_p) == 0) return 0;
        if (!strcmp(name, "-p") && strstr(error_message, "is not a number")) // llama.cpp's -p is the prompt
            return fail("-p: '%s' is not a number (here -p is top-p; give the prompt with -i or --prompt)", v);
        return -1;
    case FLAG_TOP_K: err = parse_int(name, v, 0, INT_MAX, &n); sp->top_k = (int)n; return err;
    case FLAG_MIN_P: return parse_float(name, v, 0.0f, 1.0f, &sp->min_p);
    case FLAG_REPEAT_PENALTY: return parse_float(name, v, 0.01f, 100.0f, &sp->repeat_penalty);
    case FLAG_REPEAT_LAST_N: err = parse_int(name, v, 0, INT_MAX, &n); sp->repeat_last_n = (int)n; return err;
    case FLAG_SEED: o->seed_given = 1; return parse_seed(name, v, &o->seed);
    case FLAG_STEPS: err = parse_int(name, v, 0, INT_MAX, &n); o->steps = (int)n; o->steps_given = 1; return err;
    case FLAG_CONTEXT: err = parse_int(name, v, 0, INT_MAX, &n); o->context = (int)n; return err;
    case FLAG_PROMPT: o->prompt = v; return 0;
    case FLAG_FILE: return file_name(name, v, &o->prompt_file);
    case FLAG_TOKENIZER: return file_name(name, v, &o->tokenizer);
    case FLAG_MODE:
        for (int m = 0; m < 6; m++)
            if (!strcmp(v, mode_names[m])) { o->mode = mode_names[m]; o->mode_bit = 1 << m; return 0; }
        if (strchr(v, '.') || strchr(v, '/')) // llama.cpp's -m is the model
            return fail("-m: unknown mode '%s' (here -m is the mode; the model is the first argument: run MODEL ...)", v);
        return fail("-m: unknown mode '%s' (generate, chat, tokenize, logits, bench or quantize)", v);
    case FLAG_SYSTEM: o->system_prompt = v; return 0;
    case FLAG_OUTPUT: return file_name(name, v, &o->output);
    case FLAG_DTYPE: return parse_dtype(v, &o->dtype);
    case FLAG_TRACE: return file_name(name, v, &o->trace);
    case FLAG_KV:
        if (strcmp(v, "f32") && strcmp(v, "f16")) return fail("%s: '%s' is not f32 or f16", name, v);
        o->kv_type = !strcmp(v, "f16") ? TYPE_F16 : TYPE_F32;
        return 0;
    case FLAG_CHAT_TEMPLATE:
        o->chat_template = template_by_name(v);
        if (o->chat_template < 0) return fail("%s: '%s' is not one of " TEMPLATE_CHOICES, name, v);
        return 0;
    case FLAG_REASONING:
        for (int r = REASONING_OFF; r <= REASONING_HIGH; r++)
            if (!strcmp(v, reasoning_names[r])) { o->reasoning = r; return 0; }
        return fail("%s: '%s' is not one of off, on, low, medium, high", name, v);
    case FLAG_HIDE_REASONING: o->hide_reasoning = 1; return 0;
    default: // FLAG_THREADS
        err = parse_int(name, v, 1, 1024, &n);
        o->threads = (int)n;
#ifndef _OPENMP
        if (!err && n > 1) add_note(o, "%s %s: this build has no OpenMP and runs on one thread (make OPENMP=1)", name, v);
#endif
        return err;
    }
}

enum { ARGS_OK = 0, ARGS_HELP = 1, ARGS_VERSION = 2 };

// llama.cpp's flags that people bring along, and what each is here.
static const struct {
    const char *name;
    int takes_value;
    const char *hint;
} foreign_flags[] = {
    {"-cnv", 0, "a conversation is -m chat here"},
    {"--conversation", 0, "a conversation is -m chat here"},
    {"--interactive", 0, "a conversation is -m chat here"},
    {"--interactive-first", 0, "a conversation is -m chat here"},
    {"-if", 0, "a conversation is -m chat here"},
    {"-no-cnv", 0, "generate is the default mode: drop it"},
    {"--no-conversation", 0, "generate is the default mode: drop it"},
    {"-ngl", 1, "run.c runs on the CPU: drop it"},
    {"--n-gpu-layers", 1, "run.c runs on the CPU: drop it"},
    {"--gpu-layers", 1, "run.c runs on the CPU: drop it"},
    {"--n-predict", 1, "the number of positions is -n here"},
    {"--ctx", 1, "the context is -c (--ctx-size) here"},
    {"--threads-batch", 1, "threads are --threads here, for every step"},
    {"-tb", 1, "threads are --threads here, for every step"},
    {"--model", 1, "the model is the first argument here, with no flag: run MODEL [options]"},
    {"--temperature", 1, "the temperature is -t or --temp here"},
    {"-sys", 1, "the system prompt is -y (--system-prompt) here"},
    {"--system", 1, "the system prompt is -y (--system-prompt) here"},
    {"--batch-size", 1, "run.c sizes its own batches: drop it"},
    {"-b", 1, "run.c sizes its own batches: drop it"},
    {"--ubatch-size", 1, "run.c sizes its own batches: drop it"},
    {"-ub", 1, "run.c sizes its own batches: drop it"},
    {"--flash-attn", 0, "run.c needs no such switch: drop it"},
    {"-fa", 0, "run.c needs no such switch: drop it"},
    {"--no-mmap", 0, "run.c always maps the file: drop it"},
    {"--mlock", 0, "run.c needs no such switch: drop it"},
    {"--color", 0, "run.c needs no such switch: drop it"},
    {"--log-disable", 0, "run.c prints only the text on stdout: drop it"},
};

// The edit distance between a and b (insertions, deletions, substitutions
// and swaps of neighbours), up to 9 (more counts as 9).
static int edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 40 || m > 40) return 9;
    int d[41][41];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m] < 9 ? d[n][m] : 9;
}

// The error for an unknown flag: what a llama.cpp flag is here, or the
// nearest of ours (a spelling with '_' for '-', or up to two edits away).
// *takes_value: whether the flag is thought to take the next argument.
static int unknown_flag(const char *arg, const char *next, int *takes_value) {
    char name[48];
    size_t len = strcspn(arg, "=");
    snprintf(name, sizeof name, "%.*s", (int)(len < 47 ? len : 47), arg);
    for (char *p = name + 1; *p; p++) if (*p == '_') *p = '-';
    // an unknown flag's value is the next argument unless that is a flag or a file
    *takes_value = !arg[len] && next && next[0] != '-' && access(next, F_OK) != 0;
    int best = 9;
    const char *nearest = NULL, *hint = NULL;
    for (size_t i = 0; i < sizeof foreign_flags / sizeof *foreign_flags; i++) {
        int d = edit_distance(name, foreign_flags[i].name);
        if (d < best) { best = d; hint = foreign_flags[i].hint; nearest = NULL; }
        if (d == 0) *takes_value = foreign_flags[i].takes_value && !arg[len];
    }
    for (int f = 0; f < N_FLAGS; f++)
        for (int k = 0; k < 2; k++) {
            const char *ours = k ? cli_flags[f].long_name : cli_flags[f].short_name;
            int d = ours ? edit_distance(name, ours) : 9;
            if (d < best) { best = d; nearest = ours; hint = NULL; }
        }
    static const char *const others[] = {"--help", "--version"};
    for (size_t i = 0; i < 2; i++)
        if (edit_distance(name, others[i]) < best) { best = edit_distance(name, others[i]); nearest = others[i]; hint = NULL; }
    int close = best == 0 || (best <= 2 && strlen(name) >= 5);
    if (close && hint) return fail("%s: not a flag here; %s", arg, hint);
    if (close && nearest) return fail("%s: unknown flag; did you mean %s?", arg, nearest);
    return fail("%s: unknown flag", arg);
}

// A usage error into the list of them (the first few, one a line).
static void add_problem(char *problems, size_t size, int *n) {
    size_t used = strlen(problems);
    if (*n < 6 && used + strlen(error_message) + 8 < size)
        snprintf(problems + used, size - used, "%s%s", *n ? "\nrun: " : "", error_message);
    (*n)++;
}

// ARGS_OK; ARGS_HELP for -h or --help, ARGS_VERSION for --version; -1
// with error_message naming every usage error found (a line each). The
// model is the one argument that is neither a flag nor a flag's value,
// before the flags or after them.
int parse_args(Options *o, int argc, char **argv) {
    *o = (Options){.dtype = -1, .mode = "generate", .mode_bit = MODE_GENERATE, .steps = 256,
                   .chat_template = TEMPLATE_NONE};
    o->sampling = (SamplerParams){.temperature = 1.0f, .top_p = 0.9f, .top_k = 0, .min_p = 0.0f,
                                  .repeat_penalty = 1.0f, .repeat_last_n = 64};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return ARGS_HELP;
        if (!strcmp(argv[i], "--version")) return ARGS_VERSION;
    }
    if (argc < 2) return fail("no model given: run MODEL [options]");
    if (!strcmp(argv[1], "-m") && argc > 2 && (strchr(argv[2], '.') || strchr(argv[2], '/')))
        return fail("-m %s: here -m is the mode; give the model as the first argument: run %s [options]", argv[2], argv[2]);
    char problems[sizeof error_message] = "";
    int n_problems = 0;
    const char *given[N_FLAGS] = {0}; // the name each flag was given by
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value;
        if (arg[0] != '-') { // the model, or a stray word
            int file_like = access(arg, F_OK) == 0 || (strpbrk(arg, "./") && !strchr(arg, ' '));
            if (!o->checkpoint) o->checkpoint = arg;
            else if (file_like) {
                fail("%s: a second model? give one model; every other argument is a flag (a prompt is -i \"...\")", arg);
                add_problem(problems, sizeof problems, &n_problems);
            } else {
                fail("'%.40s%s': not a file; a prompt? give it with -i \"...\"", arg, strlen(arg) > 40 ? "..." : "");
                add_problem(problems, sizeof problems, &n_problems);
            }
            continue;
        }
        int f = find_flag(arg, &value);
        if (f < 0) {
            int takes_value;
            unknown_flag(arg, i + 1 < argc ? argv[i + 1] : NULL, &takes_value);
            add_problem(problems, sizeof problems, &n_problems);
            i += takes_value;
            continue;
        }
        const char *name = arg[1] == '-' ? cli_flags[f].long_name : cli_flags[f].short_name;
        if (cli_flags[f].is_switch && value) {
            fail("%s: takes no value", name);
            add_problem(problems, sizeof problems, &n_problems);
            continue;
        }
        if (cli_flags[f].is_switch) value = "";
        if (!value && i + 1 >= argc) {
            fail("%s: missing value", name);
            add_problem(problems, sizeof problems, &n_problems);
            continue;
        }
        if (!value) value = argv[++i];
        if (given[f]) {
            fail("%s: given twice (also as %s)%s", name, given[f],
                 f == FLAG_TEMP && !strcmp(name, "-t") ? "; threads are --threads" : "");
            add_problem(problems, sizeof problems, &n_problems);
            continue;
        }
        given[f] = name;
        if (set_flag(o, f, name, value) != 0) add_problem(problems, sizeof problems, &n_problems);
    }
    if (!o->checkpoint && !n_problems) { fail("no model given: run MODEL [options]"); add_problem(problems, sizeof problems, &n_problems); }
    for (int f = 0; f < N_FLAGS; f++)
        if (given[f] && !(cli_flags[f].modes & o->mode_bit)) {
            fail("%s: not used by -m %s", given[f], o->mode);
            add_problem(problems, sizeof problems, &n_problems);
        }
    if (o->prompt && o->prompt_file) { fail("-i and -f: give the prompt one way, not both"); add_problem(problems, sizeof problems, &n_problems); }
    if (o->mode_bit == MODE_LOGITS && (!given[FLAG_FILE] || !given[FLAG_OUTPUT])) {
        fail("-m logits needs -f IDS_FILE and -o OUT_FILE");
        add_problem(problems, sizeof problems, &n_problems);
    }
    if (o->mode_bit == MODE_QUANTIZE && (!given[FLAG_OUTPUT] || !given[FLAG_DTYPE])) {
        fail("-m quantize needs -o OUT_FILE and --dtype TYPE (f32, f16, q8_0, q4_0, q4_k, q6_k, q4_k_m, q5_k_m, ...)");
        add_problem(problems, sizeof problems, &n_problems);
    }
    if (o->prompt_file && !strcmp(o->prompt_file, "-") && o->mode_bit == MODE_CHAT) {
        fail("-f -: chat reads its turns from stdin; give the first message with -i");
        add_problem(problems, sizeof problems, &n_problems);
    }
    if (!n_problems) return ARGS_OK;
    if (n_problems > 6) {
        size_t used = strlen(problems);
        snprintf(problems + used, sizeof problems - used, "\nrun: and %d more", n_problems - 6);
    }
    snprintf(error_message, sizeof error_message, "%s", problems);
    return -1;
}

#define TEXT_FILE_MAX_BYTES ((size_t)256 << 20) // prompt and ids files: far beyond any context

// Reads a whole text file into a NUL-terminated buffer (caller frees).
// "-" is standard input.
char *read_text_file(const char *path, size_t *len) {
    struct stat st;
    int from_stdin = !strcmp(path, "-");
    if (!from_stdin && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) { fail("%s: is a directory, not a file", path); return NULL; }
    FILE *f = from_stdin ? stdin : fopen(path, "rb");
    if (from_stdin) path = "stdin";
    if (!f) { fail("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    // checked as it is read, so that /dev/zero or an endless stream stops at once
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    int nul = 0, too_big = 0;
    while (buf) {
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        nul = memchr(buf + n, '\0', got) != NULL;
        n += got;
        if (n < cap - 1 || nul) break;
        if (cap >= TEXT_FILE_MAX_BYTES) { too_big = 1; break; }
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) { free(buf); buf = NULL; break; }
        buf = bigger;
        cap *= 2;
    }
    int read_error = ferror(f);
    if (!from_stdin) fclose(f);
    if (!buf) { fail("%s: out of memory", path); return NULL; }
    if (read_error || nul || too_big) {
        free(buf);
        if (read_error) fail("%s: read error", path);
        else if (nul) fail("%s: contains a NUL byte; not a text file", path);
        else fail("%s: more than %zu MiB; no context holds that much text", path, TEXT_FILE_MAX_BYTES >> 20);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

#ifndef TESTING
// 1 if stdin holds text that should be the prompt: a file, or a pipe with
// text (or its end) ready within 0.1 s. A pipe with nothing in it then is
// left alone, and said so: waiting on it could hang a program that runs us.
static int stdin_has_text(void) {
    struct stat st;
    if (isatty(STDIN_FILENO) || fstat(STDIN_FILENO, &st) != 0) return 0;
    if (S_ISREG(st.st_mode)) return st.st_size > 0;
    if (!S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode)) return 0;
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    if (poll(&p, 1, 100) == 1) return 1; // a pipeline's first bytes come within 0.1 s
    fprintf(stderr, "run: stdin is a pipe with nothing in it yet; it is not read (the prompt is -i, or -f - to wait for stdin)\n");
    return 0;
}

// The prompt text: -i, or -f's file without one final newline (as
// llama.cpp reads it, so that -f and -i with the same text agree); NULL
// with error_message.
static char *prompt_text(const Options *o, size_t *len) {
    if (!o->prompt && !o->prompt_file && (o->mode_bit & (MODE_GENERATE | MODE_TOKENIZE)) && stdin_has_text()) {
        Options from_stdin = *o; // a prompt piped in is read as -f - reads it
        from_stdin.prompt_file = "-";
        return prompt_text(&from_stdin, len);
    }
    if (!o->prompt_file) {
        char *text = strdup(o->prompt ? o->prompt : "");
        if (!text) fail("out of memory");
        *len = text ? strlen(text) : 0;
        return text;
    }
    char *text = read_text_file(o->prompt_file, len);
    if (text && o->mode_bit != MODE_LOGITS && *len > 0 && text[*len - 1] == '\n') text[--*len] = '\0';
    return text;
}

static int is_gguf_name(const char *path) {
    size_t n = strlen(path);
    return n >= 5 && !strcasecmp(path + n - 5, ".gguf");
}

// What a model has that run.c's own format (version 1) cannot hold, or NULL.
static const char *beyond_runc(const Transformer *t) {
    const Config *c = &t->config;
    if (c->rope_neox) return "NEOX-style RoPE (qwen2)";
    if (t->weights.rope_freqs || c->rope_scale != 1.0f) return "RoPE scaling";
    if (c->head_size * c->n_heads != c->dim) return "a head size other than dim / n_heads";
    if (c->n_experts > 0) return "a mixture of experts";
    if (c->gate != GATE_SILU || c->post_norms || c->embed_scale > 0 || c->query_scale > 0 || c->logit_softcap > 0 ||
        c->window > 0 || c->rope_yarn_context > 0)
        return "Gemma's or gpt-oss's layers (their gates, post-norms, sliding windows, YaRN)";
    for (int l = 0; l < c->n_layers; l++) {
        const LayerWeights *lw = &t->weights.layers[l];
        if (lw->bq || lw->bk || lw->bv || lw->bo) return "attention biases";
        if (lw->sinks) return "attention sinks";
        if (lw->q_norm || lw->k_norm) return "per-head q/k norms (qwen3)";
    }
    return NULL;
}

// Which input path names ("the model", "-z's tokenizer", "-f's file", the
// default tokenizer), or NULL.
static const char *input_named(const Options *o, const char *path) {
    if (same_file(path, o->checkpoint)) return "the model";
    if (o->tokenizer && same_file(path, o->tokenizer)) return "-z's tokenizer";
    if (!o->tokenizer && same_file(path, "tokenizer.bin")) return "the default tokenizer, ./tokenizer.bin";
    if (o->prompt_file && same_file(path, o->prompt_file)) return "-f's file";
    return NULL;
}

// -o and --trace write: neither may name an input, nor the file the other
// names (the trace would go into an -o file being replaced).
static int check_writes(const Options *o) {
    const char *paths[2] = {o->output, o->trace}, *flags[2] = {"-o", "--trace"}, *verbs[2] = {"overwrite", "append to"};
    for (int i = 0; i < 2; i++) {
        const char *input = paths[i] ? input_named(o, paths[i]) : NULL;
        if (input) return fail("%s: %s would %s %s; give it a file of its own", paths[i], flags[i], verbs[i], input);
    }
    if (o->output && o->trace && (!strcmp(o->output, o->trace) || same_file(o->output, o->trace)))
        return fail("%s: -o and --trace name the same file; give each its own", o->trace);
    return 0;
}

static int quantize_to_gguf(const Options *o, const Transformer *t, const Tokenizer *tk) {
    if (quantize_gguf(t, tk, o->checkpoint, o->output, o->dtype) != 0) return -1;
    fprintf(stderr, "wrote %s: %s\n", o->output, dtype_name(o->dtype));
    return 0;
}

static int run_mode(const Options *o, Transformer *t, Tokenizer *tk, const char *text, size_t text_len) {
    const Config *c = &t->config;
    if (o->mode_bit == MODE_LOGITS) return logits_mode(t, o->prompt_file, text, o->output);
    if (o->mode_bit == MODE_BENCH) return bench_mode(t, o->checkpoint);
    if (o->mode_bit == MODE_QUANTIZE && o->tokenizer && (t->is_gguf || !is_gguf_name(o->output)))
        return fail("-z: -m quantize reads a tokenizer only to write GGUF (-o NAME.gguf) from a llama2.c or run.c "
                    "checkpoint; leave it out");
    if (o->mode_bit == MODE_QUANTIZE && is_gguf_name(o->output) && t->is_gguf) return quantize_to_gguf(o, t, NULL);
    if (o->mode_bit == MODE_QUANTIZE && !is_gguf_name(o->output)) {
        const char *beyond = beyond_runc(t);
        if (beyond)
            return fail("%s: the model has %s, which run.c's format cannot hold; write GGUF instead (-o NAME.gguf)",
                        o->checkpoint, beyond);
        if (quantize_mode(t, o->checkpoint, o->output, o->dtype) != 0) return -1;
        fprintf(stderr, "wrote %s: %s\n", o->output, dtype_name(o->dtype)); // the mix's name, or the type's
        if (t->is_gguf) // its vocabulary stays behind: the default tokenizer.bin may not be this model's
            fprintf(stderr, "run: %s holds no tokenizer (run.c's format has none): run it with -z %s\n", o->output,
                    o->checkpoint);
        return 0;
    }
    // a GGUF model carries its tokenizer; -z still overrides it
    const char *tokenizer = o->tokenizer ? o->tokenizer : t->is_gguf ? o->checkpoint : "tokenizer.bin";
    if (!o->tokenizer && !t->is_gguf && access(tokenizer, F_OK) != 0)
        return fail("tokenizer.bin: not found, and %s holds no tokenizer: give one with -z (a llama2.c "
                    "tokenizer.bin, or a GGUF file with a vocabulary; `make` links Llama 2's here)", o->checkpoint);
    if (tokenizer_open(tk, tokenizer, c->vocab_size) != 0) return -1;
    if (!tk->ids_known) { tk->bos_id = c->bos_id; tk->eos_id = c->eos_id; } // tokenizer.bin has no ids
    if (o->chat_template != TEMPLATE_NONE) { // a name means that template's current version
        tk->chat_template = o->chat_template;
        tk->template_early = 0;
    }
    if (o->mode_bit == MODE_QUANTIZE) return quantize_to_gguf(o, t, tk); // with the tokenizer as its vocabulary
    if (o->mode_bit == MODE_TOKENIZE) return tokenize_mode(tk, text, text_len);
    Sampler sampler;
    uint64_t seed = o->seed_given ? o->seed : (uint64_t)time(NULL);
    if (sampler_init(&sampler, c->vocab_size, o->sampling, seed) != 0) return fail("out of memory");
    int steps = o->steps, err;
    if (o->mode_bit == MODE_CHAT) {
        err = chat_mode(t, tk, &sampler, o->system_prompt, o->prompt || o->prompt_file ? text : NULL, steps,
                        o->reasoning, o->hide_reasoning);
        sampler_free(&sampler);
        return err;
    }
    if (steps > c->seq_len) {
        if (o->steps_given)
            fprintf(stderr, "run: -n %d is more than the context length; running %d positions\n", steps, c->seq_len);
        steps = c->seq_len;
    }
    err = generate(t, tk, &sampler, text, steps, stdout);
    sampler_free(&sampler);
    return err;
}

// Loads the model and runs the mode. free_cores: 0 when the thread count
// is fixed, else the cores free at the start (threads on a busy machine).
static int open_and_run(const Options *o, Tokenizer *tk, const char *text, size_t text_len, int free_cores) {
    Transformer t;
    int no_forward = o->mode_bit == MODE_TOKENIZE || o->mode_bit == MODE_QUANTIZE;
    int err = no_forward ? transformer_open_mapped(&t, o->checkpoint, o->context)
                         : transformer_open_kv(&t, o->checkpoint, o->context, o->kv_type);
    if (err) return err;
    if (free_cores > 0) threads_adapt(&t, threads_available(), free_cores);
    if (o->context > t.config.seq_len) // -c only shortens: positions past training are not computed right
        fprintf(stderr, "run: -c %d is more than the model's context of %d positions; using %d\n", o->context,
                t.config.seq_len, t.config.seq_len);
    int trace_existed = o->trace && access(o->trace, F_OK) == 0;
    if (o->trace && !(t.trace = fopen(o->trace, "a"))) {
        err = fail("%s: cannot open for appending: %s", o->trace, strerror(errno));
    } else if (t.trace && check_writes(o) != 0) { // again, now that the trace exists: another name for -o's file
        fclose(t.trace);
        t.trace = NULL;
        if (!trace_existed) remove(o->trace); // the empty file just made
        err = -1;
    } else {
        err = run_mode(o, &t, tk, text, text_len);
        if (t.trace && fclose(t.trace) != 0 && !err) err = fail("%s: write failed", o->trace);
        t.trace = NULL;
    }
    transformer_close(&t);
    return err;
}

// --version: the version, and what this build computes with.
static void print_version(void) {
    printf("run.c %s\n", RUN_VERSION);
    printf("build: %s kernels, ", SIMD_NAME);
#ifdef _OPENMP
    printf("OpenMP (%d threads here), ", threads_available());
#else
    printf("no OpenMP (one thread), ");
#endif
    printf("%s, %s%s\n", HAVE_LINUX ? "Linux" : "plain POSIX", HAVE_AMX ? "AMX, " : "",
#ifdef __VERSION__
           "compiler " __VERSION__
#else
           "compiler unknown"
#endif
    );
}

// Output that could not be all written (a full disk, say) is an error,
// except into a closed pipe: its reader took all it wanted.
static int check_stdout(void) {
    flush_output(stdout);
    if (!ferror(stdout) || output_errno == EPIPE) return 0;
    return fail("stdout: write failed%s%s; the output is incomplete", output_errno ? ": " : "",
                output_errno ? strerror(output_errno) : "");
}

int main(int argc, char **argv) {
    struct sigaction on_ctrl_c = {0};
    on_ctrl_c.sa_handler = on_interrupt; // no SA_RESTART: Ctrl-C also ends a wait for input
    sigaction(SIGINT, &on_ctrl_c, NULL);
    signal(SIGTERM, on_terminate);
    catch_bus_errors();
    Options o;
    int parsed = parse_args(&o, argc, argv);
    if (parsed == ARGS_HELP) { usage(stdout); return 0; }
    if (parsed == ARGS_VERSION) { print_version(); return 0; }
    if (parsed != ARGS_OK) {
        fprintf(stderr, "run: %s (run -h for usage)\n", error_message);
        return 2;
    }
    for (const char *note = o.notes; *note;) { // a line each
        size_t len = strcspn(note, "\n");
        fprintf(stderr, "run: %.*s\n", (int)len, note);
        note += len + (note[len] == '\n');
    }
#ifdef _OPENMP
    if (o.threads > 0) omp_set_num_threads(o.threads);
#endif
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && threads_available() > cores) // OpenMP threads wait by spinning: more than the cores slows every step
        fprintf(stderr, "run: %d threads (%s) are more than the %ld cores here; expect it to run many times slower\n",
                threads_available(), o.threads ? "--threads" : "OMP_NUM_THREADS", cores);
    size_t text_len = 0;
    char *text = prompt_text(&o, &text_len);
    // outputs are checked before the model loads: a mistake should not cost the load
    int err = !text || (o.output && check_output(o.output) != 0) || (o.trace && check_output(o.trace) != 0) ||
              check_writes(&o) != 0 ? -1 : 0;
    Tokenizer tk = {0};
    if (!err && o.mode_bit == MODE_TOKENIZE && gguf_without_tensors(o.checkpoint)) {
        // a vocabulary-only file tokenizes by itself, as llama-tokenize does
        err = o.tokenizer ? fail("%s: a vocabulary-only file tokenizes by itself; drop -z", o.checkpoint)
                          : tokenizer_open(&tk, o.checkpoint, 0);
        if (!err) err = tokenize_mode(&tk, text, text_len);
    } else if (!err) {
        // the count adapts unless fixed; bench measures the count it is given
        int fixed = o.threads > 0 || getenv("OMP_NUM_THREADS") || o.mode_bit == MODE_BENCH;
        err = open_and_run(&o, &tk, text, text_len, fixed ? 0 : cores_free(threads_available(), 3));
    }
    tokenizer_close(&tk);
    free(text);
    if (!err && check_stdout() != 0) err = -1;
    if (err) fprintf(stderr, "run: %s\n", error_message);
    return interrupted && (err || o.mode_bit == MODE_GENERATE) ? 130 : err ? 1 : 0;
}
#endif


/* ============================================================================
   UNICODE TABLES, generated by tools/gen_unicode.py from the Unicode Character
   Database 15.0.0 (UnicodeData.txt); do not edit. Sorted, disjoint, inclusive
   ranges: letters \p{L} = Lu Ll Lt Lm Lo (136104 code points), numbers \p{N} =
   Nd Nl No (1831), whitespace \s = Unicode White_Space = Zs Zl Zp, U+0009..U+000D,
   U+0085 (25); cased letters Lu Lt (1862), lowercase letters Ll (2233), marks
   \p{M} = Mn Mc Me (2450).
   ============================================================================ */

static const uint32_t unicode_letter_ranges[][2] = {
    {0x00041, 0x0005A}, {0x00061, 0x0007A}, {0x000AA, 0x000AA}, {0x000B5, 0x000B5}, {0x000BA, 0x000BA},
    {0x000C0, 0x000D6}, {0x000D8, 0x000F6}, {0x000F8, 0x002C1}, {0x002C6, 0x002D1}, {0x002E0, 0x002E4},
    {0x002EC, 0x002EC}, {0x002EE, 0x002EE}, {0x00370, 0x00374}, {0x00376, 0x00377}, {0x0037A, 0x0037D},
    {0x0037F, 0x0037F}, {0x00386, 0x00386}, {0x00388, 0x0038A}, {0x0038C, 0x0038C}, {0x0038E, 0x003A1},
    {0x003A3, 0x003F5}, {0x003F7, 0x00481}, {0x0048A, 0x0052F}, {0x00531, 0x00556}, {0x00559, 0x00559},
    {0x00560, 0x00588}, {0x005D0, 0x005EA}, {0x005EF, 0x005F2}, {0x00620, 0x0064A}, {0x0066E, 0x0066F},
    {0x00671, 0x006D3}, {0x006D5, 0x006D5}, {0x006E5, 0x006E6}, {0x006EE, 0x006EF}, {0x006FA, 0x006FC},
    {0x006FF, 0x006FF}, {0x00710, 0x00710}, {0x00712, 0x0072F}, {0x0074D, 0x007A5}, {0x007B1, 0x007B1},
    {0x007CA, 0x007EA}, {0x007F4, 0x007F5}, {0x007FA, 0x007FA}, {0x00800, 0x00815}, {0x0081A, 0x0081A},
    {0x00824, 0x00824}, {0x00828, 0x00828}, {0x00840, 0x00858}, {0x00860, 0x0086A}, {0x00870, 0x00887},
    {0x00889, 0x0088E}, {0x008A0, 0x008C9}, {0x00904, 0x00939}, {0x0093D, 0x0093D}, {0x00950, 0x00950},
    {0x00958, 0x00961}, {0x00971, 0x00980}, {0x00985, 0x0098C}, {0x0098F, 0x00990}, {0x00993, 0x009A8},
    {0x009AA, 0x009B0}, {0x009B2, 0x009B2}, {0x009B6, 0x009B9}, {0x009BD, 0x009BD}, {0x009CE, 0x009CE},
    {0x009DC, 0x009DD}, {0x009DF, 0x009E1}, {0x009F0, 0x009F1}, {0x009FC, 0x009FC}, {0x00A05, 0x00A0A},
    {0x00A0F, 0x00A10}, {0x00A13, 0x00A28}, {0x00A2A, 0x00A30}, {0x00A32, 0x00A33}, {0x00A35, 0x00A36},
    {0x00A38, 0x00A39}, {0x00A59, 0x00A5C}, {0x00A5E, 0x00A5E}, {0x00A72, 0x00A74}, {0x00A85, 0x00A8D},
    {0x00A8F, 0x00A91}, {0x00A93, 0x00AA8}, {0x00AAA, 0x00AB0}, {0x00AB2, 0x00AB3}, {0x00AB5, 0x00AB9},
    {0x00ABD, 0x00ABD}, {0x00AD0, 0x00AD0}, {0x00AE0, 0x00AE1}, {0x00AF9, 0x00AF9}, {0x00B05, 0x00B0C},
    {0x00B0F, 0x00B10}, {0x00B13, 0x00B28}, {0x00B2A, 0x00B30}, {0x00B32, 0x00B33}, {0x00B35, 0x00B39},
    {0x00B3D, 0x00B3D}, {0x00B5C, 0x00B5D}, {0x00B5F, 0x00B61}, {0x00B71, 0x00B71}, {0x00B83, 0x00B83},
    {0x00B85, 0x00B8A}, {0x00B8E, 0x00B90}, {0x00B92, 0x00B95}, {0x00B99, 0x00B9A}, {0x00B9C, 0x00B9C},
    {0x00B9E, 0x00B9F}, {0x00BA3, 0x00BA4}, {0x00BA8, 0x00BAA}, {0x00BAE, 0x00BB9}, {0x00BD0, 0x00BD0},
    {0x00C05, 0x00C0C}, {0x00C0E, 0x00C10}, {0x00C12, 0x00C28}, {0x00C2A, 0x00C39}, {0x00C3D, 0x00C3D},
    {0x00C58, 0x00C5A}, {0x00C5D, 0x00C5D}, {0x00C60, 0x00C61}, {0x00C80, 0x00C80}, {0x00C85, 0x00C8C},
    {0x00C8E, 0x00C90}, {0x00C92, 0x00CA8}, {0x00CAA, 0x00CB3}, {0x00CB5, 0x00CB9}, {0x00CBD, 0x00CBD},
    {0x00CDD, 0x00CDE}, {0x00CE0, 0x00CE1}, {0x00CF1, 0x00CF2}, {0x00D04, 0x00D0C}, {0x00D0E, 0x00D10},
    {0x00D12, 0x00D3A}, {0x00D3D, 0x00D3D}, {0x00D4E, 0x00D4E}, {0x00D54, 0x00D56}, {0x00D5F, 0x00D61},
    {0x00D7A, 0x00D7F}, {0x00D85, 0x00D96}, {0x00D9A, 0x00DB1}, {0x00DB3, 0x00DBB}, {0x00DBD, 0x00DBD},
    {0x00DC0, 0x00DC6}, {0x00E01, 0x00E30}, {0x00E32, 0x00E33}, {0x00E40, 0x00E46}, {0x00E81, 0x00E82},
    {0x00E84, 0x00E84}, {0x00E86, 0x00E8A}, {0x00E8C, 0x00EA3}, {0x00EA5, 0x00EA5}, {0x00EA7, 0x00EB0},
    {0x00EB2, 0x00EB3}, {0x00EBD, 0x00EBD}, {0x00EC0, 0x00EC4}, {0x00EC6, 0x00EC6}, {0x00EDC, 0x00EDF},
    {0x00F00, 0x00F00}, {0x00F40, 0x00F47}, {0x00F49, 0x00F6C}, {0x00F88, 0x00F8C}, {0x01000, 0x0102A},
    {0x0103F, 0x0103F}, {0x01050, 0x01055}, {0x0105A, 0x0105D}, {0x01061, 0x01061}, {0x01065, 0x01066},
    {0x0106E, 0x01070}, {0x01075, 0x01081}, {0x0108E, 0x0108E}, {0x010A0, 0x010C5}, {0x010C7, 0x010C7},
    {0x010CD, 0x010CD}, {0x010D0, 0x010FA}, {0x010FC, 0x01248}, {0x0124A, 0x0124D}, {0x01250, 0x01256},
    {0x01258, 0x01258}, {0x0125A, 0x0125D}, {0x01260, 0x01288}, {0x0128A, 0x0128D}, {0x01290, 0x012B0},
    {0x012B2, 0x012B5}, {0x012B8, 0x012BE}, {0x012C0, 0x012C0}, {0x012C2, 0x012C5}, {0x012C8, 0x012D6},
    {0x012D8, 0x01310}, {0x01312, 0x01315}, {0x01318, 0x0135A}, {0x01380, 0x0138F}, {0x013A0, 0x013F5},
    {0x013F8, 0x013FD}, {0x01401, 0x0166C}, {0x0166F, 0x0167F}, {0x01681, 0x0169A}, {0x016A0, 0x016EA},
    {0x016F1, 0x016F8}, {0x01700, 0x01711}, {0x0171F, 0x01731}, {0x01740, 0x01751}, {0x01760, 0x0176C},
    {0x0176E, 0x01770}, {0x01780, 0x017B3}, {0x017D7, 0x017D7}, {0x017DC, 0x017DC}, {0x01820, 0x01878},
    {0x01880, 0x01884}, {0x01887, 0x018A8}, {0x018AA, 0x018AA}, {0x018B0, 0x018F5}, {0x01900, 0x0191E},
    {0x01950, 0x0196D}, {0x01970, 0x01974}, {0x01980, 0x019AB}, {0x019B0, 0x019C9}, {0x01A00, 0x01A16},
    {0x01A20, 0x01A54}, {0x01AA7, 0x01AA7}, {0x01B05, 0x01B33}, {0x01B45, 0x01B4C}, {0x01B83, 0x01BA0},
    {0x01BAE, 0x01BAF}, {0x01BBA, 0x01BE5}, {0x01C00, 0x01C23}, {0x01C4D, 0x01C4F}, {0x01C5A, 0x01C7D},
    {0x01C80, 0x01C88}, {0x01C90, 0x01CBA}, {0x01CBD, 0x01CBF}, {0x01CE9, 0x01CEC}, {0x01CEE, 0x01CF3},
    {0x01CF5, 0x01CF6}, {0x01CFA, 0x01CFA}, {0x01D00, 0x01DBF}, {0x01E00, 0x01F15}, {0x01F18, 0x01F1D},
    {0x01F20, 0x01F45}, {0x01F48, 0x01F4D}, {0x01F50, 0x01F57}, {0x01F59, 0x01F59}, {0x01F5B, 0x01F5B},
    {0x01F5D, 0x01F5D}, {0x01F5F, 0x01F7D}, {0x01F80, 0x01FB4}, {0x01FB6, 0x01FBC}, {0x01FBE, 0x01FBE},
    {0x01FC2, 0x01FC4}, {0x01FC6, 0x01FCC}, {0x01FD0, 0x01FD3}, {0x01FD6, 0x01FDB}, {0x01FE0, 0x01FEC},
    {0x01FF2, 0x01FF4}, {0x01FF6, 0x01FFC}, {0x02071, 0x02071}, {0x0207F, 0x0207F}, {0x02090, 0x0209C},
    {0x02102, 0x02102}, {0x02107, 0x02107}, {0x0210A, 0x02113}, {0x02115, 0x02115}, {0x02119, 0x0211D},
    {0x02124, 0x02124}, {0x02126, 0x02126}, {0x02128, 0x02128}, {0x0212A, 0x0212D}, {0x0212F, 0x02139},
    {0x0213C, 0x0213F}, {0x02145, 0x02149}, {0x0214E, 0x0214E}, {0x02183, 0x02184}, {0x02C00, 0x02CE4},
    {0x02CEB, 0x02CEE}, {0x02CF2, 0x02CF3}, {0x02D00, 0x02D25}, {0x02D27, 0x02D27}, {0x02D2D, 0x02D2D},
    {0x02D30, 0x02D67}, {0x02D6F, 0x02D6F}, {0x02D80, 0x02D96}, {0x02DA0, 0x02DA6}, {0x02DA8, 0x02DAE},
    {0x02DB0, 0x02DB6}, {0x02DB8, 0x02DBE}, {0x02DC0, 0x02DC6}, {0x02DC8, 0x02DCE}, {0x02DD0, 0x02DD6},
    {0x02DD8, 0x02DDE}, {0x02E2F, 0x02E2F}, {0x03005, 0x03006}, {0x03031, 0x03035}, {0x0303B, 0x0303C},
    {0x03041, 0x03096}, {0x0309D, 0x0309F}, {0x030A1, 0x030FA}, {0x030FC, 0x030FF}, {0x03105, 0x0312F},
    {0x03131, 0x0318E}, {0x031A0, 0x031BF}, {0x031F0, 0x031FF}, {0x03400, 0x04DBF}, {0x04E00, 0x0A48C},
    {0x0A4D0, 0x0A4FD}, {0x0A500, 0x0A60C}, {0x0A610, 0x0A61F}, {0x0A62A, 0x0A62B}, {0x0A640, 0x0A66E},
    {0x0A67F, 0x0A69D}, {0x0A6A0, 0x0A6E5}, {0x0A717, 0x0A71F}, {0x0A722, 0x0A788}, {0x0A78B, 0x0A7CA},
    {0x0A7D0, 0x0A7D1}, {0x0A7D3, 0x0A7D3}, {0x0A7D5, 0x0A7D9}, {0x0A7F2, 0x0A801}, {0x0A803, 0x0A805},
    {0x0A807, 0x0A80A}, {0x0A80C, 0x0A822}, {0x0A840, 0x0A873}, {0x0A882, 0x0A8B3}, {0x0A8F2, 0x0A8F7},
    {0x0A8FB, 0x0A8FB}, {0x0A8FD, 0x0A8FE}, {0x0A90A, 0x0A925}, {0x0A930, 0x0A946}, {0x0A960, 0x0A97C},
    {0x0A984, 0x0A9B2}, {0x0A9CF, 0x0A9CF}, {0x0A9E0, 0x0A9E4}, {0x0A9E6, 0x0A9EF}, {0x0A9FA, 0x0A9FE},
    {0x0AA00, 0x0AA28}, {0x0AA40, 0x0AA42}, {0x0AA44, 0x0AA4B}, {0x0AA60, 0x0AA76}, {0x0AA7A, 0x0AA7A},
    {0x0AA7E, 0x0AAAF}, {0x0AAB1, 0x0AAB1}, {0x0AAB5, 0x0AAB6}, {0x0AAB9, 0x0AABD}, {0x0AAC0, 0x0AAC0},
    {0x0AAC2, 0x0AAC2}, {0x0AADB, 0x0AADD}, {0x0AAE0, 0x0AAEA}, {0x0AAF2, 0x0AAF4}, {0x0AB01, 0x0AB06},
    {0x0AB09, 0x0AB0E}, {0x0AB11, 0x0AB16}, {0x0AB20, 0x0AB26}, {0x0AB28, 0x0AB2E}, {0x0AB30, 0x0AB5A},
    {0x0AB5C, 0x0AB69}, {0x0AB70, 0x0ABE2}, {0x0AC00, 0x0D7A3}, {0x0D7B0, 0x0D7C6}, {0x0D7CB, 0x0D7FB},
    {0x0F900, 0x0FA6D}, {0x0FA70, 0x0FAD9}, {0x0FB00, 0x0FB06}, {0x0FB13, 0x0FB17}, {0x0FB1D, 0x0FB1D},
    {0x0FB1F, 0x0FB28}, {0x0FB2A, 0x0FB36}, {0x0FB38, 0x0FB3C}, {0x0FB3E, 0x0FB3E}, {0x0FB40, 0x0FB41},
    {0x0FB43, 0x0FB44}, {0x0FB46, 0x0FBB1}, {0x0FBD3, 0x0FD3D}, {0x0FD50, 0x0FD8F}, {0x0FD92, 0x0FDC7},
    {0x0FDF0, 0x0FDFB}, {0x0FE70, 0x0FE74}, {0x0FE76, 0x0FEFC}, {0x0FF21, 0x0FF3A}, {0x0FF41, 0x0FF5A},
    {0x0FF66, 0x0FFBE}, {0x0FFC2, 0x0FFC7}, {0x0FFCA, 0x0FFCF}, {0x0FFD2, 0x0FFD7}, {0x0FFDA, 0x0FFDC},
    {0x10000, 0x1000B}, {0x1000D, 0x10026}, {0x10028, 0x1003A}, {0x1003C, 0x1003D}, {0x1003F, 0x1004D},
    {0x10050, 0x1005D}, {0x10080, 0x100FA}, {0x10280, 0x1029C}, {0x102A0, 0x102D0}, {0x10300, 0x1031F},
    {0x1032D, 0x10340}, {0x10342, 0x10349}, {0x10350, 0x10375}, {0x10380, 0x1039D}, {0x103A0, 0x103C3},
    {0x103C8, 0x103CF}, {0x10400, 0x1049D}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10500, 0x10527},
    {0x10530, 0x10563}, {0x10570, 0x1057A}, {0x1057C, 0x1058A}, {0x1058C, 0x10592}, {0x10594, 0x10595},
    {0x10597, 0x105A1}, {0x105A3, 0x105B1}, {0x105B3, 0x105B9}, {0x105BB, 0x105BC}, {0x10600, 0x10736},
    {0x10740, 0x10755}, {0x10760, 0x10767}, {0x10780, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA},
    {0x10800, 0x10805}, {0x10808, 0x10808}, {0x1080A, 0x10835}, {0x10837, 0x10838}, {0x1083C, 0x1083C},
    {0x1083F, 0x10855}, {0x10860, 0x10876}, {0x10880, 0x1089E}, {0x108E0, 0x108F2}, {0x108F4, 0x108F5},
    {0x10900, 0x10915}, {0x10920, 0x10939}, {0x10980, 0x109B7}, {0x109BE, 0x109BF}, {0x10A00, 0x10A00},
    {0x10A10, 0x10A13}, {0x10A15, 0x10A17}, {0x10A19, 0x10A35}, {0x10A60, 0x10A7C}, {0x10A80, 0x10A9C},
    {0x10AC0, 0x10AC7}, {0x10AC9, 0x10AE4}, {0x10B00, 0x10B35}, {0x10B40, 0x10B55}, {0x10B60, 0x10B72},
    {0x10B80, 0x10B91}, {0x10C00, 0x10C48}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x10D00, 0x10D23},
    {0x10E80, 0x10EA9}, {0x10EB0, 0x10EB1}, {0x10F00, 0x10F1C}, {0x10F27, 0x10F27}, {0x10F30, 0x10F45},
    {0x10F70, 0x10F81}, {0x10FB0, 0x10FC4}, {0x10FE0, 0x10FF6}, {0x11003, 0x11037}, {0x11071, 0x11072},
    {0x11075, 0x11075}, {0x11083, 0x110AF}, {0x110D0, 0x110E8}, {0x11103, 0x11126}, {0x11144, 0x11144},
    {0x11147, 0x11147}, {0x11150, 0x11172}, {0x11176, 0x11176}, {0x11183, 0x111B2}, {0x111C1, 0x111C4},
    {0x111DA, 0x111DA}, {0x111DC, 0x111DC}, {0x11200, 0x11211}, {0x11213, 0x1122B}, {0x1123F, 0x11240},
    {0x11280, 0x11286}, {0x11288, 0x11288}, {0x1128A, 0x1128D}, {0x1128F, 0x1129D}, {0x1129F, 0x112A8},
    {0x112B0, 0x112DE}, {0x11305, 0x1130C}, {0x1130F, 0x11310}, {0x11313, 0x11328}, {0x1132A, 0x11330},
    {0x11332, 0x11333}, {0x11335, 0x11339}, {0x1133D, 0x1133D}, {0x11350, 0x11350}, {0x1135D, 0x11361},
    {0x11400, 0x11434}, {0x11447, 0x1144A}, {0x1145F, 0x11461}, {0x11480, 0x114AF}, {0x114C4, 0x114C5},
    {0x114C7, 0x114C7}, {0x11580, 0x115AE}, {0x115D8, 0x115DB}, {0x11600, 0x1162F}, {0x11644, 0x11644},
    {0x11680, 0x116AA}, {0x116B8, 0x116B8}, {0x11700, 0x1171A}, {0x11740, 0x11746}, {0x11800, 0x1182B},
    {0x118A0, 0x118DF}, {0x118FF, 0x11906}, {0x11909, 0x11909}, {0x1190C, 0x11913}, {0x11915, 0x11916},
    {0x11918, 0x1192F}, {0x1193F, 0x1193F}, {0x11941, 0x11941}, {0x119A0, 0x119A7}, {0x119AA, 0x119D0},
    {0x119E1, 0x119E1}, {0x119E3, 0x119E3}, {0x11A00, 0x11A00}, {0x11A0B, 0x11A32}, {0x11A3A, 0x11A3A},
    {0x11A50, 0x11A50}, {0x11A5C, 0x11A89}, {0x11A9D, 0x11A9D}, {0x11AB0, 0x11AF8}, {0x11C00, 0x11C08},
    {0x11C0A, 0x11C2E}, {0x11C40, 0x11C40}, {0x11C72, 0x11C8F}, {0x11D00, 0x11D06}, {0x11D08, 0x11D09},
    {0x11D0B, 0x11D30}, {0x11D46, 0x11D46}, {0x11D60, 0x11D65}, {0x11D67, 0x11D68}, {0x11D6A, 0x11D89},
    {0x11D98, 0x11D98}, {0x11EE0, 0x11EF2}, {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33},
    {0x11FB0, 0x11FB0}, {0x12000, 0x12399}, {0x12480, 0x12543}, {0x12F90, 0x12FF0}, {0x13000, 0x1342F},
    {0x13441, 0x13446}, {0x14400, 0x14646}, {0x16800, 0x16A38}, {0x16A40, 0x16A5E}, {0x16A70, 0x16ABE},
    {0x16AD0, 0x16AED}, {0x16B00, 0x16B2F}, {0x16B40, 0x16B43}, {0x16B63, 0x16B77}, {0x16B7D, 0x16B8F},
    {0x16E40, 0x16E7F}, {0x16F00, 0x16F4A}, {0x16F50, 0x16F50}, {0x16F93, 0x16F9F}, {0x16FE0, 0x16FE1},
    {0x16FE3, 0x16FE3}, {0x17000, 0x187F7}, {0x18800, 0x18CD5}, {0x18D00, 0x18D08}, {0x1AFF0, 0x1AFF3},
    {0x1AFF5, 0x1AFFB}, {0x1AFFD, 0x1AFFE}, {0x1B000, 0x1B122}, {0x1B132, 0x1B132}, {0x1B150, 0x1B152},
    {0x1B155, 0x1B155}, {0x1B164, 0x1B167}, {0x1B170, 0x1B2FB}, {0x1BC00, 0x1BC6A}, {0x1BC70, 0x1BC7C},
    {0x1BC80, 0x1BC88}, {0x1BC90, 0x1BC99}, {0x1D400, 0x1D454}, {0x1D456, 0x1D49C}, {0x1D49E, 0x1D49F},
    {0x1D4A2, 0x1D4A2}, {0x1D4A5, 0x1D4A6}, {0x1D4A9, 0x1D4AC}, {0x1D4AE, 0x1D4B9}, {0x1D4BB, 0x1D4BB},
    {0x1D4BD, 0x1D4C3}, {0x1D4C5, 0x1D505}, {0x1D507, 0x1D50A}, {0x1D50D, 0x1D514}, {0x1D516, 0x1D51C},
    {0x1D51E, 0x1D539}, {0x1D53B, 0x1D53E}, {0x1D540, 0x1D544}, {0x1D546, 0x1D546}, {0x1D54A, 0x1D550},
    {0x1D552, 0x1D6A5}, {0x1D6A8, 0x1D6C0}, {0x1D6C2, 0x1D6DA}, {0x1D6DC, 0x1D6FA}, {0x1D6FC, 0x1D714},
    {0x1D716, 0x1D734}, {0x1D736, 0x1D74E}, {0x1D750, 0x1D76E}, {0x1D770, 0x1D788}, {0x1D78A, 0x1D7A8},
    {0x1D7AA, 0x1D7C2}, {0x1D7C4, 0x1D7CB}, {0x1DF00, 0x1DF1E}, {0x1DF25, 0x1DF2A}, {0x1E030, 0x1E06D},
    {0x1E100, 0x1E12C}, {0x1E137, 0x1E13D}, {0x1E14E, 0x1E14E}, {0x1E290, 0x1E2AD}, {0x1E2C0, 0x1E2EB},
    {0x1E4D0, 0x1E4EB}, {0x1E7E0, 0x1E7E6}, {0x1E7E8, 0x1E7EB}, {0x1E7ED, 0x1E7EE}, {0x1E7F0, 0x1E7FE},
    {0x1E800, 0x1E8C4}, {0x1E900, 0x1E943}, {0x1E94B, 0x1E94B}, {0x1EE00, 0x1EE03}, {0x1EE05, 0x1EE1F},
    {0x1EE21, 0x1EE22}, {0x1EE24, 0x1EE24}, {0x1EE27, 0x1EE27}, {0x1EE29, 0x1EE32}, {0x1EE34, 0x1EE37},
    {0x1EE39, 0x1EE39}, {0x1EE3B, 0x1EE3B}, {0x1EE42, 0x1EE42}, {0x1EE47, 0x1EE47}, {0x1EE49, 0x1EE49},
    {0x1EE4B, 0x1EE4B}, {0x1EE4D, 0x1EE4F}, {0x1EE51, 0x1EE52}, {0x1EE54, 0x1EE54}, {0x1EE57, 0x1EE57},
    {0x1EE59, 0x1EE59}, {0x1EE5B, 0x1EE5B}, {0x1EE5D, 0x1EE5D}, {0x1EE5F, 0x1EE5F}, {0x1EE61, 0x1EE62},
    {0x1EE64, 0x1EE64}, {0x1EE67, 0x1EE6A}, {0x1EE6C, 0x1EE72}, {0x1EE74, 0x1EE77}, {0x1EE79, 0x1EE7C},
    {0x1EE7E, 0x1EE7E}, {0x1EE80, 0x1EE89}, {0x1EE8B, 0x1EE9B}, {0x1EEA1, 0x1EEA3}, {0x1EEA5, 0x1EEA9},
    {0x1EEAB, 0x1EEBB}, {0x20000, 0x2A6DF}, {0x2A700, 0x2B739}, {0x2B740, 0x2B81D}, {0x2B820, 0x2CEA1},
    {0x2CEB0, 0x2EBE0}, {0x2F800, 0x2FA1D}, {0x30000, 0x3134A}, {0x31350, 0x323AF},
};

static const uint32_t unicode_number_ranges[][2] = {
    {0x00030, 0x00039}, {0x000B2, 0x000B3}, {0x000B9, 0x000B9}, {0x000BC, 0x000BE}, {0x00660, 0x00669},
    {0x006F0, 0x006F9}, {0x007C0, 0x007C9}, {0x00966, 0x0096F}, {0x009E6, 0x009EF}, {0x009F4, 0x009F9},
    {0x00A66, 0x00A6F}, {0x00AE6, 0x00AEF}, {0x00B66, 0x00B6F}, {0x00B72, 0x00B77}, {0x00BE6, 0x00BF2},
    {0x00C66, 0x00C6F}, {0x00C78, 0x00C7E}, {0x00CE6, 0x00CEF}, {0x00D58, 0x00D5E}, {0x00D66, 0x00D78},
    {0x00DE6, 0x00DEF}, {0x00E50, 0x00E59}, {0x00ED0, 0x00ED9}, {0x00F20, 0x00F33}, {0x01040, 0x01049},
    {0x01090, 0x01099}, {0x01369, 0x0137C}, {0x016EE, 0x016F0}, {0x017E0, 0x017E9}, {0x017F0, 0x017F9},
    {0x01810, 0x01819}, {0x01946, 0x0194F}, {0x019D0, 0x019DA}, {0x01A80, 0x01A89}, {0x01A90, 0x01A99},
    {0x01B50, 0x01B59}, {0x01BB0, 0x01BB9}, {0x01C40, 0x01C49}, {0x01C50, 0x01C59}, {0x02070, 0x02070},
    {0x02074, 0x02079}, {0x02080, 0x02089}, {0x02150, 0x02182}, {0x02185, 0x02189}, {0x02460, 0x0249B},
    {0x024EA, 0x024FF}, {0x02776, 0x02793}, {0x02CFD, 0x02CFD}, {0x03007, 0x03007}, {0x03021, 0x03029},
    {0x03038, 0x0303A}, {0x03192, 0x03195}, {0x03220, 0x03229}, {0x03248, 0x0324F}, {0x03251, 0x0325F},
    {0x03280, 0x03289}, {0x032B1, 0x032BF}, {0x0A620, 0x0A629}, {0x0A6E6, 0x0A6EF}, {0x0A830, 0x0A835},
    {0x0A8D0, 0x0A8D9}, {0x0A900, 0x0A909}, {0x0A9D0, 0x0A9D9}, {0x0A9F0, 0x0A9F9}, {0x0AA50, 0x0AA59},
    {0x0ABF0, 0x0ABF9}, {0x0FF10, 0x0FF19}, {0x10107, 0x10133}, {0x10140, 0x10178}, {0x1018A, 0x1018B},
    {0x102E1, 0x102FB}, {0x10320, 0x10323}, {0x10341, 0x10341}, {0x1034A, 0x1034A}, {0x103D1, 0x103D5},
    {0x104A0, 0x104A9}, {0x10858, 0x1085F}, {0x10879, 0x1087F}, {0x108A7, 0x108AF}, {0x108FB, 0x108FF},
    {0x10916, 0x1091B}, {0x109BC, 0x109BD}, {0x109C0, 0x109CF}, {0x109D2, 0x109FF}, {0x10A40, 0x10A48},
    {0x10A7D, 0x10A7E}, {0x10A9D, 0x10A9F}, {0x10AEB, 0x10AEF}, {0x10B58, 0x10B5F}, {0x10B78, 0x10B7F},
    {0x10BA9, 0x10BAF}, {0x10CFA, 0x10CFF}, {0x10D30, 0x10D39}, {0x10E60, 0x10E7E}, {0x10F1D, 0x10F26},
    {0x10F51, 0x10F54}, {0x10FC5, 0x10FCB}, {0x11052, 0x1106F}, {0x110F0, 0x110F9}, {0x11136, 0x1113F},
    {0x111D0, 0x111D9}, {0x111E1, 0x111F4}, {0x112F0, 0x112F9}, {0x11450, 0x11459}, {0x114D0, 0x114D9},
    {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x11730, 0x1173B}, {0x118E0, 0x118F2}, {0x11950, 0x11959},
    {0x11C50, 0x11C6C}, {0x11D50, 0x11D59}, {0x11DA0, 0x11DA9}, {0x11F50, 0x11F59}, {0x11FC0, 0x11FD4},
    {0x12400, 0x1246E}, {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x16B5B, 0x16B61},
    {0x16E80, 0x16E96}, {0x1D2C0, 0x1D2D3}, {0x1D2E0, 0x1D2F3}, {0x1D360, 0x1D378}, {0x1D7CE, 0x1D7FF},
    {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9}, {0x1E4F0, 0x1E4F9}, {0x1E8C7, 0x1E8CF}, {0x1E950, 0x1E959},
    {0x1EC71, 0x1ECAB}, {0x1ECAD, 0x1ECAF}, {0x1ECB1, 0x1ECB4}, {0x1ED01, 0x1ED2D}, {0x1ED2F, 0x1ED3D},
    {0x1F100, 0x1F10C}, {0x1FBF0, 0x1FBF9},
};

static const uint32_t unicode_space_ranges[][2] = {
    {0x00009, 0x0000D}, {0x00020, 0x00020}, {0x00085, 0x00085}, {0x000A0, 0x000A0}, {0x01680, 0x01680},
    {0x02000, 0x0200A}, {0x02028, 0x02029}, {0x0202F, 0x0202F}, {0x0205F, 0x0205F}, {0x03000, 0x03000},
};

static const uint32_t unicode_upper_ranges[][2] = {
    {0x00041, 0x0005A}, {0x000C0, 0x000D6}, {0x000D8, 0x000DE}, {0x00100, 0x00100}, {0x00102, 0x00102},
    {0x00104, 0x00104}, {0x00106, 0x00106}, {0x00108, 0x00108}, {0x0010A, 0x0010A}, {0x0010C, 0x0010C},
    {0x0010E, 0x0010E}, {0x00110, 0x00110}, {0x00112, 0x00112}, {0x00114, 0x00114}, {0x00116, 0x00116},
    {0x00118, 0x00118}, {0x0011A, 0x0011A}, {0x0011C, 0x0011C}, {0x0011E, 0x0011E}, {0x00120, 0x00120},
    {0x00122, 0x00122}, {0x00124, 0x00124}, {0x00126, 0x00126}, {0x00128, 0x00128}, {0x0012A, 0x0012A},
    {0x0012C, 0x0012C}, {0x0012E, 0x0012E}, {0x00130, 0x00130}, {0x00132, 0x00132}, {0x00134, 0x00134},
    {0x00136, 0x00136}, {0x00139, 0x00139}, {0x0013B, 0x0013B}, {0x0013D, 0x0013D}, {0x0013F, 0x0013F},
    {0x00141, 0x00141}, {0x00143, 0x00143}, {0x00145, 0x00145}, {0x00147, 0x00147}, {0x0014A, 0x0014A},
    {0x0014C, 0x0014C}, {0x0014E, 0x0014E}, {0x00150, 0x00150}, {0x00152, 0x00152}, {0x00154, 0x00154},
    {0x00156, 0x00156}, {0x00158, 0x00158}, {0x0015A, 0x0015A}, {0x0015C, 0x0015C}, {0x0015E, 0x0015E},
    {0x00160, 0x00160}, {0x00162, 0x00162}, {0x00164, 0x00164}, {0x00166, 0x00166}, {0x00168, 0x00168},
    {0x0016A, 0x0016A}, {0x0016C, 0x0016C}, {0x0016E, 0x0016E}, {0x00170, 0x00170}, {0x00172, 0x00172},
    {0x00174, 0x00174}, {0x00176, 0x00176}, {0x00178, 0x00179}, {0x0017B, 0x0017B}, {0x0017D, 0x0017D},
    {0x00181, 0x00182}, {0x00184, 0x00184}, {0x00186, 0x00187}, {0x00189, 0x0018B}, {0x0018E, 0x00191},
    {0x00193, 0x00194}, {0x00196, 0x00198}, {0x0019C, 0x0019D}, {0x0019F, 0x001A0}, {0x001A2, 0x001A2},
    {0x001A4, 0x001A4}, {0x001A6, 0x001A7}, {0x001A9, 0x001A9}, {0x001AC, 0x001AC}, {0x001AE, 0x001AF},
    {0x001B1, 0x001B3}, {0x001B5, 0x001B5}, {0x001B7, 0x001B8}, {0x001BC, 0x001BC}, {0x001C4, 0x001C5},
    {0x001C7, 0x001C8}, {0x001CA, 0x001CB}, {0x001CD, 0x001CD}, {0x001CF, 0x001CF}, {0x001D1, 0x001D1},
    {0x001D3, 0x001D3}, {0x001D5, 0x001D5}, {0x001D7, 0x001D7}, {0x001D9, 0x001D9}, {0x001DB, 0x001DB},
    {0x001DE, 0x001DE}, {0x001E0, 0x001E0}, {0x001E2, 0x001E2}, {0x001E4, 0x001E4}, {0x001E6, 0x001E6},
    {0x001E8, 0x001E8}, {0x001EA, 0x001EA}, {0x001EC, 0x001EC}, {0x001EE, 0x001EE}, {0x001F1, 0x001F2},
    {0x001F4, 0x001F4}, {0x001F6, 0x001F8}, {0x001FA, 0x001FA}, {0x001FC, 0x001FC}, {0x001FE, 0x001FE},
    {0x00200, 0x00200}, {0x00202, 0x00202}, {0x00204, 0x00204}, {0x00206, 0x00206}, {0x00208, 0x00208},
    {0x0020A, 0x0020A}, {0x0020C, 0x0020C}, {0x0020E, 0x0020E}, {0x00210, 0x00210}, {0x00212, 0x00212},
    {0x00214, 0x00214}, {0x00216, 0x00216}, {0x00218, 0x00218}, {0x0021A, 0x0021A}, {0x0021C, 0x0021C},
    {0x0021E, 0x0021E}, {0x00220, 0x00220}, {0x00222, 0x00222}, {0x00224, 0x00224}, {0x00226, 0x00226},
    {0x00228, 0x00228}, {0x0022A, 0x0022A}, {0x0022C, 0x0022C}, {0x0022E, 0x0022E}, {0x00230, 0x00230},
    {0x00232, 0x00232}, {0x0023A, 0x0023B}, {0x0023D, 0x0023E}, {0x00241, 0x00241}, {0x00243, 0x00246},
    {0x00248, 0x00248}, {0x0024A, 0x0024A}, {0x0024C, 0x0024C}, {0x0024E, 0x0024E}, {0x00370, 0x00370},
    {0x00372, 0x00372}, {0x00376, 0x00376}, {0x0037F, 0x0037F}, {0x00386, 0x00386}, {0x00388, 0x0038A},
    {0x0038C, 0x0038C}, {0x0038E, 0x0038F}, {0x00391, 0x003A1}, {0x003A3, 0x003AB}, {0x003CF, 0x003CF},
    {0x003D2, 0x003D4}, {0x003D8, 0x003D8}, {0x003DA, 0x003DA}, {0x003DC, 0x003DC}, {0x003DE, 0x003DE},
    {0x003E0, 0x003E0}, {0x003E2, 0x003E2}, {0x003E4, 0x003E4}, {0x003E6, 0x003E6}, {0x003E8, 0x003E8},
    {0x003EA, 0x003EA}, {0x003EC, 0x003EC}, {0x003EE, 0x003EE}, {0x003F4, 0x003F4}, {0x003F7, 0x003F7},
    {0x003F9, 0x003FA}, {0x003FD, 0x0042F}, {0x00460, 0x00460}, {0x00462, 0x00462}, {0x00464, 0x00464},
    {0x00466, 0x00466}, {0x00468, 0x00468}, {0x0046A, 0x0046A}, {0x0046C, 0x0046C}, {0x0046E, 0x0046E},
    {0x00470, 0x00470}, {0x00472, 0x00472}, {0x00474, 0x00474}, {0x00476, 0x00476}, {0x00478, 0x00478},
    {0x0047A, 0x0047A}, {0x0047C, 0x0047C}, {0x0047E, 0x0047E}, {0x00480, 0x00480}, {0x0048A, 0x0048A},
    {0x0048C, 0x0048C}, {0x0048E, 0x0048E}, {0x00490, 0x00490}, {0x00492, 0x00492}, {0x00494, 0x00494},
    {0x00496, 0x00496}, {0x00498, 0x00498}, {0x0049A, 0x0049A}, {0x0049C, 0x0049C}, {0x0049E, 0x0049E},
    {0x004A0, 0x004A0}, {0x004A2, 0x004A2}, {0x004A4, 0x004A4}, {0x004A6, 0x004A6}, {0x004A8, 0x004A8},
    {0x004AA, 0x004AA}, {0x004AC, 0x004AC}, {0x004AE, 0x004AE}, {0x004B0, 0x004B0}, {0x004B2, 0x004B2},
    {0x004B4, 0x004B4}, {0x004B6, 0x004B6}, {0x004B8, 0x004B8}, {0x004BA, 0x004BA}, {0x004BC, 0x004BC},
    {0x004BE, 0x004BE}, {0x004C0, 0x004C1}, {0x004C3, 0x004C3}, {0x004C5, 0x004C5}, {0x004C7, 0x004C7},
    {0x004C9, 0x004C9}, {0x004CB, 0x004CB}, {0x004CD, 0x004CD}, {0x004D0, 0x004D0}, {0x004D2, 0x004D2},
    {0x004D4, 0x004D4}, {0x004D6, 0x004D6}, {0x004D8, 0x004D8}, {0x004DA, 0x004DA}, {0x004DC, 0x004DC},
    {0x004DE, 0x004DE}, {0x004E0, 0x004E0}, {0x004E2, 0x004E2}, {0x004E4, 0x004E4}, {0x004E6, 0x004E6},
    {0x004E8, 0x004E8}, {0x004EA, 0x004EA}, {0x004EC, 0x004EC}, {0x004EE, 0x004EE}, {0x004F0, 0x004F0},
    {0x004F2, 0x004F2}, {0x004F4, 0x004F4}, {0x004F6, 0x004F6}, {0x004F8, 0x004F8}, {0x004FA, 0x004FA},
    {0x004FC, 0x004FC}, {0x004FE, 0x004FE}, {0x00500, 0x00500}, {0x00502, 0x00502}, {0x00504, 0x00504},
    {0x00506, 0x00506}, {0x00508, 0x00508}, {0x0050A, 0x0050A}, {0x0050C, 0x0050C}, {0x0050E, 0x0050E},
    {0x00510, 0x00510}, {0x00512, 0x00512}, {0x00514, 0x00514}, {0x00516, 0x00516}, {0x00518, 0x00518},
    {0x0051A, 0x0051A}, {0x0051C, 0x0051C}, {0x0051E, 0x0051E}, {0x00520, 0x00520}, {0x00522, 0x00522},
    {0x00524, 0x00524}, {0x00526, 0x00526}, {0x00528, 0x00528}, {0x0052A, 0x0052A}, {0x0052C, 0x0052C},
    {0x0052E, 0x0052E}, {0x00531, 0x00556}, {0x010A0, 0x010C5}, {0x010C7, 0x010C7}, {0x010CD, 0x010CD},
    {0x013A0, 0x013F5}, {0x01C90, 0x01CBA}, {0x01CBD, 0x01CBF}, {0x01E00, 0x01E00}, {0x01E02, 0x01E02},
    {0x01E04, 0x01E04}, {0x01E06, 0x01E06}, {0x01E08, 0x01E08}, {0x01E0A, 0x01E0A}, {0x01E0C, 0x01E0C},
    {0x01E0E, 0x01E0E}, {0x01E10, 0x01E10}, {0x01E12, 0x01E12}, {0x01E14, 0x01E14}, {0x01E16, 0x01E16},
    {0x01E18, 0x01E18}, {0x01E1A, 0x01E1A}, {0x01E1C, 0x01E1C}, {0x01E1E, 0x01E1E}, {0x01E20, 0x01E20},
    {0x01E22, 0x01E22}, {0x01E24, 0x01E24}, {0x01E26, 0x01E26}, {0x01E28, 0x01E28}, {0x01E2A, 0x01E2A},
    {0x01E2C, 0x01E2C}, {0x01E2E, 0x01E2E}, {0x01E30, 0x01E30}, {0x01E32, 0x01E32}, {0x01E34, 0x01E34},
    {0x01E36, 0x01E36}, {0x01E38, 0x01E38}, {0x01E3A, 0x01E3A}, {0x01E3C, 0x01E3C}, {0x01E3E, 0x01E3E},
    {0x01E40, 0x01E40}, {0x01E42, 0x01E42}, {0x01E44, 0x01E44}, {0x01E46, 0x01E46}, {0x01E48, 0x01E48},
    {0x01E4A, 0x01E4A}, {0x01E4C, 0x01E4C}, {0x01E4E, 0x01E4E}, {0x01E50, 0x01E50}, {0x01E52, 0x01E52},
    {0x01E54, 0x01E54}, {0x01E56, 0x01E56}, {0x01E58, 0x01E58}, {0x01E5A, 0x01E5A}, {0x01E5C, 0x01E5C},
    {0x01E5E, 0x01E5E}, {0x01E60, 0x01E60}, {0x01E62, 0x01E62}, {0x01E64, 0x01E64}, {0x01E66, 0x01E66},
    {0x01E68, 0x01E68}, {0x01E6A, 0x01E6A}, {0x01E6C, 0x01E6C}, {0x01E6E, 0x01E6E}, {0x01E70, 0x01E70},
    {0x01E72, 0x01E72}, {0x01E74, 0x01E74}, {0x01E76, 0x01E76}, {0x01E78, 0x01E78}, {0x01E7A, 0x01E7A},
    {0x01E7C, 0x01E7C}, {0x01E7E, 0x01E7E}, {0x01E80, 0x01E80}, {0x01E82, 0x01E82}, {0x01E84, 0x01E84},
    {0x01E86, 0x01E86}, {0x01E88, 0x01E88}, {0x01E8A, 0x01E8A}, {0x01E8C, 0x01E8C}, {0x01E8E, 0x01E8E},
    {0x01E90, 0x01E90}, {0x01E92, 0x01E92}, {0x01E94, 0x01E94}, {0x01E9E, 0x01E9E}, {0x01EA0, 0x01EA0},
    {0x01EA2, 0x01EA2}, {0x01EA4, 0x01EA4}, {0x01EA6, 0x01EA6}, {0x01EA8, 0x01EA8}, {0x01EAA, 0x01EAA},
    {0x01EAC, 0x01EAC}, {0x01EAE, 0x01EAE}, {0x01EB0, 0x01EB0}, {0x01EB2, 0x01EB2}, {0x01EB4, 0x01EB4},
    {0x01EB6, 0x01EB6}, {0x01EB8, 0x01EB8}, {0x01EBA, 0x01EBA}, {0x01EBC, 0x01EBC}, {0x01EBE, 0x01EBE},
    {0x01EC0, 0x01EC0}, {0x01EC2, 0x01EC2}, {0x01EC4, 0x01EC4}, {0x01EC6, 0x01EC6}, {0x01EC8, 0x01EC8},
    {0x01ECA, 0x01ECA}, {0x01ECC, 0x01ECC}, {0x01ECE, 0x01ECE}, {0x01ED0, 0x01ED0}, {0x01ED2, 0x01ED2},
    {0x01ED4, 0x01ED4}, {0x01ED6, 0x01ED6}, {0x01ED8, 0x01ED8}, {0x01EDA, 0x01EDA}, {0x01EDC, 0x01EDC},
    {0x01EDE, 0x01EDE}, {0x01EE0, 0x01EE0}, {0x01EE2, 0x01EE2}, {0x01EE4, 0x01EE4}, {0x01EE6, 0x01EE6},
    {0x01EE8, 0x01EE8}, {0x01EEA, 0x01EEA}, {0x01EEC, 0x01EEC}, {0x01EEE, 0x01EEE}, {0x01EF0, 0x01EF0},
    {0x01EF2, 0x01EF2}, {0x01EF4, 0x01EF4}, {0x01EF6, 0x01EF6}, {0x01EF8, 0x01EF8}, {0x01EFA, 0x01EFA},
    {0x01EFC, 0x01EFC}, {0x01EFE, 0x01EFE}, {0x01F08, 0x01F0F}, {0x01F18, 0x01F1D}, {0x01F28, 0x01F2F},
    {0x01F38, 0x01F3F}, {0x01F48, 0x01F4D}, {0x01F59, 0x01F59}, {0x01F5B, 0x01F5B}, {0x01F5D, 0x01F5D},
    {0x01F5F, 0x01F5F}, {0x01F68, 0x01F6F}, {0x01F88, 0x01F8F}, {0x01F98, 0x01F9F}, {0x01FA8, 0x01FAF},
    {0x01FB8, 0x01FBC}, {0x01FC8, 0x01FCC}, {0x01FD8, 0x01FDB}, {0x01FE8, 0x01FEC}, {0x01FF8, 0x01FFC},
    {0x02102, 0x02102}, {0x02107, 0x02107}, {0x0210B, 0x0210D}, {0x02110, 0x02112}, {0x02115, 0x02115},
    {0x02119, 0x0211D}, {0x02124, 0x02124}, {0x02126, 0x02126}, {0x02128, 0x02128}, {0x0212A, 0x0212D},
    {0x02130, 0x02133}, {0x0213E, 0x0213F}, {0x02145, 0x02145}, {0x02183, 0x02183}, {0x02C00, 0x02C2F},
    {0x02C60, 0x02C60}, {0x02C62, 0x02C64}, {0x02C67, 0x02C67}, {0x02C69, 0x02C69}, {0x02C6B, 0x02C6B},
    {0x02C6D, 0x02C70}, {0x02C72, 0x02C72}, {0x02C75, 0x02C75}, {0x02C7E, 0x02C80}, {0x02C82, 0x02C82},
    {0x02C84, 0x02C84}, {0x02C86, 0x02C86}, {0x02C88, 0x02C88}, {0x02C8A, 0x02C8A}, {0x02C8C, 0x02C8C},
    {0x02C8E, 0x02C8E}, {0x02C90, 0x02C90}, {0x02C92, 0x02C92}, {0x02C94, 0x02C94}, {0x02C96, 0x02C96},
    {0x02C98, 0x02C98}, {0x02C9A, 0x02C9A}, {0x02C9C, 0x02C9C}, {0x02C9E, 0x02C9E}, {0x02CA0, 0x02CA0},
    {0x02CA2, 0x02CA2}, {0x02CA4, 0x02CA4}, {0x02CA6, 0x02CA6}, {0x02CA8, 0x02CA8}, {0x02CAA, 0x02CAA},
    {0x02CAC, 0x02CAC}, {0x02CAE, 0x02CAE}, {0x02CB0, 0x02CB0}, {0x02CB2, 0x02CB2}, {0x02CB4, 0x02CB4},
    {0x02CB6, 0x02CB6}, {0x02CB8, 0x02CB8}, {0x02CBA, 0x02CBA}, {0x02CBC, 0x02CBC}, {0x02CBE, 0x02CBE},
    {0x02CC0, 0x02CC0}, {0x02CC2, 0x02CC2}, {0x02CC4, 0x02CC4}, {0x02CC6, 0x02CC6}, {0x02CC8, 0x02CC8},
    {0x02CCA, 0x02CCA}, {0x02CCC, 0x02CCC}, {0x02CCE, 0x02CCE}, {0x02CD0, 0x02CD0}, {0x02CD2, 0x02CD2},
    {0x02CD4, 0x02CD4}, {0x02CD6, 0x02CD6}, {0x02CD8, 0x02CD8}, {0x02CDA, 0x02CDA}, {0x02CDC, 0x02CDC},
    {0x02CDE, 0x02CDE}, {0x02CE0, 0x02CE0}, {0x02CE2, 0x02CE2}, {0x02CEB, 0x02CEB}, {0x02CED, 0x02CED},
    {0x02CF2, 0x02CF2}, {0x0A640, 0x0A640}, {0x0A642, 0x0A642}, {0x0A644, 0x0A644}, {0x0A646, 0x0A646},
    {0x0A648, 0x0A648}, {0x0A64A, 0x0A64A}, {0x0A64C, 0x0A64C}, {0x0A64E, 0x0A64E}, {0x0A650, 0x0A650},
    {0x0A652, 0x0A652}, {0x0A654, 0x0A654}, {0x0A656, 0x0A656}, {0x0A658, 0x0A658}, {0x0A65A, 0x0A65A},
    {0x0A65C, 0x0A65C}, {0x0A65E, 0x0A65E}, {0x0A660, 0x0A660}, {0x0A662, 0x0A662}, {0x0A664, 0x0A664},
    {0x0A666, 0x0A666}, {0x0A668, 0x0A668}, {0x0A66A, 0x0A66A}, {0x0A66C, 0x0A66C}, {0x0A680, 0x0A680},
    {0x0A682, 0x0A682}, {0x0A684, 0x0A684}, {0x0A686, 0x0A686}, {0x0A688, 0x0A688}, {0x0A68A, 0x0A68A},
    {0x0A68C, 0x0A68C}, {0x0A68E, 0x0A68E}, {0x0A690, 0x0A690}, {0x0A692, 0x0A692}, {0x0A694, 0x0A694},
    {0x0A696, 0x0A696}, {0x0A698, 0x0A698}, {0x0A69A, 0x0A69A}, {0x0A722, 0x0A722}, {0x0A724, 0x0A724},
    {0x0A726, 0x0A726}, {0x0A728, 0x0A728}, {0x0A72A, 0x0A72A}, {0x0A72C, 0x0A72C}, {0x0A72E, 0x0A72E},
    {0x0A732, 0x0A732}, {0x0A734, 0x0A734}, {0x0A736, 0x0A736}, {0x0A738, 0x0A738}, {0x0A73A, 0x0A73A},
    {0x0A73C, 0x0A73C}, {0x0A73E, 0x0A73E}, {0x0A740, 0x0A740}, {0x0A742, 0x0A742}, {0x0A744, 0x0A744},
    {0x0A746, 0x0A746}, {0x0A748, 0x0A748}, {0x0A74A, 0x0A74A}, {0x0A74C, 0x0A74C}, {0x0A74E, 0x0A74E},
    {0x0A750, 0x0A750}, {0x0A752, 0x0A752}, {0x0A754, 0x0A754}, {0x0A756, 0x0A756}, {0x0A758, 0x0A758},
    {0x0A75A, 0x0A75A}, {0x0A75C, 0x0A75C}, {0x0A75E, 0x0A75E}, {0x0A760, 0x0A760}, {0x0A762, 0x0A762},
    {0x0A764, 0x0A764}, {0x0A766, 0x0A766}, {0x0A768, 0x0A768}, {0x0A76A, 0x0A76A}, {0x0A76C, 0x0A76C},
    {0x0A76E, 0x0A76E}, {0x0A779, 0x0A779}, {0x0A77B, 0x0A77B}, {0x0A77D, 0x0A77E}, {0x0A780, 0x0A780},
    {0x0A782, 0x0A782}, {0x0A784, 0x0A784}, {0x0A786, 0x0A786}, {0x0A78B, 0x0A78B}, {0x0A78D, 0x0A78D},
    {0x0A790, 0x0A790}, {0x0A792, 0x0A792}, {0x0A796, 0x0A796}, {0x0A798, 0x0A798}, {0x0A79A, 0x0A79A},
    {0x0A79C, 0x0A79C}, {0x0A79E, 0x0A79E}, {0x0A7A0, 0x0A7A0}, {0x0A7A2, 0x0A7A2}, {0x0A7A4, 0x0A7A4},
    {0x0A7A6, 0x0A7A6}, {0x0A7A8, 0x0A7A8}, {0x0A7AA, 0x0A7AE}, {0x0A7B0, 0x0A7B4}, {0x0A7B6, 0x0A7B6},
    {0x0A7B8, 0x0A7B8}, {0x0A7BA, 0x0A7BA}, {0x0A7BC, 0x0A7BC}, {0x0A7BE, 0x0A7BE}, {0x0A7C0, 0x0A7C0},
    {0x0A7C2, 0x0A7C2}, {0x0A7C4, 0x0A7C7}, {0x0A7C9, 0x0A7C9}, {0x0A7D0, 0x0A7D0}, {0x0A7D6, 0x0A7D6},
    {0x0A7D8, 0x0A7D8}, {0x0A7F5, 0x0A7F5}, {0x0FF21, 0x0FF3A}, {0x10400, 0x10427}, {0x104B0, 0x104D3},
    {0x10570, 0x1057A}, {0x1057C, 0x1058A}, {0x1058C, 0x10592}, {0x10594, 0x10595}, {0x10C80, 0x10CB2},
    {0x118A0, 0x118BF}, {0x16E40, 0x16E5F}, {0x1D400, 0x1D419}, {0x1D434, 0x1D44D}, {0x1D468, 0x1D481},
    {0x1D49C, 0x1D49C}, {0x1D49E, 0x1D49F}, {0x1D4A2, 0x1D4A2}, {0x1D4A5, 0x1D4A6}, {0x1D4A9, 0x1D4AC},
    {0x1D4AE, 0x1D4B5}, {0x1D4D0, 0x1D4E9}, {0x1D504, 0x1D505}, {0x1D507, 0x1D50A}, {0x1D50D, 0x1D514},
    {0x1D516, 0x1D51C}, {0x1D538, 0x1D539}, {0x1D53B, 0x1D53E}, {0x1D540, 0x1D544}, {0x1D546, 0x1D546},
    {0x1D54A, 0x1D550}, {0x1D56C, 0x1D585}, {0x1D5A0, 0x1D5B9}, {0x1D5D4, 0x1D5ED}, {0x1D608, 0x1D621},
    {0x1D63C, 0x1D655}, {0x1D670, 0x1D689}, {0x1D6A8, 0x1D6C0}, {0x1D6E2, 0x1D6FA}, {0x1D71C, 0x1D734},
    {0x1D756, 0x1D76E}, {0x1D790, 0x1D7A8}, {0x1D7CA, 0x1D7CA}, {0x1E900, 0x1E921},
};

static const uint32_t unicode_lower_ranges[][2] = {
    {0x00061, 0x0007A}, {0x000B5, 0x000B5}, {0x000DF, 0x000F6}, {0x000F8, 0x000FF}, {0x00101, 0x00101},
    {0x00103, 0x00103}, {0x00105, 0x00105}, {0x00107, 0x00107}, {0x00109, 0x00109}, {0x0010B, 0x0010B},
    {0x0010D, 0x0010D}, {0x0010F, 0x0010F}, {0x00111, 0x00111}, {0x00113, 0x00113}, {0x00115, 0x00115},
    {0x00117, 0x00117}, {0x00119, 0x00119}, {0x0011B, 0x0011B}, {0x0011D, 0x0011D}, {0x0011F, 0x0011F},
    {0x00121, 0x00121}, {0x00123, 0x00123}, {0x00125, 0x00125}, {0x00127, 0x00127}, {0x00129, 0x00129},
    {0x0012B, 0x0012B}, {0x0012D, 0x0012D}, {0x0012F, 0x0012F}, {0x00131, 0x00131}, {0x00133, 0x00133},
    {0x00135, 0x00135}, {0x00137, 0x00138}, {0x0013A, 0x0013A}, {0x0013C, 0x0013C}, {0x0013E, 0x0013E},
    {0x00140, 0x00140}, {0x00142, 0x00142}, {0x00144, 0x00144}, {0x00146, 0x00146}, {0x00148, 0x00149},
    {0x0014B, 0x0014B}, {0x0014D, 0x0014D}, {0x0014F, 0x0014F}, {0x00151, 0x00151}, {0x00153, 0x00153},
    {0x00155, 0x00155}, {0x00157, 0x00157}, {0x00159, 0x00159}, {0x0015B, 0x0015B}, {0x0015D, 0x0015D},
    {0x0015F, 0x0015F}, {0x00161, 0x00161}, {0x00163, 0x00163}, {0x00165, 0x00165}, {0x00167, 0x00167},
    {0x00169, 0x00169}, {0x0016B, 0x0016B}, {0x0016D, 0x0016D}, {0x0016F, 0x0016F}, {0x00171, 0x00171},
    {0x00173, 0x00173}, {0x00175, 0x00175}, {0x00177, 0x00177}, {0x0017A, 0x0017A}, {0x0017C, 0x0017C},
    {0x0017E, 0x00180}, {0x00183, 0x00183}, {0x00185, 0x00185}, {0x00188, 0x00188}, {0x0018C, 0x0018D},
    {0x00192, 0x00192}, {0x00195, 0x00195}, {0x00199, 0x0019B}, {0x0019E, 0x0019E}, {0x001A1, 0x001A1},
    {0x001A3, 0x001A3}, {0x001A5, 0x001A5}, {0x001A8, 0x001A8}, {0x001AA, 0x001AB}, {0x001AD, 0x001AD},
    {0x001B0, 0x001B0}, {0x001B4, 0x001B4}, {0x001B6, 0x001B6}, {0x001B9, 0x001BA}, {0x001BD, 0x001BF},
    {0x001C6, 0x001C6}, {0x001C9, 0x001C9}, {0x001CC, 0x001CC}, {0x001CE, 0x001CE}, {0x001D0, 0x001D0},
    {0x001D2, 0x001D2}, {0x001D4, 0x001D4}, {0x001D6, 0x001D6}, {0x001D8, 0x001D8}, {0x001DA, 0x001DA},
    {0x001DC, 0x001DD}, {0x001DF, 0x001DF}, {0x001E1, 0x001E1}, {0x001E3, 0x001E3}, {0x001E5, 0x001E5},
    {0x001E7, 0x001E7}, {0x001E9, 0x001E9}, {0x001EB, 0x001EB}, {0x001ED, 0x001ED}, {0x001EF, 0x001F0},
    {0x001F3, 0x001F3}, {0x001F5, 0x001F5}, {0x001F9, 0x001F9}, {0x001FB, 0x001FB}, {0x001FD, 0x001FD},
    {0x001FF, 0x001FF}, {0x00201, 0x00201}, {0x00203, 0x00203}, {0x00205, 0x00205}, {0x00207, 0x00207},
    {0x00209, 0x00209}, {0x0020B, 0x0020B}, {0x0020D, 0x0020D}, {0x0020F, 0x0020F}, {0x00211, 0x00211},
    {0x00213, 0x00213}, {0x00215, 0x00215}, {0x00217, 0x00217}, {0x00219, 0x00219}, {0x0021B, 0x0021B},
    {0x0021D, 0x0021D}, {0x0021F, 0x0021F}, {0x00221, 0x00221}, {0x00223, 0x00223}, {0x00225, 0x00225},
    {0x00227, 0x00227}, {0x00229, 0x00229}, {0x0022B, 0x0022B}, {0x0022D, 0x0022D}, {0x0022F, 0x0022F},
    {0x00231, 0x00231}, {0x00233, 0x00239}, {0x0023C, 0x0023C}, {0x0023F, 0x00240}, {0x00242, 0x00242},
    {0x00247, 0x00247}, {0x00249, 0x00249}, {0x0024B, 0x0024B}, {0x0024D, 0x0024D}, {0x0024F, 0x00293},
    {0x00295, 0x002AF}, {0x00371, 0x00371}, {0x00373, 0x00373}, {0x00377, 0x00377}, {0x0037B, 0x0037D},
    {0x00390, 0x00390}, {0x003AC, 0x003CE}, {0x003D0, 0x003D1}, {0x003D5, 0x003D7}, {0x003D9, 0x003D9},
    {0x003DB, 0x003DB}, {0x003DD, 0x003DD}, {0x003DF, 0x003DF}, {0x003E1, 0x003E1}, {0x003E3, 0x003E3},
    {0x003E5, 0x003E5}, {0x003E7, 0x003E7}, {0x003E9, 0x003E9}, {0x003EB, 0x003EB}, {0x003ED, 0x003ED},
    {0x003EF, 0x003F3}, {0x003F5, 0x003F5}, {0x003F8, 0x003F8}, {0x003FB, 0x003FC}, {0x00430, 0x0045F},
    {0x00461, 0x00461}, {0x00463, 0x00463}, {0x00465, 0x00465}, {0x00467, 0x00467}, {0x00469, 0x00469},
    {0x0046B, 0x0046B}, {0x0046D, 0x0046D}, {0x0046F, 0x0046F}, {0x00471, 0x00471}, {0x00473, 0x00473},
    {0x00475, 0x00475}, {0x00477, 0x00477}, {0x00479, 0x00479}, {0x0047B, 0x0047B}, {0x0047D, 0x0047D},
    {0x0047F, 0x0047F}, {0x00481, 0x00481}, {0x0048B, 0x0048B}, {0x0048D, 0x0048D}, {0x0048F, 0x0048F},
    {0x00491, 0x00491}, {0x00493, 0x00493}, {0x00495, 0x00495}, {0x00497, 0x00497}, {0x00499, 0x00499},
    {0x0049B, 0x0049B}, {0x0049D, 0x0049D}, {0x0049F, 0x0049F}, {0x004A1, 0x004A1}, {0x004A3, 0x004A3},
    {0x004A5, 0x004A5}, {0x004A7, 0x004A7}, {0x004A9, 0x004A9}, {0x004AB, 0x004AB}, {0x004AD, 0x004AD},
    {0x004AF, 0x004AF}, {0x004B1, 0x004B1}, {0x004B3, 0x004B3}, {0x004B5, 0x004B5}, {0x004B7, 0x004B7},
    {0x004B9, 0x004B9}, {0x004BB, 0x004BB}, {0x004BD, 0x004BD}, {0x004BF, 0x004BF}, {0x004C2, 0x004C2},
    {0x004C4, 0x004C4}, {0x004C6, 0x004C6}, {0x004C8, 0x004C8}, {0x004CA, 0x004CA}, {0x004CC, 0x004CC},
    {0x004CE, 0x004CF}, {0x004D1, 0x004D1}, {0x004D3, 0x004D3}, {0x004D5, 0x004D5}, {0x004D7, 0x004D7},
    {0x004D9, 0x004D9}, {0x004DB, 0x004DB}, {0x004DD, 0x004DD}, {0x004DF, 0x004DF}, {0x004E1, 0x004E1},
    {0x004E3, 0x004E3}, {0x004E5, 0x004E5}, {0x004E7, 0x004E7}, {0x004E9, 0x004E9}, {0x004EB, 0x004EB},
    {0x004ED, 0x004ED}, {0x004EF, 0x004EF}, {0x004F1, 0x004F1}, {0x004F3, 0x004F3}, {0x004F5, 0x004F5},
    {0x004F7, 0x004F7}, {0x004F9, 0x004F9}, {0x004FB, 0x004FB}, {0x004FD, 0x004FD}, {0x004FF, 0x004FF},
    {0x00501, 0x00501}, {0x00503, 0x00503}, {0x00505, 0x00505}, {0x00507, 0x00507}, {0x00509, 0x00509},
    {0x0050B, 0x0050B}, {0x0050D, 0x0050D}, {0x0050F, 0x0050F}, {0x00511, 0x00511}, {0x00513, 0x00513},
    {0x00515, 0x00515}, {0x00517, 0x00517}, {0x00519, 0x00519}, {0x0051B, 0x0051B}, {0x0051D, 0x0051D},
    {0x0051F, 0x0051F}, {0x00521, 0x00521}, {0x00523, 0x00523}, {0x00525, 0x00525}, {0x00527, 0x00527},
    {0x00529, 0x00529}, {0x0052B, 0x0052B}, {0x0052D, 0x0052D}, {0x0052F, 0x0052F}, {0x00560, 0x00588},
    {0x010D0, 0x010FA}, {0x010FD, 0x010FF}, {0x013F8, 0x013FD}, {0x01C80, 0x01C88}, {0x01D00, 0x01D2B},
    {0x01D6B, 0x01D77}, {0x01D79, 0x01D9A}, {0x01E01, 0x01E01}, {0x01E03, 0x01E03}, {0x01E05, 0x01E05},
    {0x01E07, 0x01E07}, {0x01E09, 0x01E09}, {0x01E0B, 0x01E0B}, {0x01E0D, 0x01E0D}, {0x01E0F, 0x01E0F},
    {0x01E11, 0x01E11}, {0x01E13, 0x01E13}, {0x01E15, 0x01E15}, {0x01E17, 0x01E17}, {0x01E19, 0x01E19},
    {0x01E1B, 0x01E1B}, {0x01E1D, 0x01E1D}, {0x01E1F, 0x01E1F}, {0x01E21, 0x01E21}, {0x01E23, 0x01E23},
    {0x01E25, 0x01E25}, {0x01E27, 0x01E27}, {0x01E29, 0x01E29}, {0x01E2B, 0x01E2B}, {0x01E2D, 0x01E2D},
    {0x01E2F, 0x01E2F}, {0x01E31, 0x01E31}, {0x01E33, 0x01E33}, {0x01E35, 0x01E35}, {0x01E37, 0x01E37},
    {0x01E39, 0x01E39}, {0x01E3B, 0x01E3B}, {0x01E3D, 0x01E3D}, {0x01E3F, 0x01E3F}, {0x01E41, 0x01E41},
    {0x01E43, 0x01E43}, {0x01E45, 0x01E45}, {0x01E47, 0x01E47}, {0x01E49, 0x01E49}, {0x01E4B, 0x01E4B},
    {0x01E4D, 0x01E4D}, {0x01E4F, 0x01E4F}, {0x01E51, 0x01E51}, {0x01E53, 0x01E53}, {0x01E55, 0x01E55},
    {0x01E57, 0x01E57}, {0x01E59, 0x01E59}, {0x01E5B, 0x01E5B}, {0x01E5D, 0x01E5D}, {0x01E5F, 0x01E5F},
    {0x01E61, 0x01E61}, {0x01E63, 0x01E63}, {0x01E65, 0x01E65}, {0x01E67, 0x01E67}, {0x01E69, 0x01E69},
    {0x01E6B, 0x01E6B}, {0x01E6D, 0x01E6D}, {0x01E6F, 0x01E6F}, {0x01E71, 0x01E71}, {0x01E73, 0x01E73},
    {0x01E75, 0x01E75}, {0x01E77, 0x01E77}, {0x01E79, 0x01E79}, {0x01E7B, 0x01E7B}, {0x01E7D, 0x01E7D},
    {0x01E7F, 0x01E7F}, {0x01E81, 0x01E81}, {0x01E83, 0x01E83}, {0x01E85, 0x01E85}, {0x01E87, 0x01E87},
    {0x01E89, 0x01E89}, {0x01E8B, 0x01E8B}, {0x01E8D, 0x01E8D}, {0x01E8F, 0x01E8F}, {0x01E91, 0x01E91},
    {0x01E93, 0x01E93}, {0x01E95, 0x01E9D}, {0x01E9F, 0x01E9F}, {0x01EA1, 0x01EA1}, {0x01EA3, 0x01EA3},
    {0x01EA5, 0x01EA5}, {0x01EA7, 0x01EA7}, {0x01EA9, 0x01EA9}, {0x01EAB, 0x01EAB}, {0x01EAD, 0x01EAD},
    {0x01EAF, 0x01EAF}, {0x01EB1, 0x01EB1}, {0x01EB3, 0x01EB3}, {0x01EB5, 0x01EB5}, {0x01EB7, 0x01EB7},
    {0x01EB9, 0x01EB9}, {0x01EBB, 0x01EBB}, {0x01EBD, 0x01EBD}, {0x01EBF, 0x01EBF}, {0x01EC1, 0x01EC1},
    {0x01EC3, 0x01EC3}, {0x01EC5, 0x01EC5}, {0x01EC7, 0x01EC7}, {0x01EC9, 0x01EC9}, {0x01ECB, 0x01ECB},
    {0x01ECD, 0x01ECD}, {0x01ECF, 0x01ECF}, {0x01ED1, 0x01ED1}, {0x01ED3, 0x01ED3}, {0x01ED5, 0x01ED5},
    {0x01ED7, 0x01ED7}, {0x01ED9, 0x01ED9}, {0x01EDB, 0x01EDB}, {0x01EDD, 0x01EDD}, {0x01EDF, 0x01EDF},
    {0x01EE1, 0x01EE1}, {0x01EE3, 0x01EE3}, {0x01EE5, 0x01EE5}, {0x01EE7, 0x01EE7}, {0x01EE9, 0x01EE9},
    {0x01EEB, 0x01EEB}, {0x01EED, 0x01EED}, {0x01EEF, 0x01EEF}, {0x01EF1, 0x01EF1}, {0x01EF3, 0x01EF3},
    {0x01EF5, 0x01EF5}, {0x01EF7, 0x01EF7}, {0x01EF9, 0x01EF9}, {0x01EFB, 0x01EFB}, {0x01EFD, 0x01EFD},
    {0x01EFF, 0x01F07}, {0x01F10, 0x01F15}, {0x01F20, 0x01F27}, {0x01F30, 0x01F37}, {0x01F40, 0x01F45},
    {0x01F50, 0x01F57}, {0x01F60, 0x01F67}, {0x01F70, 0x01F7D}, {0x01F80, 0x01F87}, {0x01F90, 0x01F97},
    {0x01FA0, 0x01FA7}, {0x01FB0, 0x01FB4}, {0x01FB6, 0x01FB7}, {0x01FBE, 0x01FBE}, {0x01FC2, 0x01FC4},
    {0x01FC6, 0x01FC7}, {0x01FD0, 0x01FD3}, {0x01FD6, 0x01FD7}, {0x01FE0, 0x01FE7}, {0x01FF2, 0x01FF4},
    {0x01FF6, 0x01FF7}, {0x0210A, 0x0210A}, {0x0210E, 0x0210F}, {0x02113, 0x02113}, {0x0212F, 0x0212F},
    {0x02134, 0x02134}, {0x02139, 0x02139}, {0x0213C, 0x0213D}, {0x02146, 0x02149}, {0x0214E, 0x0214E},
    {0x02184, 0x02184}, {0x02C30, 0x02C5F}, {0x02C61, 0x02C61}, {0x02C65, 0x02C66}, {0x02C68, 0x02C68},
    {0x02C6A, 0x02C6A}, {0x02C6C, 0x02C6C}, {0x02C71, 0x02C71}, {0x02C73, 0x02C74}, {0x02C76, 0x02C7B},
    {0x02C81, 0x02C81}, {0x02C83, 0x02C83}, {0x02C85, 0x02C85}, {0x02C87, 0x02C87}, {0x02C89, 0x02C89},
    {0x02C8B, 0x02C8B}, {0x02C8D, 0x02C8D}, {0x02C8F, 0x02C8F}, {0x02C91, 0x02C91}, {0x02C93, 0x02C93},
    {0x02C95, 0x02C95}, {0x02C97, 0x02C97}, {0x02C99, 0x02C99}, {0x02C9B, 0x02C9B}, {0x02C9D, 0x02C9D},
    {0x02C9F, 0x02C9F}, {0x02CA1, 0x02CA1}, {0x02CA3, 0x02CA3}, {0x02CA5, 0x02CA5}, {0x02CA7, 0x02CA7},
    {0x02CA9, 0x02CA9}, {0x02CAB, 0x02CAB}, {0x02CAD, 0x02CAD}, {0x02CAF, 0x02CAF}, {0x02CB1, 0x02CB1},
    {0x02CB3, 0x02CB3}, {0x02CB5, 0x02CB5}, {0x02CB7, 0x02CB7}, {0x02CB9, 0x02CB9}, {0x02CBB, 0x02CBB},
    {0x02CBD, 0x02CBD}, {0x02CBF, 0x02CBF}, {0x02CC1, 0x02CC1}, {0x02CC3, 0x02CC3}, {0x02CC5, 0x02CC5},
    {0x02CC7, 0x02CC7}, {0x02CC9, 0x02CC9}, {0x02CCB, 0x02CCB}, {0x02CCD, 0x02CCD}, {0x02CCF, 0x02CCF},
    {0x02CD1, 0x02CD1}, {0x02CD3, 0x02CD3}, {0x02CD5, 0x02CD5}, {0x02CD7, 0x02CD7}, {0x02CD9, 0x02CD9},
    {0x02CDB, 0x02CDB}, {0x02CDD, 0x02CDD}, {0x02CDF, 0x02CDF}, {0x02CE1, 0x02CE1}, {0x02CE3, 0x02CE4},
    {0x02CEC, 0x02CEC}, {0x02CEE, 0x02CEE}, {0x02CF3, 0x02CF3}, {0x02D00, 0x02D25}, {0x02D27, 0x02D27},
    {0x02D2D, 0x02D2D}, {0x0A641, 0x0A641}, {0x0A643, 0x0A643}, {0x0A645, 0x0A645}, {0x0A647, 0x0A647},
    {0x0A649, 0x0A649}, {0x0A64B, 0x0A64B}, {0x0A64D, 0x0A64D}, {0x0A64F, 0x0A64F}, {0x0A651, 0x0A651},
    {0x0A653, 0x0A653}, {0x0A655, 0x0A655}, {0x0A657, 0x0A657}, {0x0A659, 0x0A659}, {0x0A65B, 0x0A65B},
    {0x0A65D, 0x0A65D}, {0x0A65F, 0x0A65F}, {0x0A661, 0x0A661}, {0x0A663, 0x0A663}, {0x0A665, 0x0A665},
    {0x0A667, 0x0A667}, {0x0A669, 0x0A669}, {0x0A66B, 0x0A66B}, {0x0A66D, 0x0A66D}, {0x0A681, 0x0A681},
    {0x0A683, 0x0A683}, {0x0A685, 0x0A685}, {0x0A687, 0x0A687}, {0x0A689, 0x0A689}, {0x0A68B, 0x0A68B},
    {0x0A68D, 0x0A68D}, {0x0A68F, 0x0A68F}, {0x0A691, 0x0A691}, {0x0A693, 0x0A693}, {0x0A695, 0x0A695},
    {0x0A697, 0x0A697}, {0x0A699, 0x0A699}, {0x0A69B, 0x0A69B}, {0x0A723, 0x0A723}, {0x0A725, 0x0A725},
    {0x0A727, 0x0A727}, {0x0A729, 0x0A729}, {0x0A72B, 0x0A72B}, {0x0A72D, 0x0A72D}, {0x0A72F, 0x0A731},
    {0x0A733, 0x0A733}, {0x0A735, 0x0A735}, {0x0A737, 0x0A737}, {0x0A739, 0x0A739}, {0x0A73B, 0x0A73B},
    {0x0A73D, 0x0A73D}, {0x0A73F, 0x0A73F}, {0x0A741, 0x0A741}, {0x0A743, 0x0A743}, {0x0A745, 0x0A745},
    {0x0A747, 0x0A747}, {0x0A749, 0x0A749}, {0x0A74B, 0x0A74B}, {0x0A74D, 0x0A74D}, {0x0A74F, 0x0A74F},
    {0x0A751, 0x0A751}, {0x0A753, 0x0A753}, {0x0A755, 0x0A755}, {0x0A757, 0x0A757}, {0x0A759, 0x0A759},
    {0x0A75B, 0x0A75B}, {0x0A75D, 0x0A75D}, {0x0A75F, 0x0A75F}, {0x0A761, 0x0A761}, {0x0A763, 0x0A763},
    {0x0A765, 0x0A765}, {0x0A767, 0x0A767}, {0x0A769, 0x0A769}, {0x0A76B, 0x0A76B}, {0x0A76D, 0x0A76D},
    {0x0A76F, 0x0A76F}, {0x0A771, 0x0A778}, {0x0A77A, 0x0A77A}, {0x0A77C, 0x0A77C}, {0x0A77F, 0x0A77F},
    {0x0A781, 0x0A781}, {0x0A783, 0x0A783}, {0x0A785, 0x0A785}, {0x0A787, 0x0A787}, {0x0A78C, 0x0A78C},
    {0x0A78E, 0x0A78E}, {0x0A791, 0x0A791}, {0x0A793, 0x0A795}, {0x0A797, 0x0A797}, {0x0A799, 0x0A799},
    {0x0A79B, 0x0A79B}, {0x0A79D, 0x0A79D}, {0x0A79F, 0x0A79F}, {0x0A7A1, 0x0A7A1}, {0x0A7A3, 0x0A7A3},
    {0x0A7A5, 0x0A7A5}, {0x0A7A7, 0x0A7A7}, {0x0A7A9, 0x0A7A9}, {0x0A7AF, 0x0A7AF}, {0x0A7B5, 0x0A7B5},
    {0x0A7B7, 0x0A7B7}, {0x0A7B9, 0x0A7B9}, {0x0A7BB, 0x0A7BB}, {0x0A7BD, 0x0A7BD}, {0x0A7BF, 0x0A7BF},
    {0x0A7C1, 0x0A7C1}, {0x0A7C3, 0x0A7C3}, {0x0A7C8, 0x0A7C8}, {0x0A7CA, 0x0A7CA}, {0x0A7D1, 0x0A7D1},
    {0x0A7D3, 0x0A7D3}, {0x0A7D5, 0x0A7D5}, {0x0A7D7, 0x0A7D7}, {0x0A7D9, 0x0A7D9}, {0x0A7F6, 0x0A7F6},
    {0x0A7FA, 0x0A7FA}, {0x0AB30, 0x0AB5A}, {0x0AB60, 0x0AB68}, {0x0AB70, 0x0ABBF}, {0x0FB00, 0x0FB06},
    {0x0FB13, 0x0FB17}, {0x0FF41, 0x0FF5A}, {0x10428, 0x1044F}, {0x104D8, 0x104FB}, {0x10597, 0x105A1},
    {0x105A3, 0x105B1}, {0x105B3, 0x105B9}, {0x105BB, 0x105BC}, {0x10CC0, 0x10CF2}, {0x118C0, 0x118DF},
    {0x16E60, 0x16E7F}, {0x1D41A, 0x1D433}, {0x1D44E, 0x1D454}, {0x1D456, 0x1D467}, {0x1D482, 0x1D49B},
    {0x1D4B6, 0x1D4B9}, {0x1D4BB, 0x1D4BB}, {0x1D4BD, 0x1D4C3}, {0x1D4C5, 0x1D4CF}, {0x1D4EA, 0x1D503},
    {0x1D51E, 0x1D537}, {0x1D552, 0x1D56B}, {0x1D586, 0x1D59F}, {0x1D5BA, 0x1D5D3}, {0x1D5EE, 0x1D607},
    {0x1D622, 0x1D63B}, {0x1D656, 0x1D66F}, {0x1D68A, 0x1D6A5}, {0x1D6C2, 0x1D6DA}, {0x1D6DC, 0x1D6E1},
    {0x1D6FC, 0x1D714}, {0x1D716, 0x1D71B}, {0x1D736, 0x1D74E}, {0x1D750, 0x1D755}, {0x1D770, 0x1D788},
    {0x1D78A, 0x1D78F}, {0x1D7AA, 0x1D7C2}, {0x1D7C4, 0x1D7C9}, {0x1D7CB, 0x1D7CB}, {0x1DF00, 0x1DF09},
    {0x1DF0B, 0x1DF1E}, {0x1DF25, 0x1DF2A}, {0x1E922, 0x1E943},
};

static const uint32_t unicode_mark_ranges[][2] = {
    {0x00300, 0x0036F}, {0x00483, 0x00489}, {0x00591, 0x005BD}, {0x005BF, 0x005BF}, {0x005C1, 0x005C2},
    {0x005C4, 0x005C5}, {0x005C7, 0x005C7}, {0x00610, 0x0061A}, {0x0064B, 0x0065F}, {0x00670, 0x00670},
    {0x006D6, 0x006DC}, {0x006DF, 0x006E4}, {0x006E7, 0x006E8}, {0x006EA, 0x006ED}, {0x00711, 0x00711},
    {0x00730, 0x0074A}, {0x007A6, 0x007B0}, {0x007EB, 0x007F3}, {0x007FD, 0x007FD}, {0x00816, 0x00819},
    {0x0081B, 0x00823}, {0x00825, 0x00827}, {0x00829, 0x0082D}, {0x00859, 0x0085B}, {0x00898, 0x0089F},
    {0x008CA, 0x008E1}, {0x008E3, 0x00903}, {0x0093A, 0x0093C}, {0x0093E, 0x0094F}, {0x00951, 0x00957},
    {0x00962, 0x00963}, {0x00981, 0x00983}, {0x009BC, 0x009BC}, {0x009BE, 0x009C4}, {0x009C7, 0x009C8},
    {0x009CB, 0x009CD}, {0x009D7, 0x009D7}, {0x009E2, 0x009E3}, {0x009FE, 0x009FE}, {0x00A01, 0x00A03},
    {0x00A3C, 0x00A3C}, {0x00A3E, 0x00A42}, {0x00A47, 0x00A48}, {0x00A4B, 0x00A4D}, {0x00A51, 0x00A51},
    {0x00A70, 0x00A71}, {0x00A75, 0x00A75}, {0x00A81, 0x00A83}, {0x00ABC, 0x00ABC}, {0x00ABE, 0x00AC5},
    {0x00AC7, 0x00AC9}, {0x00ACB, 0x00ACD}, {0x00AE2, 0x00AE3}, {0x00AFA, 0x00AFF}, {0x00B01, 0x00B03},
    {0x00B3C, 0x00B3C}, {0x00B3E, 0x00B44}, {0x00B47, 0x00B48}, {0x00B4B, 0x00B4D}, {0x00B55, 0x00B57},
    {0x00B62, 0x00B63}, {0x00B82, 0x00B82}, {0x00BBE, 0x00BC2}, {0x00BC6, 0x00BC8}, {0x00BCA, 0x00BCD},
    {0x00BD7, 0x00BD7}, {0x00C00, 0x00C04}, {0x00C3C, 0x00C3C}, {0x00C3E, 0x00C44}, {0x00C46, 0x00C48},
    {0x00C4A, 0x00C4D}, {0x00C55, 0x00C56}, {0x00C62, 0x00C63}, {0x00C81, 0x00C83}, {0x00CBC, 0x00CBC},
    {0x00CBE, 0x00CC4}, {0x00CC6, 0x00CC8}, {0x00CCA, 0x00CCD}, {0x00CD5, 0x00CD6}, {0x00CE2, 0x00CE3},
    {0x00CF3, 0x00CF3}, {0x00D00, 0x00D03}, {0x00D3B, 0x00D3C}, {0x00D3E, 0x00D44}, {0x00D46, 0x00D48},
    {0x00D4A, 0x00D4D}, {0x00D57, 0x00D57}, {0x00D62, 0x00D63}, {0x00D81, 0x00D83}, {0x00DCA, 0x00DCA},
    {0x00DCF, 0x00DD4}, {0x00DD6, 0x00DD6}, {0x00DD8, 0x00DDF}, {0x00DF2, 0x00DF3}, {0x00E31, 0x00E31},
    {0x00E34, 0x00E3A}, {0x00E47, 0x00E4E}, {0x00EB1, 0x00EB1}, {0x00EB4, 0x00EBC}, {0x00EC8, 0x00ECE},
    {0x00F18, 0x00F19}, {0x00F35, 0x00F35}, {0x00F37, 0x00F37}, {0x00F39, 0x00F39}, {0x00F3E, 0x00F3F},
    {0x00F71, 0x00F84}, {0x00F86, 0x00F87}, {0x00F8D, 0x00F97}, {0x00F99, 0x00FBC}, {0x00FC6, 0x00FC6},
    {0x0102B, 0x0103E}, {0x01056, 0x01059}, {0x0105E, 0x01060}, {0x01062, 0x01064}, {0x01067, 0x0106D},
    {0x01071, 0x01074}, {0x01082, 0x0108D}, {0x0108F, 0x0108F}, {0x0109A, 0x0109D}, {0x0135D, 0x0135F},
    {0x01712, 0x01715}, {0x01732, 0x01734}, {0x01752, 0x01753}, {0x01772, 0x01773}, {0x017B4, 0x017D3},
    {0x017DD, 0x017DD}, {0x0180B, 0x0180D}, {0x0180F, 0x0180F}, {0x01885, 0x01886}, {0x018A9, 0x018A9},
    {0x01920, 0x0192B}, {0x01930, 0x0193B}, {0x01A17, 0x01A1B}, {0x01A55, 0x01A5E}, {0x01A60, 0x01A7C},
    {0x01A7F, 0x01A7F}, {0x01AB0, 0x01ACE}, {0x01B00, 0x01B04}, {0x01B34, 0x01B44}, {0x01B6B, 0x01B73},
    {0x01B80, 0x01B82}, {0x01BA1, 0x01BAD}, {0x01BE6, 0x01BF3}, {0x01C24, 0x01C37}, {0x01CD0, 0x01CD2},
    {0x01CD4, 0x01CE8}, {0x01CED, 0x01CED}, {0x01CF4, 0x01CF4}, {0x01CF7, 0x01CF9}, {0x01DC0, 0x01DFF},
    {0x020D0, 0x020F0}, {0x02CEF, 0x02CF1}, {0x02D7F, 0x02D7F}, {0x02DE0, 0x02DFF}, {0x0302A, 0x0302F},
    {0x03099, 0x0309A}, {0x0A66F, 0x0A672}, {0x0A674, 0x0A67D}, {0x0A69E, 0x0A69F}, {0x0A6F0, 0x0A6F1},
    {0x0A802, 0x0A802}, {0x0A806, 0x0A806}, {0x0A80B, 0x0A80B}, {0x0A823, 0x0A827}, {0x0A82C, 0x0A82C},
    {0x0A880, 0x0A881}, {0x0A8B4, 0x0A8C5}, {0x0A8E0, 0x0A8F1}, {0x0A8FF, 0x0A8FF}, {0x0A926, 0x0A92D},
    {0x0A947, 0x0A953}, {0x0A980, 0x0A983}, {0x0A9B3, 0x0A9C0}, {0x0A9E5, 0x0A9E5}, {0x0AA29, 0x0AA36},
    {0x0AA43, 0x0AA43}, {0x0AA4C, 0x0AA4D}, {0x0AA7B, 0x0AA7D}, {0x0AAB0, 0x0AAB0}, {0x0AAB2, 0x0AAB4},
    {0x0AAB7, 0x0AAB8}, {0x0AABE, 0x0AABF}, {0x0AAC1, 0x0AAC1}, {0x0AAEB, 0x0AAEF}, {0x0AAF5, 0x0AAF6},
    {0x0ABE3, 0x0ABEA}, {0x0ABEC, 0x0ABED}, {0x0FB1E, 0x0FB1E}, {0x0FE00, 0x0FE0F}, {0x0FE20, 0x0FE2F},
    {0x101FD, 0x101FD}, {0x102E0, 0x102E0}, {0x10376, 0x1037A}, {0x10A01, 0x10A03}, {0x10A05, 0x10A06},
    {0x10A0C, 0x10A0F}, {0x10A38, 0x10A3A}, {0x10A3F, 0x10A3F}, {0x10AE5, 0x10AE6}, {0x10D24, 0x10D27},
    {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11000, 0x11002},
    {0x11038, 0x11046}, {0x11070, 0x11070}, {0x11073, 0x11074}, {0x1107F, 0x11082}, {0x110B0, 0x110BA},
    {0x110C2, 0x110C2}, {0x11100, 0x11102}, {0x11127, 0x11134}, {0x11145, 0x11146}, {0x11173, 0x11173},
    {0x11180, 0x11182}, {0x111B3, 0x111C0}, {0x111C9, 0x111CC}, {0x111CE, 0x111CF}, {0x1122C, 0x11237},
    {0x1123E, 0x1123E}, {0x11241, 0x11241}, {0x112DF, 0x112EA}, {0x11300, 0x11303}, {0x1133B, 0x1133C},
    {0x1133E, 0x11344}, {0x11347, 0x11348}, {0x1134B, 0x1134D}, {0x11357, 0x11357}, {0x11362, 0x11363},
    {0x11366, 0x1136C}, {0x11370, 0x11374}, {0x11435, 0x11446}, {0x1145E, 0x1145E}, {0x114B0, 0x114C3},
    {0x115AF, 0x115B5}, {0x115B8, 0x115C0}, {0x115DC, 0x115DD}, {0x11630, 0x11640}, {0x116AB, 0x116B7},
    {0x1171D, 0x1172B}, {0x1182C, 0x1183A}, {0x11930, 0x11935}, {0x11937, 0x11938}, {0x1193B, 0x1193E},
    {0x11940, 0x11940}, {0x11942, 0x11943}, {0x119D1, 0x119D7}, {0x119DA, 0x119E0}, {0x119E4, 0x119E4},
    {0x11A01, 0x11A0A}, {0x11A33, 0x11A39}, {0x11A3B, 0x11A3E}, {0x11A47, 0x11A47}, {0x11A51, 0x11A5B},
    {0x11A8A, 0x11A99}, {0x11C2F, 0x11C36}, {0x11C38, 0x11C3F}, {0x11C92, 0x11CA7}, {0x11CA9, 0x11CB6},
    {0x11D31, 0x11D36}, {0x11D3A, 0x11D3A}, {0x11D3C, 0x11D3D}, {0x11D3F, 0x11D45}, {0x11D47, 0x11D47},
    {0x11D8A, 0x11D8E}, {0x11D90, 0x11D91}, {0x11D93, 0x11D97}, {0x11EF3, 0x11EF6}, {0x11F00, 0x11F01},
    {0x11F03, 0x11F03}, {0x11F34, 0x11F3A}, {0x11F3E, 0x11F42}, {0x13440, 0x13440}, {0x13447, 0x13455},
    {0x16AF0, 0x16AF4}, {0x16B30, 0x16B36}, {0x16F4F, 0x16F4F}, {0x16F51, 0x16F87}, {0x16F8F, 0x16F92},
    {0x16FE4, 0x16FE4}, {0x16FF0, 0x16FF1}, {0x1BC9D, 0x1BC9E}, {0x1CF00, 0x1CF2D}, {0x1CF30, 0x1CF46},
    {0x1D165, 0x1D169}, {0x1D16D, 0x1D172}, {0x1D17B, 0x1D182}, {0x1D185, 0x1D18B}, {0x1D1AA, 0x1D1AD},
    {0x1D242, 0x1D244}, {0x1DA00, 0x1DA36}, {0x1DA3B, 0x1DA6C}, {0x1DA75, 0x1DA75}, {0x1DA84, 0x1DA84},
    {0x1DA9B, 0x1DA9F}, {0x1DAA1, 0x1DAAF}, {0x1E000, 0x1E006}, {0x1E008, 0x1E018}, {0x1E01B, 0x1E021},
    {0x1E023, 0x1E024}, {0x1E026, 0x1E02A}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE},
    {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF}, {0x1E8D0, 0x1E8D6}, {0x1E944, 0x1E94A}, {0xE0100, 0xE01EF},
};

/* END OF UNICODE TABLES: hand-written code follows */

// 1 if c is in one of the n sorted ranges r (binary search).
static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c < r[mid][0]) hi = mid;
        else if (c > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

// IN_A | IN_B: o200k's classes of a code point (see PRE_O200K).
static int unicode_case(uint32_t c) {
    if (in_ranges(unicode_upper_ranges, sizeof unicode_upper_ranges / sizeof *unicode_upper_ranges, c)) return IN_A;
    if (in_ranges(unicode_lower_ranges, sizeof unicode_lower_ranges / sizeof *unicode_lower_ranges, c)) return IN_B;
    if (in_ranges(unicode_mark_ranges, sizeof unicode_mark_ranges / sizeof *unicode_mark_ranges, c) ||
        in_ranges(unicode_letter_ranges, sizeof unicode_letter_ranges / sizeof *unicode_letter_ranges, c))
        return IN_A | IN_B;
    return 0;
}

// CHAR_LETTER, CHAR_NUMBER, CHAR_SPACE or CHAR_OTHER (the tokenizer's classes).
static int unicode_class(uint32_t c) {
    if (in_ranges(unicode_letter_ranges, sizeof unicode_letter_ranges / sizeof *unicode_letter_ranges, c))
        return CHAR_LETTER;
    if (in_ranges(unicode_number_ranges, sizeof unicode_number_ranges / sizeof *unicode_number_ranges, c))
        return CHAR_NUMBER;
    if (in_ranges(unicode_space_ranges, sizeof unicode_space_ranges / sizeof *unicode_space_ranges, c))
        return CHAR_SPACE;
    return CHAR_OTHER;
}
