/* The library's own JSON reader (src/core/json.c): any bytes, both with and
 * without duplicate-member rejection. A parsed document is walked whole and
 * checked against the header's promises (strings without NUL bytes, every
 * object member named). */
#include "fuzz_common.h"

#include "core/json.h"

static void walk(const ig_json *v) {
    switch (v->type) {
    case IG_JSON_STRING:
        if (strlen(v->u.s) != v->n) abort();
        break;
    case IG_JSON_ARRAY:
    case IG_JSON_OBJECT:
        for (size_t i = 0; i < v->n; i++) {
            const ig_json *c = ig_json_at(v, i);
            if (!c) abort();
            if (v->type == IG_JSON_OBJECT && (!c->key || memchr(c->key, 0, c->key_len))) abort();
            walk(c);
        }
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (unsigned flags = 0; flags <= IG_JSON_REJECT_DUPLICATES; flags++) {
        ig_json_error err;
        ig_json_doc *doc = ig_json_parse((const char *)data, size, flags, &err);
        if (!doc) continue;
        const ig_json *root = ig_json_root(doc);
        if (!root) abort();
        walk(root);
        if (ig_json_is_object(root) && root->n) {
            char *key = fuzz_strndup((const uint8_t *)root->u.items[0].key, root->u.items[0].key_len);
            if (key && !ig_json_get(root, key)) abort();
            free(key);
        }
        ig_json_free(doc);
    }
    return 0;
}
