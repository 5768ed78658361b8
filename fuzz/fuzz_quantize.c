/* fuzz_quantize: -m quantize on any checkpoint. The model is loaded as
   fuzz_checkpoint loads it, written in the RUNC format with quantize_mode
   (or, for a GGUF input when the first byte's bit 2 is set, as GGUF with
   quantize_gguf: its metadata and tensors copied or requantized), and the
   file written must load again with the same shape.

   Input: one byte choosing --dtype (0 f32, 1 f16, 2 q8_0, 3 q4_0, by value
   % 4) and the output format (bit 2), then the checkpoint (version 0, RUNC
   or GGUF). Seeds:
   fuzz/corpus/quantize. The output goes to a private directory under
   $TMPDIR (else /dev/shm, else /tmp). */
#include "fuzz_model.h"

// quantize_mode writes OUT.tmpPID beside OUT (run.c's Output: output_open,
// output_close), then renames it: a directory
// of our own, made and removed around each execution (libFuzzer may end the
// process without running atexit handlers).
static char out_dir[4096], out_path[4200];

static void make_out_dir(int gguf) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0]) tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(out_dir, sizeof out_dir, "%s/fuzz_quantize.XXXXXX", tmp);
    if (!mkdtemp(out_dir)) { perror("fuzz_quantize: mkdtemp"); abort(); }
    snprintf(out_path, sizeof out_path, "%s/out.%s", out_dir, gguf ? "gguf" : "bin");
}

static void remove_out_dir(void) {
    remove(out_path);
    rmdir(out_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    static const int types[4] = {TYPE_F32, TYPE_F16, TYPE_Q8_0, TYPE_Q4_0};
    int type = types[data[0] % 4];
    const char *path = fuzz_file(0, data + 1, size - 1);
    Transformer t;
    if (transformer_open_context(&t, path, FUZZ_MAX_CONTEXT) != 0) return 0;
    Config before = t.config;
    int gguf = (data[0] & 4) && t.is_gguf;
    make_out_dir(gguf);
    int err = gguf ? quantize_gguf(&t, NULL, path, out_path, type) : quantize_mode(&t, path, out_path, type);
    transformer_close(&t);
    if (err != 0) { remove_out_dir(); return 0; } // a write error: none expected, but not a memory bug
    int loaded = transformer_open_context(&t, out_path, FUZZ_MAX_CONTEXT);
    remove_out_dir(); // the loader keeps its own copy of the bytes
    if (loaded != 0) {
        fprintf(stderr, "fuzz_quantize: the quantized file does not load: %s\n", error_message);
        abort();
    }
    const Config *c = &t.config;
    if (c->dim != before.dim || c->hidden_dim != before.hidden_dim || c->n_layers != before.n_layers ||
        c->n_heads != before.n_heads || c->n_kv_heads != before.n_kv_heads || c->vocab_size != before.vocab_size ||
        (!gguf && c->weight_type != type) || c->bos_id != before.bos_id || c->eos_id != before.eos_id) {
        fprintf(stderr, "fuzz_quantize: the quantized file has another shape\n");
        abort();
    }
    forward(&t, c->bos_id, 0);
    transformer_close(&t);
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    size = LLVMFuzzerMutate(data, size, max_size);
    if (seed % 2 == 0 || size < 1) return size;
    return 1 + fuzz_fix_size(data + 1, size - 1, max_size - 1);
}
