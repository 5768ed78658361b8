/* fuzz_bpe: arbitrary bytes through the byte-level BPE tokenizer (encode,
   then decode), with the real vocabularies of the repository's
   vocabulary-only GGUF files, loaded once: Llama 3.1's (llama3-vocab.gguf,
   pre llama-bpe, which ignores merges for a word that is a token) and
   Qwen's (qwen2-vocab.gguf, pre qwen2, no BOS, user-defined tokens such as
   <think>).

   Input: one flag byte (bit 0: which vocabulary, bit 1: add BOS, bit 2: add
   EOS, bits 3-4: the pre-tokenizer: 0 the model's own, 1 GPT-2's, 2 GPT-2's
   after splitting off digits (smollm), 3 the other of Llama 3's and Qwen 2's;
   bit 5: o200k's (gpt-4o) instead, so that every matcher runs on a real
   vocabulary), then the text, any bytes
   (NUL, invalid UTF-8, text that spells control tokens such as
   <|begin_of_text|> or <|im_start|>). Checks, besides
   AddressSanitizer's and UBSan's:
   - encode succeeds into exactly the documented 3*len+3 ids; BOS and EOS are
     there exactly when asked for (and the model has them), at the ends;
   - every id is inside the vocabulary, and every id from the text is a
     normal or user-defined token: never a control token, BOS, EOS or an
     end-of-generation token (README, Chat: control tokens are never typed);
   - decoding the ids (decode, after their predecessor) gives back exactly
     the text's bytes. Byte-level BPE is lossless: both vocabularies have a
     token for each of the 256 bytes, and a byte that starts no valid UTF-8
     character is a unit of its own that keeps its byte (see the
     pre-tokenizers in run.c), so this holds for invalid UTF-8 too;
   - the ids are those of a plain reference BPE written here: the text cut
     at the user-defined tokens and into words by run.c's pre-tokenizer,
     then, within each word, the merge of lowest rank applied first,
     leftmost on ties, by a linear scan (run.c uses a heap across words). */
#define TESTING
#include "fuzz_util.h"
#include "../run.c"

static Tokenizer tokenizers[2];
static const char *const names[2] = {"test/data/models/vocab/llama3-vocab.gguf", "test/data/models/vocab/qwen2-vocab.gguf"};
static const int vocab_sizes[2] = {128256, 151669};
static int loaded;

static void load(int i) {
    const char *path = fuzz_data_path(names[i]);
    Tokenizer *tk = &tokenizers[i];
    if (tokenizer_open(tk, path, vocab_sizes[i]) != 0) {
        fprintf(stderr, "fuzz_bpe: %s (set FUZZ_DATA to the repository)\n", error_message);
        exit(1);
    }
    if (!tk->byte_level) { fprintf(stderr, "fuzz_bpe: %s is not byte-level BPE\n", path); exit(1); }
    for (int b = 0; b < 256; b++) // what makes the round trip exact for any bytes
        if (tk->byte_token[b] < 0) { fprintf(stderr, "fuzz_bpe: %s has no token for byte %d\n", path, b); exit(1); }
}

// 1 if id may come from text: a normal or user-defined token that is not
// BOS, EOS or an end-of-generation token.
static int typeable(const Tokenizer *tk, int id) {
    if (tk->kind[id] != TOKEN_NORMAL && tk->kind[id] != TOKEN_USER_DEFINED) return 0;
    if (id == tk->bos_id || id == tk->eos_id) return 0;
    for (int i = 0; i < tk->n_eog; i++)
        if (id == tk->eog[i]) return 0;
    return 1;
}

// The rank of the merge of the adjacent spans at s, or INT_MAX.
static int rank_of(const Tokenizer *tk, const char *s, int left_len, int len) {
    const BpePair *p = bpe_pair(tk, s, left_len, len);
    return p ? p->rank : INT_MAX;
}

