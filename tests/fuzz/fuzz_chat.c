/* Chat rendering (src/tokenizer/chat.c): the input is NUL-separated fields,
 * role, content, role, content, ...; the first byte's low bit asks for the
 * generation prompt. The rendered text must start with "<bos>". */
#include "fuzz_common.h"

#include "ignis.h"
#include "tokenizer/tokenizer.h"

#define MAX_MSGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    bool gen_prompt = data[0] & 1;
    char *copy = fuzz_strndup(data + 1, size - 1);
    if (!copy) return 0;
    (void)ig_chat_template_is_gemma(copy);

    ig_chat_message msgs[MAX_MSGS];
    size_t n = 0;
    const char *p = copy, *end = copy + size - 1;
    while (n < MAX_MSGS && p < end) {
        const char *role = p;
        p += strlen(p) + 1;
        const char *content = p < end ? p : "";
        if (p < end) p += strlen(p) + 1;
        msgs[n].role = role;
        msgs[n].content = content;
        n++;
    }
    char *out = NULL;
    if (ig_chat_render(msgs, n, gen_prompt, &out) == IG_OK) {
        if (strncmp(out, "<bos>", 5) != 0) abort();
        free(out);
    }
    free(copy);
    return 0;
}
