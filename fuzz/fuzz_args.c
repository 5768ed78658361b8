/* fuzz_args: the command-line parser on any argument list. The input is
   split on NUL bytes into argv[1..] (argv[0] is "run"). On success every
   value must be inside the range the README documents; on failure there
   must be a message. */
#define TESTING
#include "fuzz_util.h"
#include "../run.c"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size + 1);
    if (!copy) abort();
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *argv[MAX_ARGS + 2] = {"run"};
    int argc = 1;
    for (size_t i = 0; i <= size && argc <= MAX_ARGS; argc++) { // every NUL-ended piece, the last one too
        argv[argc] = copy + i;
        i += strlen(copy + i) + 1;
    }
    if (size == 0) argc = 1;
    argv[argc] = NULL;
    Options o;
    error_message[0] = '\0';
    int parsed = parse_args(&o, argc, argv);
    if (parsed == ARGS_HELP || parsed == ARGS_VERSION) {
        // -h, --help or --version anywhere: nothing else matters
    } else if (parsed != ARGS_OK) {
        if (error_message[0] == '\0') abort(); // every refusal says why
    } else {
        const SamplerParams *p = &o.sampling;
        if (!(p->temperature >= 0 && p->temperature <= 100) || !(p->top_p >= 0 && p->top_p <= 1) ||
            p->top_k < 0 || !(p->min_p >= 0 && p->min_p <= 1) ||
            !(p->repeat_penalty >= 0.01f && p->repeat_penalty <= 100) || p->repeat_last_n < 0 || o.steps < 0 ||
            o.context < 0 || !o.checkpoint || o.checkpoint[0] == '-' || !o.mode)
            abort();
        if (strcmp(o.mode, "generate") && strcmp(o.mode, "chat") && strcmp(o.mode, "tokenize") && strcmp(o.mode, "logits") &&
            strcmp(o.mode, "bench") && strcmp(o.mode, "quantize"))
            abort();
        if (!strcmp(o.mode, "logits") && (!o.prompt_file || !o.output)) abort();
        if (!strcmp(o.mode, "quantize") && (!o.output || !dtype_writable(o.dtype)))
            abort();
        if (o.prompt && o.prompt_file) abort();
    }
    free(copy);
    return 0;
}
