/* mkgguf: a GGUF model of random weights in the shape of a public model
   (Qwen3, Qwen3-MoE, Gemma 3, gpt-oss, Llama), written directly in a
   quantized type or mix: each row is drawn and rounded on its own, so no
   F32 copy of the model is ever made, and a Qwen3-30B-A3B-shaped Q4_K_M
   file (48 layers, 17 GB) needs only its own disk space. Random weights
   cost the same arithmetic and memory traffic as trained ones; only the
   text is nonsense. llama.cpp and run.c both run the file, so their speeds
   can be compared on the very same bytes.

     make build/mkgguf
     build/mkgguf OUT.gguf PRESET --dtype q4_k_m [--layers N] [--vocab FILE] [--seed N]

   PRESET: one of the table below (`build/mkgguf` lists them). --dtype: any
   of run.c's quantize types and mixes, as llama-quantize chooses each
   tensor's type (run.c's tensor_dtype). --layers: fewer layers than the
   model has, for a machine that holds no more. --vocab: the vocabulary,
   a GGUF file whose tokenizer.* keys are copied (the shared data's
   models/vocab/ has Qwen3's, Gemma 3's and gpt-oss's) or a llama2.c
   tokenizer.bin (the default: ./tokenizer.bin, Llama 2's 32,000 pieces);
   the embedding has as many rows as it has tokens. The same arguments give
   the same bytes: every row's values come from a generator seeded by the
   tensor and the row. */
#define TESTING
#include "../run.c"

typedef struct {
    const char *name, *arch, *shape_of;
    int dim, layers, heads, kv_heads, head_size, ff; // ff: the dense FFN's width
    int experts, experts_used, expert_ff;            // 0 experts: a dense FFN
    int tied;                                        // the embedding is the classifier
    int window;                                      // sliding window of the local layers, or 0
    int context;
    float rope_base, eps;
} Preset;

static const Preset presets[] = {
    {"llama-1b", "llama", "TinyLlama-1.1B", 2048, 22, 32, 4, 64, 5632, 0, 0, 0, 0, 0, 2048, 10000.0f, 1e-5f},
    {"qwen3-0.6b", "qwen3", "Qwen3-0.6B", 1024, 28, 16, 8, 128, 3072, 0, 0, 0, 1, 0, 40960, 1e6f, 1e-6f},
    {"qwen3-8b", "qwen3", "Qwen3-8B", 4096, 36, 32, 8, 128, 12288, 0, 0, 0, 0, 0, 40960, 1e6f, 1e-6f},
    {"qwen3-30b-a3b", "qwen3moe", "Qwen3-30B-A3B", 2048, 48, 32, 4, 128, 6144, 128, 8, 768, 0, 0, 40960, 1e6f, 1e-6f},
    {"gemma3-1b", "gemma3", "Gemma-3-1B", 1152, 26, 4, 1, 256, 6912, 0, 0, 0, 1, 512, 32768, 1e6f, 1e-6f},
    {"gemma3-4b", "gemma3", "Gemma-3-4B", 2560, 34, 8, 4, 256, 10240, 0, 0, 0, 1, 1024, 131072, 1e6f, 1e-6f},
    {"gpt-oss-20b", "gpt-oss", "gpt-oss-20b", 2880, 24, 64, 8, 64, 2880, 32, 4, 2880, 0, 128, 131072, 150000.0f, 1e-5f},
};
enum { N_PRESETS = sizeof presets / sizeof presets[0] };

// How a tensor's values are drawn: offset + scale * uniform[-1, 1), from
// a generator seeded by seed and the row.
typedef struct { uint64_t seed; float scale, offset; } Draw;

