/* fuzz_encode: arbitrary bytes through encode() and back through decode(),
   with the real tokenizers of the repository, loaded once:
   stories260K's tok512.bin (which folds spaces) and Llama 2's tokenizer.bin.

   Input: one flag byte (bit 0: which tokenizer, bit 1: add BOS, bit 2: add
   EOS), then the text, any bytes (NUL, invalid UTF-8). Checks, besides
   AddressSanitizer's: the token buffer is exactly the documented 3*len+3
   ids, every id is inside the vocabulary, and for text that is valid UTF-8
   without U+2581 the decoded pieces give the text back (Llama 2's
   tokenizer), or the text with its spaces folded (tok512: no leading or
   trailing spaces, runs of spaces as one). */
#define TESTING
#include "fuzz_util.h"
#include "../run.c"

static Tokenizer tokenizers[2];
static int loaded;

static void load(int i, const char *relative) {
    const char *path = fuzz_data_path(relative);
    if (tokenizer_open(&tokenizers[i], path, i == 0 ? 512 : 32000) != 0) {
        fprintf(stderr, "fuzz_encode: %s (set FUZZ_DATA to the repository)\n", error_message);
        exit(1);
    }
}

// 1 if s[0..n) is valid UTF-8 (shortest forms, no surrogates, <= U+10FFFF).
static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (len == 0 || i + len > n) return 0;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        unsigned char d = len > 1 ? s[i + 1] : 0;
        if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) || (c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F))
            return 0;
        i += len;
    }
    return 1;
}

// 1 if s[0..n) holds U+2581, which the normalizer turns into a space.
static int has_space_symbol(const char *s, size_t n) {
    for (size_t i = 0; i + 3 <= n; i++)
        if (memcmp(s + i, "\xE2\x96\x81", 3) == 0) return 1;
    return 0;
}

// The text as tok512 (remove_extra_whitespaces) gives it back: leading and
// trailing spaces gone, runs of spaces as one. Returns the length.
static size_t fold_spaces(const char *s, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ' && (k == 0 || out[k - 1] == ' ')) continue;
        out[k++] = s[i];
    }
    while (k > 0 && out[k - 1] == ' ') k--;
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!loaded) {
        load(0, "models/stories260K/tok512.bin");
        load(1, "tokenizer.bin");
        loaded = 1;
    }
    if (size < 1) return 0;
    int which = data[0] & 1, add_bos = data[0] >> 1 & 1, add_eos = data[0] >> 2 & 1;
    Tokenizer *tk = &tokenizers[which];
    size_t len = size - 1;
    char *text = malloc(len + 1); // a copy of exactly the text's bytes
    int *tokens = malloc((3 * len + 3) * sizeof(int)), n;
    char *decoded = malloc(3 * len + 4), *expected = malloc(len + 1);
    if (!text || !tokens || !decoded || !expected) abort();
    memcpy(text, data + 1, len);
    if (encode(tk, text, len, add_bos, add_eos, tokens, &n) != 0) abort(); // len is small: it must succeed
    if (n < add_bos + add_eos || n > (int)(3 * len + 3)) abort();
    size_t out = 0;
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= tk->vocab_size) abort();
        size_t piece_len;
        const char *piece = decode(tk, i > 0 ? tokens[i - 1] : tk->bos_id, tokens[i], &piece_len);
        if (out + piece_len > 3 * len + 3) abort(); // more bytes than the normalized text can hold
        memcpy(decoded + out, piece, piece_len);
        out += piece_len;
    }
    if (valid_utf8((const unsigned char *)text, len) && !has_space_symbol(text, len)) {
        size_t want = which == 0 ? fold_spaces(text, len, expected) : (memcpy(expected, text, len), len);
        if (out != want || memcmp(decoded, expected, want) != 0) {
            fprintf(stderr, "fuzz_encode: decode(encode(text)) is not the text: %zu bytes back for %zu\n", out, want);
            abort();
        }
    }
    free(text); free(tokens); free(decoded); free(expected);
    return 0;
}
