#include "gen_options.h"

#include "core/util.h"
#include "grammar/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void gen_options_init(gen_options *o) {
    memset(o, 0, sizeof *o);
    o->mp = ig_model_default_params();
    o->cp = ig_context_default_params();
    o->sp = ig_sampler_default_params();
    /* The usual local-inference defaults (llama.cpp's). */
    o->sp.temperature = 0.8f;
    o->sp.top_k = 40;
    o->sp.top_p = 0.95f;
    o->sp.min_p = 0.05f;
    o->n_predict = -1;
}

void gen_options_help(FILE *f) {
    fprintf(f, "  -n N              max tokens to generate (default: until end of turn)\n"
               "  --temp T          temperature (0 = greedy; default 0.8)\n"
               "  --top-k K         (default 40)      --top-p P   (default 0.95)\n"
               "  --min-p P         (default 0.05)    --repeat-penalty R (default 1)\n"
               "  --presence-penalty P  --frequency-penalty F\n"
               "  --seed S          make sampling reproducible\n"
               "  --stop TEXT       stop when TEXT is generated (repeatable)\n"
               "  --system TEXT     system prompt (chat template)\n"
               "  --grammar FILE    constrain the output to a GBNF grammar (root rule: root)\n"
               "  --json-schema FILE  constrain the output to JSON valid under a JSON Schema\n"
               "  --ctx N           context length (default min(trained, 4096))\n"
               "  --batch N         prompt tokens per step (default 512)\n"
               "  --kv f16|f32      KV cache type (default f16)\n"
               "  -t N              threads (default: physical cores)\n"
               "  --backend cpu|vulkan  --device N\n");
}

static const char *val(int argc, char **argv, int *i) { return *i + 1 < argc ? argv[++*i] : NULL; }

int gen_options_parse(gen_options *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    long v;
    double d;
#define INT_OPT(name, lo, hi, dst)                                                                 \
    if (!strcmp(a, name)) {                                                                        \
        if (cli_parse_int(a, val(argc, argv, i), lo, hi, &v)) return -1;                           \
        dst = (int)v;                                                                              \
        return 1;                                                                                  \
    }
#define FLT_OPT(name, lo, hi, dst)                                                                 \
    if (!strcmp(a, name)) {                                                                        \
        if (cli_parse_float(a, val(argc, argv, i), lo, hi, &d)) return -1;                         \
        dst = (float)d;                                                                            \
        return 1;                                                                                  \
    }
    INT_OPT("-n", -1, 1 << 24, o->n_predict)
    INT_OPT("--n-predict", -1, 1 << 24, o->n_predict)
    FLT_OPT("--temp", 0, 100, o->sp.temperature)
    FLT_OPT("--temperature", 0, 100, o->sp.temperature)
    INT_OPT("--top-k", 0, 1 << 20, o->sp.top_k)
    FLT_OPT("--top-p", 0, 1, o->sp.top_p)
    FLT_OPT("--min-p", 0, 1, o->sp.min_p)
    FLT_OPT("--repeat-penalty", 0, 100, o->sp.repeat_penalty)
    FLT_OPT("--presence-penalty", -2, 2, o->sp.presence_penalty)
    FLT_OPT("--frequency-penalty", -2, 2, o->sp.frequency_penalty)
    INT_OPT("--ctx", 1, 1 << 24, o->cp.n_ctx)
    INT_OPT("-c", 1, 1 << 24, o->cp.n_ctx)
    INT_OPT("--batch", 1, 65536, o->cp.n_batch)
    INT_OPT("-t", 1, 512, o->mp.n_threads)
    INT_OPT("--threads", 1, 512, o->mp.n_threads)
    INT_OPT("--device", 0, 64, o->mp.device)
#undef INT_OPT
#undef FLT_OPT
    if (!strcmp(a, "--seed")) {
        if (cli_parse_int(a, val(argc, argv, i), 0, 0x7fffffffL, &v)) return -1;
        o->sp.seed = (uint64_t)v;
        o->seed_set = true;
        return 1;
    }
    if (!strcmp(a, "--stop")) {
        const char *s = val(argc, argv, i);
        if (!s || !*s || o->n_stop >= GEN_MAX_STOP) {
            fprintf(stderr, "ignis: --stop needs a non-empty text (at most %d)\n", GEN_MAX_STOP);
            return -1;
        }
        o->stop[o->n_stop++] = s;
        return 1;
    }
    if (!strcmp(a, "--grammar") || !strcmp(a, "--json-schema")) {
        const char *f = val(argc, argv, i);
        if (!f) {
            fprintf(stderr, "ignis: %s needs a file\n", a);
            return -1;
        }
        if (a[2] == 'g') o->grammar_file = f;
        else o->schema_file = f;
        if (o->grammar_file && o->schema_file) {
            fprintf(stderr, "ignis: give either --grammar or --json-schema, not both\n");
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--system")) {
        o->system = val(argc, argv, i);
        if (!o->system) {
            fprintf(stderr, "ignis: --system needs a value\n");
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--kv")) {
        const char *s = val(argc, argv, i);
        if (s && !strcmp(s, "f16")) o->cp.kv_type = IG_KV_F16;
        else if (s && !strcmp(s, "f32")) o->cp.kv_type = IG_KV_F32;
        else {
            fprintf(stderr, "ignis: --kv expects f16 or f32\n");
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--backend")) return cli_parse_backend(val(argc, argv, i), &o->mp.backend) ? -1 : 1;
    return 0;
}

void gen_options_finish(gen_options *o) {
    if (!o->seed_set) o->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    o->cp.n_threads = o->mp.n_threads;
}

int gen_options_grammar(const gen_options *o, ig_grammar **out) {
    *out = NULL;
    const char *path = o->grammar_file ? o->grammar_file : o->schema_file;
    if (!path) return 0;
    char *text = NULL;
    size_t len = 0;
    if (ig_file_read_all(path, IG_GRAMMAR_MAX_TEXT, &text, &len) != IG_OK) {
        fprintf(stderr, "ignis: cannot read %s: %s\n", path, ig_last_error());
        return -1;
    }
    ig_status st = o->grammar_file ? ig_grammar_from_gbnf(text, len, "root", out)
                                   : ig_grammar_from_json_schema(text, len, out);
    free(text);
    if (st != IG_OK) {
        fprintf(stderr, "ignis: %s: %s\n", path, ig_last_error());
        return -1;
    }
    return 0;
}
