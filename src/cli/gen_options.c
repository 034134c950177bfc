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
    o->spec = ig_spec_default_params();
}

void spec_options_help(FILE *f) {
    fprintf(f, "  --draft MODEL     speculative decoding with a smaller Gemma 3 of the same vocabulary\n"
               "  --lookup          speculative decoding by prompt lookup (n-grams of the text so far)\n"
               "  --draft-max K     drafts per step (default 8)  --draft-min K (default 0)\n"
               "  --draft-p-min P   the draft model stops below this probability (default 0)\n"
               "  --lookup-ngram MIN:MAX  n-gram sizes for --lookup (default 1:3)\n");
}

int spec_options_parse(const char **draft, bool *lookup, ig_spec_params *sp, int argc, char **argv,
                       int *i) {
    const char *a = argv[*i];
    long v;
    double d;
    if (!strcmp(a, "--draft") || !strcmp(a, "--draft-model")) {
        *draft = *i + 1 < argc ? argv[++*i] : NULL;
        if (!*draft) {
            fprintf(stderr, "ignis: --draft needs a model path\n");
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--lookup")) {
        *lookup = true;
        return 1;
    }
    if (!strcmp(a, "--draft-max")) {
        if (cli_parse_int(a, *i + 1 < argc ? argv[++*i] : NULL, 1, IG_SPEC_MAX_DRAFT, &v)) return -1;
        sp->draft_max = (int)v;
        return 1;
    }
    if (!strcmp(a, "--draft-min")) {
        if (cli_parse_int(a, *i + 1 < argc ? argv[++*i] : NULL, 0, IG_SPEC_MAX_DRAFT, &v)) return -1;
        sp->draft_min = (int)v;
        return 1;
    }
    if (!strcmp(a, "--draft-p-min")) {
        if (cli_parse_float(a, *i + 1 < argc ? argv[++*i] : NULL, 0, 1, &d)) return -1;
        sp->p_min = (float)d;
        return 1;
    }
    if (!strcmp(a, "--lookup-ngram")) {
        const char *s = *i + 1 < argc ? argv[++*i] : NULL;
        int lo, hi;
        char tail;
        if (!s || sscanf(s, "%d:%d%c", &lo, &hi, &tail) != 2 || lo < 1 || hi < lo || hi > 64) {
            fprintf(stderr, "ignis: --lookup-ngram expects MIN:MAX with 1 <= MIN <= MAX <= 64\n");
            return -1;
        }
        sp->ngram_min = lo;
        sp->ngram_max = hi;
        return 1;
    }
    return 0;
}

int spec_options_setup(const char *who, const char *draft, bool lookup, ig_spec_params *sp,
                       ig_model *target, const ig_model_params *mp, int n_ctx, int n_seq,
                       ig_model **draft_model, ig_spec **spec) {
    *draft_model = NULL;
    *spec = NULL;
    if (!draft && !lookup) return 0;
    if (draft && lookup) {
        fprintf(stderr, "%s: --draft and --lookup are exclusive\n", who);
        return -1;
    }
    if (sp->draft_min > sp->draft_max) {
        fprintf(stderr, "%s: --draft-min %d exceeds --draft-max %d\n", who, sp->draft_min, sp->draft_max);
        return -1;
    }
    if (draft && ig_model_load(draft, mp, draft_model) != IG_OK) {
        fprintf(stderr, "%s: cannot load the draft model %s: %s\n", who, draft, ig_last_error());
        return -1;
    }
    sp->draft = *draft_model;
    if (ig_spec_create(sp, target, n_ctx, n_seq, spec) != IG_OK) {
        fprintf(stderr, "%s: %s%s\n", who, draft ? "draft model: " : "", ig_last_error());
        ig_model_free(*draft_model);
        *draft_model = NULL;
        return -1;
    }
    return 0;
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
               "  --backend cpu|vulkan  --device N\n"
               "  --quant q8_0|q4_0|q4_k  quantize F32/F16/BF16 weights at load (the blocks\n"
               "                    of `ignis quantize --type T --pure`; no file written)\n");
    spec_options_help(f);
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
    int r = spec_options_parse(&o->draft, &o->lookup, &o->spec, argc, argv, i);
    if (r) return r;
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
    if (!strcmp(a, "--quant")) return cli_parse_quant(val(argc, argv, i), &o->mp.quant) ? -1 : 1;
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
