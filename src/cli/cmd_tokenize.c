/* ignis tokenize MODEL TEXT: prints the ids as a JSON array. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *text = NULL;
    bool bos = false, special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: ignis tokenize [MODEL] TEXT [--bos] [--no-special]\n"
                   "Prints the token ids of TEXT as a JSON array. --bos prepends <bos>;\n"
                   "--no-special treats control-token text such as <start_of_turn> literally.\n");
            return 0;
        } else if (!strcmp(a, "--bos")) bos = true;
        else if (!strcmp(a, "--no-special")) special = false;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ignis tokenize: unknown option %s\n", a);
            return 2;
        } else if (!path) path = a;
        else if (!text) text = a;
        else {
            fprintf(stderr, "ignis tokenize: unexpected argument %s\n", a);
            return 2;
        }
    }
    if (path && !text) { /* one argument: the text, with the default model */
        text = path;
        path = NULL;
    }
    if (!text) {
        fprintf(stderr, "usage: ignis tokenize [MODEL] TEXT\n");
        return 2;
    }
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 1;
    ig_model *m = cli_load_model(path, &mp);
    if (!m) return 1;
    int rc = 1;
    const ig_tokenizer *tok = ig_model_tokenizer(m);
    int32_t *ids = NULL;
    size_t n = 0;
    if (!tok) fprintf(stderr, "ignis tokenize: this model has no tokenizer\n");
    else if (ig_tokenize(tok, text, strlen(text), bos, special, &ids, &n) != IG_OK)
        fprintf(stderr, "ignis tokenize: %s\n", ig_last_error());
    else {
        printf("[");
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("]\n");
        rc = 0;
    }
    free(ids);
    ig_model_free(m);
    return rc;
}