// Reference BPE of one word text[from..to): appends its ids to out.
static void ref_word(const Tokenizer *tk, const char *text, int from, int to, int *out, int *n_out) {
    if (tk->ignore_merges) {
        int id = lookup_piece(tk, text + from, (size_t)(to - from));
        if (id >= 0) { out[(*n_out)++] = id; return; }
    }
    int n = to - from;
    int *start = malloc((size_t)n * sizeof *start), *len = malloc((size_t)n * sizeof *len);
    int *rank = malloc((size_t)n * sizeof *rank); // rank[i]: merge of symbols i and i+1
    if (!start || !len || !rank) abort();
    for (int i = 0; i < n; i++) { start[i] = from + i; len[i] = 1; }
    for (int i = 0; i + 1 < n; i++) rank[i] = rank_of(tk, text + start[i], 1, 2);
    while (n > 1) {
        int best = 0;
        for (int i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i; // strict: leftmost on ties
        if (rank[best] == INT_MAX) break;
        len[best] += len[best + 1];
        memmove(start + best + 1, start + best + 2, (size_t)(n - best - 2) * sizeof *start);
        memmove(len + best + 1, len + best + 2, (size_t)(n - best - 2) * sizeof *len);
        if (n - best - 3 > 0) memmove(rank + best + 1, rank + best + 2, (size_t)(n - best - 3) * sizeof *rank);
        n--;
        if (best > 0) rank[best - 1] = rank_of(tk, text + start[best - 1], len[best - 1], len[best - 1] + len[best]);
        if (best + 1 < n) rank[best] = rank_of(tk, text + start[best], len[best], len[best] + len[best + 1]);
    }
    for (int i = 0; i < n; i++) {
        int id = len[i] == 1 ? tk->byte_token[(unsigned char)text[start[i]]] : lookup_piece(tk, text + start[i], (size_t)len[i]);
        if (id < 0) { fprintf(stderr, "fuzz_bpe: reference merged into a non-token\n"); abort(); }
        out[(*n_out)++] = id;
    }
    free(start); free(len); free(rank);
}

// Reference BPE of text[0..len), between user-defined tokens: words by
// run.c's pre-tokenizer (PRE_DIGITS: every digit a chunk of its own).
static void ref_text(const Tokenizer *tk, const char *text, size_t len, int *out, int *n_out) {
    Units u = {.cp = malloc((len + 1) * sizeof *u.cp), .cls = malloc(len + 1), .at = malloc((len + 1) * sizeof *u.at)};
    if (!u.cp || !u.cls || !u.at) abort();
    split_units(&u, text, len);
    for (size_t pos = 0; pos < u.n;) {
        size_t end = u.n;
        if (tk->pre == PRE_DIGITS)
            for (end = pos + 1; u.cls[pos] != CHAR_NUMBER && end < u.n && u.cls[end] != CHAR_NUMBER; end++) {}
        while (pos < end) {
            size_t n = pre_token(tk->pre, &u, pos, end);
            if (n == 0 || pos + n > end) { fprintf(stderr, "fuzz_bpe: pre-token of %zu units at %zu\n", n, pos); abort(); }
            ref_word(tk, text, u.at[pos], u.at[pos + n], out, n_out);
            pos += n;
        }
    }
    free(u.cp); free(u.cls); free(u.at);
}

// The reference ids of the whole text: the longest user-defined token at
// each place, as written here, and the pieces between them.
static void ref_encode(const Tokenizer *tk, const char *text, size_t len, int *out, int *n_out) {
    size_t start = 0;
    for (size_t i = 0; i < len;) {
        int found = -1;
        for (int k = 0; k < tk->n_user_tokens; k++) {
            int id = tk->user_tokens[k];
            size_t n = (size_t)tk->piece_len[id];
            if (n <= len - i && memcmp(text + i, tk->vocab[id], n) == 0 &&
                (found < 0 || n > (size_t)tk->piece_len[found]))
                found = id;
        }
        if (found < 0) { i++; continue; }
        ref_text(tk, text + start, i - start, out, n_out);
        out[(*n_out)++] = found;
        i += (size_t)tk->piece_len[found];
        start = i;
    }
    ref_text(tk, text + start, len - start, out, n_out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!loaded) {
        load(0);
        load(1);
        loaded = 1;
    }
    if (size < 1) return 0;
    int which = data[0] & 1, add_bos = data[0] >> 1 & 1, add_eos = data[0] >> 2 & 1, pre = data[0] >> 3 & 3;
    Tokenizer copy = tokenizers[which], *tk = &copy; // shares the vocabulary; only pre may differ
    if (pre == 1 || pre == 2) { copy.pre = pre == 1 ? PRE_GPT2 : PRE_DIGITS; copy.ignore_merges = 0; }
    if (pre == 3) { copy.pre = which ? PRE_LLAMA3 : PRE_QWEN2; copy.ignore_merges = which; }
    if (data[0] >> 5 & 1) { copy.pre = PRE_O200K; copy.ignore_merges = 1; }
    size_t len = size - 1;
    char *text = malloc(len + 1); // a copy of exactly the text's bytes
    int *tokens = malloc((3 * len + 3) * sizeof(int)), n;
    int *want = malloc((len + 1) * sizeof(int)), n_want = 0;
    char *decoded = malloc(len + 1);
    if (!text || !tokens || !want || !decoded) abort();
    memcpy(text, data + 1, len);
    if (encode(tk, text, len, add_bos, add_eos, tokens, &n) != 0) abort(); // len is small: it must succeed
    int has_bos = add_bos && tk->bos_id >= 0, has_eos = add_eos && tk->eos_id >= 0;
    if (n < has_bos + has_eos || n > (int)len + has_bos + has_eos) {
        fprintf(stderr, "fuzz_bpe: %d ids for %zu bytes\n", n, len);
        abort();
    }
    if ((has_bos && tokens[0] != tk->bos_id) || (has_eos && tokens[n - 1] != tk->eos_id)) {
        fprintf(stderr, "fuzz_bpe: BOS or EOS missing\n");
        abort();
    }
    size_t out = 0;
    for (int i = 0; i < n; i++) {
        int id = tokens[i];
        if (id < 0 || id >= tk->vocab_size) { fprintf(stderr, "fuzz_bpe: id %d out of range\n", id); abort(); }
        if (i < has_bos || i >= n - has_eos) continue;
        if (!typeable(tk, id)) {
            fprintf(stderr, "fuzz_bpe: text gave control token %d '%s' (kind %d)\n", id, tk->vocab[id], tk->kind[id]);
            abort();
        }
        size_t piece_len;
        const char *piece = decode(tk, i > 0 ? tokens[i - 1] : -1, id, &piece_len);
        if (out + piece_len > len) {
            fprintf(stderr, "fuzz_bpe: decoded pieces longer than the text (%zu bytes)\n", len);
            abort();
        }
        memcpy(decoded + out, piece, piece_len);
        out += piece_len;
    }
    if (out != len || memcmp(decoded, text, len) != 0) {
        fprintf(stderr, "fuzz_bpe: decode(encode(text)) is not the text: %zu bytes back for %zu\n", out, len);
        abort();
    }
    ref_encode(tk, text, len, want, &n_want);
    if (n_want != n - has_bos - has_eos || memcmp(want, tokens + has_bos, (size_t)n_want * sizeof(int)) != 0) {
        fprintf(stderr, "fuzz_bpe: %d ids, the reference BPE gives %d:", n - has_bos - has_eos, n_want);
        for (int i = has_bos; i < n - has_eos; i++) fprintf(stderr, " %d", tokens[i]);
        fprintf(stderr, " vs");
        for (int i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
        abort();
    }
    free(text); free(tokens); free(want); free(decoded);
    return 0;
}
