/* fuzz_output: any bytes (what decode() gives for any token sequence, byte
   tokens included) through the text output filter, text_put + text_finish.
   The README promises that stdout carries valid UTF-8 and no control
   characters other than tab and newlines ("a model must not drive the
   terminal"): the output must be valid UTF-8 without C0 controls other than
   \t \n \r, without DEL and without the C1 controls U+0080..U+009F (8-bit
   CSI, U+009B, is an escape sequence to many terminals). */
#define TESTING
#include "fuzz_util.h"
#include "../run.c"

static void check(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        const char *problem = NULL;
        if (len == 0 || i + len > n) problem = "invalid UTF-8";
        for (size_t k = 1; !problem && k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) problem = "invalid UTF-8";
        unsigned char d = len > 1 && !problem ? s[i + 1] : 0;
        if (!problem && ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) || (c == 0xF0 && d < 0x90) ||
                         (c == 0xF4 && d > 0x8F)))
            problem = "invalid UTF-8";
        if (!problem && len == 1 && ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F))
            problem = "a C0 control character or DEL";
        if (!problem && c == 0xC2 && d >= 0x80 && d <= 0x9F) problem = "a C1 control character (U+0080..U+009F)";
        if (problem) {
            fprintf(stderr, "fuzz_output: the output holds %s at byte %zu\n", problem, i);
            abort();
        }
        i += len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *out = NULL;
    size_t out_len = 0;
    FILE *f = open_memstream(&out, &out_len);
    if (!f) abort();
    TextOut text = {f, {0}, 0};
    // in pieces, as tokens arrive: the first byte gives the piece length
    size_t piece = size > 0 ? data[0] % 8 + 1 : 1;
    for (size_t i = 1; i < size; i += piece) text_put(&text, (const char *)data + i, size - i < piece ? size - i : piece);
    text_finish(&text);
    fclose(f);
    check((const unsigned char *)out, out_len);
    free(out);
    return 0;
}
