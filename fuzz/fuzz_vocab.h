/* fuzz_vocab.h: uses a loaded vocabulary the way ./run does, for the
   harnesses that load one (include after run.c). Every id encode gives must
   be inside the vocabulary; every decode is read in full, so AddressSanitizer
   sees a piece that points anywhere wrong. */

// Encodes text into exactly the room encode may use, then decodes each id
// after its predecessor.
static void fuzz_encode_decode(Tokenizer *tk, const char *text, size_t len, int add_bos) {
    int *tokens = malloc((3 * len + 3) * sizeof(int)), n;
    if (!tokens) abort();
    if (encode(tk, text, len, add_bos, 1, tokens, &n) == 0)
        for (int i = 0; i < n; i++) {
            if (tokens[i] < 0 || tokens[i] >= tk->vocab_size) abort();
            size_t piece_len;
            fuzz_touch(decode(tk, i > 0 ? tokens[i - 1] : -1, tokens[i], &piece_len), piece_len);
        }
    free(tokens);
}

// Decodes every token as the first after BOS.
static void fuzz_decode_all(Tokenizer *tk) {
    for (int id = 0; id < tk->vocab_size; id++) {
        size_t len;
        fuzz_touch(decode(tk, tk->bos_id, id, &len), len);
    }
}
