/* ignis detokenize MODEL IDS: prints the text of token ids (a JSON array or
 * comma/space separated). */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_detokenize(int argc, char **argv) {
    const char *path = NULL, *ids_arg = NULL;
    bool special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: ignis detokenize [MODEL] IDS [--special]\n"
                   "IDS: a JSON array or comma-separated ids. --special renders control tokens.\n");
            return 0;
        } else if (!strcmp(a, "--special")) special = true;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ignis detokenize: unknown option %s\n", a);
            return 2;
        } else if (!path) path = a;
        else if (!ids_arg) ids_arg = a;
        else {
            fprintf(stderr, "ignis detokenize: unexpected argument %s\n", a);
            return 2;
        }
    }
    if (path && !ids_arg) {
        ids_arg = path;
        path = NULL;
    }
    if (!ids_arg) {
        fprintf(stderr, "usage: ignis detokenize [MODEL] IDS\n");
        return 2;
    }
    size_t cap = strlen(ids_arg) / 2 + 1, n = 0;
    int32_t *ids = malloc(sizeof *ids * cap);
    if (!ids) return 1;
    for (const char *p = ids_arg; *p;) {
        if (strchr("[], \t\n", *p)) {
            p++;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || n >= cap) {
            fprintf(stderr, "ignis detokenize: bad token id list '%s'\n", ids_arg);
            free(ids);
            return 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 1;
    ig_model *m = cli_load_model(path, &mp);
    if (!m) {
        free(ids);
        return 1;
    }
    int rc = 1;
    char *text = NULL;
    const ig_tokenizer *tok = ig_model_tokenizer(m);
    if (!tok) fprintf(stderr, "ignis detokenize: this model has no tokenizer\n");
    else if (ig_detokenize(tok, ids, n, special, &text) != IG_OK)
        fprintf(stderr, "ignis detokenize: %s\n", ig_last_error());
    else {
        printf("%s\n", text);
        rc = 0;
    }
    free(text);
    free(ids);
    ig_model_free(m);
    return rc;
}