static void random_rows(float *row, int64_t r, int cols, const void *from) {
    const Draw *d = from;
    uint64_t s = d->seed * 0x9E3779B97F4A7C15ull + (uint64_t)r * 0xD1B54A32D192ED03ull + 1;
    for (int i = 0; i < cols; i++) { // xorshift64*: 24 of its top bits make a float in [-1, 1)
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        row[i] = d->offset + d->scale * ((float)((s * 0x2545F4914F6CDD1Dull) >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
}

typedef struct {
    OutTensor *t;
    Draw *draws;
    int n;
    int dtype;
    QuantShape q;
    uint64_t seed;
} Tensors;

// Adds a tensor of shape (cols, rows, stack); matrices are quantized by
// the dtype's rules, vectors stay F32. scale/offset: its values' range.
static void add(Tensors *ts, const char *name, int cols, int rows, int stack, float scale, float offset) {
    OutTensor *o = &ts->t[ts->n];
    Draw *d = &ts->draws[ts->n];
    *d = (Draw){.seed = ts->seed + (uint64_t)ts->n, .scale = scale, .offset = offset};
    *o = (OutTensor){.dims = {(uint64_t)cols, (uint64_t)rows, (uint64_t)stack, 1}, .type = TYPE_F32,
                     .source = random_rows, .from = d};
    snprintf(o->name, sizeof o->name, "%s", name);
    o->n_dims = stack > 1 ? 3 : rows > 1 ? 2 : 1;
    if (quantizable(o))
        o->type = tensor_dtype(ts->dtype, &ts->q, tensor_category(name), tensor_layer(name), cols, stack > 1);
    ts->n++;
}

static void add_layer(Tensors *ts, int l, const char *part, int cols, int rows, int stack, float scale, float offset) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", l, part);
    add(ts, name, cols, rows, stack, scale, offset);
}

// The tensors of preset p with vocab tokens, in llama.cpp's names.
static void model_tensors_of(Tensors *ts, const Preset *p, int vocab) {
    int q_dim = p->heads * p->head_size, kv_dim = p->kv_heads * p->head_size, E = p->experts;
    int gemma = !strcmp(p->arch, "gemma3"), gptoss = !strcmp(p->arch, "gpt-oss");
    int qk_norm = gemma || !strncmp(p->arch, "qwen3", 5);
    float s_dim = 1.0f / sqrtf((float)p->dim), s_q = 1.0f / sqrtf((float)q_dim);
    add(ts, "token_embd.weight", p->dim, vocab, 1, 1.0f, 0.0f);
    add(ts, "output_norm.weight", p->dim, 1, 1, 0.0f, 1.0f);
    if (!p->tied) add(ts, "output.weight", p->dim, vocab, 1, s_dim, 0.0f);
    for (int l = 0; l < p->layers; l++) {
        add_layer(ts, l, "attn_norm.weight", p->dim, 1, 1, 0.0f, 1.0f);
        add_layer(ts, l, "attn_q.weight", p->dim, q_dim, 1, s_dim, 0.0f);
        add_layer(ts, l, "attn_k.weight", p->dim, kv_dim, 1, s_dim, 0.0f);
        add_layer(ts, l, "attn_v.weight", p->dim, kv_dim, 1, s_dim, 0.0f);
        add_layer(ts, l, "attn_output.weight", q_dim, p->dim, 1, s_q, 0.0f);
        if (qk_norm) {
            add_layer(ts, l, "attn_q_norm.weight", p->head_size, 1, 1, 0.0f, 1.0f);
            add_layer(ts, l, "attn_k_norm.weight", p->head_size, 1, 1, 0.0f, 1.0f);
        }
        if (gptoss) {
            add_layer(ts, l, "attn_q.bias", q_dim, 1, 1, 0.02f, 0.0f);
            add_layer(ts, l, "attn_k.bias", kv_dim, 1, 1, 0.02f, 0.0f);
            add_layer(ts, l, "attn_v.bias", kv_dim, 1, 1, 0.02f, 0.0f);
            add_layer(ts, l, "attn_output.bias", p->dim, 1, 1, 0.02f, 0.0f);
            add_layer(ts, l, "attn_sinks.weight", p->heads, 1, 1, 1.0f, 0.0f);
        }
        // gpt-oss names its pre-FFN norm post_attention_norm; Gemma 3 has both and a post-FFN norm
        add_layer(ts, l, gptoss ? "post_attention_norm.weight" : "ffn_norm.weight", p->dim, 1, 1, 0.0f, 1.0f);
        if (gemma) {
            add_layer(ts, l, "post_attention_norm.weight", p->dim, 1, 1, 0.0f, 1.0f);
            add_layer(ts, l, "post_ffw_norm.weight", p->dim, 1, 1, 0.0f, 1.0f);
        }
        if (E == 0) {
            add_layer(ts, l, "ffn_gate.weight", p->dim, p->ff, 1, s_dim, 0.0f);
            add_layer(ts, l, "ffn_up.weight", p->dim, p->ff, 1, s_dim, 0.0f);
            add_layer(ts, l, "ffn_down.weight", p->ff, p->dim, 1, 1.0f / sqrtf((float)p->ff), 0.0f);
            continue;
        }
        add_layer(ts, l, "ffn_gate_inp.weight", p->dim, E, 1, s_dim, 0.0f);
        add_layer(ts, l, "ffn_gate_exps.weight", p->dim, p->expert_ff, E, s_dim, 0.0f);
        add_layer(ts, l, "ffn_up_exps.weight", p->dim, p->expert_ff, E, s_dim, 0.0f);
        add_layer(ts, l, "ffn_down_exps.weight", p->expert_ff, p->dim, E, 1.0f / sqrtf((float)p->expert_ff), 0.0f);
        if (gptoss) {
            add_layer(ts, l, "ffn_gate_inp.bias", E, 1, 1, 0.02f, 0.0f);
            add_layer(ts, l, "ffn_gate_exps.bias", p->expert_ff, E, 1, 0.02f, 0.0f);
            add_layer(ts, l, "ffn_up_exps.bias", p->expert_ff, E, 1, 0.02f, 0.0f);
            add_layer(ts, l, "ffn_down_exps.bias", p->dim, E, 1, 0.02f, 0.0f);
        }
    }
}

// The architecture's keys for preset p.
static uint64_t put_shape(Buffer *b, const Preset *p) {
    char key[128];
    uint64_t n = 0;
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", p->arch, suffix), n++, key)
    put_kv_string(b, "general.architecture", p->arch), n++;
    char name[128];
    snprintf(name, sizeof name, "random weights, %s's shape", p->shape_of);
    put_kv_string(b, "general.name", name), n++;
    put_kv_u32(b, KEY("context_length"), (uint32_t)p->context);
    put_kv_u32(b, KEY("embedding_length"), (uint32_t)p->dim);
    put_kv_u32(b, KEY("block_count"), (uint32_t)p->layers);
    put_kv_u32(b, KEY("feed_forward_length"), (uint32_t)p->ff);
    put_kv_u32(b, KEY("attention.head_count"), (uint32_t)p->heads);
    put_kv_u32(b, KEY("attention.head_count_kv"), (uint32_t)p->kv_heads);
    put_kv_u32(b, KEY("attention.key_length"), (uint32_t)p->head_size);
    put_kv_u32(b, KEY("attention.value_length"), (uint32_t)p->head_size);
    put_kv_u32(b, KEY("rope.dimension_count"), (uint32_t)p->head_size);
    put_kv_f32(b, KEY("attention.layer_norm_rms_epsilon"), p->eps);
    put_kv_f32(b, KEY("rope.freq_base"), p->rope_base);
    if (p->experts) {
        put_kv_u32(b, KEY("expert_count"), (uint32_t)p->experts);
        put_kv_u32(b, KEY("expert_used_count"), (uint32_t)p->experts_used);
        put_kv_u32(b, KEY("expert_feed_forward_length"), (uint32_t)p->expert_ff);
    }
    if (p->window) put_kv_u32(b, KEY("attention.sliding_window"), (uint32_t)p->window);
    if (!strcmp(p->arch, "gemma3")) put_kv_f32(b, KEY("rope.freq_base_swa"), 10000.0f);
    if (!strcmp(p->arch, "gpt-oss")) {
        put_kv_string(b, KEY("rope.scaling.type"), "yarn");
        put_kv_f32(b, KEY("rope.scaling.factor"), 32.0f);
        put_kv_u32(b, KEY("rope.scaling.original_context_length"), 4096);
    }
#undef KEY
    return n;
}

// The vocabulary's keys from path (a GGUF file's tokenizer.* or a llama2.c
// tokenizer.bin); its token count in *vocab. -1 with the message.
static int put_vocab(Buffer *b, uint64_t *n_kv, const char *path, int *vocab) {
    unsigned char *map = NULL;
    size_t size = 0;
    if (map_file(path, (void **)&map, &size) != 0) return -1;
    int err = 0;
    if (size >= 4 && (uint32_t)read_i32(map) == GGUF_MAGIC) {
        Gguf g;
        if (gguf_parse(&g, map, size, path) != 0) { munmap(map, size); return -1; }
        const GgufValue *tokens = gguf_find(&g, "tokenizer.ggml.tokens");
        *vocab = tokens ? (int)tokens->count : 0;
        for (uint64_t i = 0; i < g.n_values; i++)
            if (g.values[i].key_len > 10 && !memcmp(g.values[i].key, "tokenizer.", 10)) {
                put_kv_copy(b, &g.values[i], map + size);
                (*n_kv)++;
            }
        gguf_free(&g);
        if (!tokens) err = fail("%s: has no tokenizer.ggml.tokens", path);
    } else { // tokenizer.bin: as many tokens as the file holds
        int n = 0;
        for (size_t at = 4; at + 8 <= size; n++) at += 8 + (size_t)read_i32(map + at + 4);
        Tokenizer tk;
        err = tokenizer_open(&tk, path, n);
        if (!err) {
            put_spm_vocab(b, n_kv, &tk);
            *vocab = n;
            tokenizer_close(&tk);
        }
    }
    munmap(map, size);
    return err;
}

static int mkgguf_usage(void) {
    fprintf(stderr, "usage: mkgguf OUT.gguf PRESET --dtype TYPE [--layers N] [--vocab FILE] [--seed N]\npresets:\n");
    for (int i = 0; i < N_PRESETS; i++) {
        const Preset *p = &presets[i];
        fprintf(stderr, "  %-14s %s: %s, dim %d, %d layers, %d/%d heads of %d", p->name, p->shape_of, p->arch, p->dim,
                p->layers, p->heads, p->kv_heads, p->head_size);
        if (p->experts) fprintf(stderr, ", %d experts (%d used) of %d", p->experts, p->experts_used, p->expert_ff);
        else fprintf(stderr, ", FFN %d", p->ff);
        fprintf(stderr, "\n");
    }
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 3) return mkgguf_usage();
    const Preset *preset = NULL;
    for (int i = 0; i < N_PRESETS; i++)
        if (!strcmp(argv[2], presets[i].name)) preset = &presets[i];
    if (!preset) { fprintf(stderr, "mkgguf: no preset '%s'\n", argv[2]); return mkgguf_usage(); }
    Preset p = *preset;
    int dtype = -1;
    const char *vocab_path = "tokenizer.bin";
    uint64_t seed = 1;
    for (int i = 3; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return mkgguf_usage();
        if (!strcmp(argv[i], "--dtype")) { if (parse_dtype(v, &dtype) != 0) { fprintf(stderr, "mkgguf: %s\n", error_message); return 2; } }
        else if (!strcmp(argv[i], "--layers")) p.layers = atoi(v);
        else if (!strcmp(argv[i], "--vocab")) vocab_path = v;
        else if (!strcmp(argv[i], "--seed")) seed = strtoull(v, NULL, 10);
        else return mkgguf_usage();
        i++;
    }
    if (dtype < 0 || p.layers < 1 || p.layers > preset->layers) return mkgguf_usage();
    Buffer meta = {0};
    uint64_t n_kv = put_shape(&meta, &p);
    int vocab = 0;
    if (put_vocab(&meta, &n_kv, vocab_path, &vocab) != 0) { fprintf(stderr, "mkgguf: %s\n", error_message); return 1; }
    put_kv_u32(&meta, "general.quantization_version", GGUF_QUANTIZATION_VERSION);
    put_kv_u32(&meta, "general.file_type", (uint32_t)dtype_file_type(dtype));
    n_kv += 2;
    int max_tensors = 3 + 24 * p.layers;
    Tensors ts = {.t = calloc((size_t)max_tensors, sizeof(OutTensor)), .draws = calloc((size_t)max_tensors, sizeof(Draw)),
                  .dtype = dtype, .seed = seed * 1000003u,
                  .q = {.n_layers = p.layers, .n_heads = p.heads, .n_kv_heads = p.kv_heads, .n_experts = p.experts,
                        .tied = p.tied}};
    if (!ts.t || !ts.draws || meta.err) { fprintf(stderr, "mkgguf: out of memory\n"); return 1; }
    model_tensors_of(&ts, &p, vocab);
    for (int i = 0; i < ts.n; i++)
        if (ts.t[i].type < 0) {
            fprintf(stderr, "mkgguf: %s: no type of %s fits its rows of %llu\n", ts.t[i].name, dtype_name(dtype),
                    (unsigned long long)ts.t[i].dims[0]);
            return 1;
        }
    qsort(ts.t, (size_t)ts.n, sizeof *ts.t, compare_out_tensors);
    if (gguf_write(argv[1], &meta, n_kv, ts.t, ts.n, GGUF_ALIGNMENT) != 0) { fprintf(stderr, "mkgguf: %s\n", error_message); return 1; }
    uint64_t bytes = 0;
    for (int i = 0; i < ts.n; i++) bytes += out_bytes(&ts.t[i]);
    fprintf(stderr, "mkgguf: wrote %s: %s's shape, %d layers, %d tokens, %s, %.2f GB of tensors\n", argv[1], p.shape_of,
            p.layers, vocab, dtype_name(dtype), (double)bytes / 1e9);
    return 0;
}
