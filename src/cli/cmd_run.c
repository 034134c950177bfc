/* ignis run [MODEL] -p PROMPT: one prompt in, streamed text out. */
#include "cli.h"
#include "gen_options.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t g_interrupt;
static void on_sigint(int sig) {
    (void)sig;
    g_interrupt = 1;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ignis run [MODEL] -p PROMPT [options]\n"
               "  -p, --prompt TEXT   the prompt (- reads it from stdin)\n"
               "  -f FILE             read the prompt from FILE\n"
               "  --chat              wrap the prompt in the model's chat turns (the default when\n"
               "                      the model carries a Gemma chat template, as -it models do)\n"
               "  --raw               plain completion even when the model has a chat template\n"
               "  --tokens-in IDS     feed these token ids instead of a text prompt\n"
               "  --print-ids         print the generated token ids (comma-separated) instead of text\n"
               "  --image FILE        an image (PNG or JPEG; repeatable) placed before the prompt's text\n"
               "                      (with --tokens-in: each <start_of_image> id, or run of placeholder ids)\n"
               "  --mmproj FILE       the vision tower (llama.cpp's mmproj GGUF) of a GGUF model; an\n"
               "                      mmproj*.gguf next to the model is found without it\n");
    gen_options_help(f);
}

static bool emit_stdout(void *user, const char *text, size_t len) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

static int parse_ids(const char *s, ig_token_list *out) {
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) return -1;
        if (!ig_token_list_push(out, (int32_t)v)) return -1;
        p = end;
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return out->n > 0 ? 0 : -1;
}

static char *read_stream(FILE *f) {
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    buf[len] = '\0';
    return buf;
}

int cmd_run(int argc, char **argv) {
    gen_options o;
    gen_options_init(&o);
    const char *prompt = NULL, *prompt_file = NULL, *ids_arg = NULL;
    bool chat = false, raw = false, print_ids = false;
    const char *mmproj = NULL;
    char *images[CLI_MAX_IMAGES];
    int n_images = 0;
    float **embd = NULL;
    char *user_text = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = gen_options_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) {
            prompt = argv[++i];
        } else if (!strcmp(a, "-f") && i + 1 < argc) {
            prompt_file = argv[++i];
        } else if (!strcmp(a, "--tokens-in") && i + 1 < argc) {
            ids_arg = argv[++i];
        } else if (!strcmp(a, "--image") && i + 1 < argc) {
            if (n_images == CLI_MAX_IMAGES) {
                fprintf(stderr, "ignis run: at most %d images\n", CLI_MAX_IMAGES);
                return 2;
            }
            images[n_images++] = argv[++i];
        } else if (!strcmp(a, "--mmproj") && i + 1 < argc) {
            mmproj = argv[++i];
        } else if (!strcmp(a, "--chat")) {
            chat = true;
        } else if (!strcmp(a, "--raw")) {
            raw = true;
        } else if (!strcmp(a, "--print-ids")) {
            print_ids = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ignis run: unknown or incomplete option %s\n", a);
            usage(stderr);
            return 2;
        } else if (!o.model) {
            o.model = a;
        } else {
            fprintf(stderr, "ignis run: unexpected argument %s\n", a);
            return 2;
        }
    }
    if (!prompt && !prompt_file && !ids_arg) {
        fprintf(stderr, "ignis run: give a prompt with -p TEXT (or -f FILE, or --tokens-in IDS)\n");
        usage(stderr);
        return 2;
    }
    gen_options_finish(&o);
    char *owned_prompt = NULL;
    if (prompt_file || (prompt && !strcmp(prompt, "-"))) {
        FILE *f = prompt_file ? fopen(prompt_file, "rb") : stdin;
        if (!f) {
            fprintf(stderr, "ignis run: cannot open %s\n", prompt_file);
            return 1;
        }
        owned_prompt = read_stream(f);
        if (prompt_file) fclose(f);
        if (!owned_prompt) {
            fprintf(stderr, "ignis run: cannot read the prompt\n");
            return 1;
        }
        prompt = owned_prompt;
    }
    int rc = 1;
    ig_token_list in = {0}, out = {0};
    char *rendered = NULL;
    ig_context *ctx = NULL;
    ig_grammar *grammar = NULL;
    ig_token_trie *trie = NULL;
    ig_model *draft_m = NULL;
    ig_spec *spec = NULL;
    ig_model *m = cli_load_model(o.model, &o.mp);
    if (!m) goto done;
    if ((n_images || mmproj) && cli_attach_vision(m, o.model, mmproj, n_images > 0)) goto done;
    if (n_images && cli_embed_images(m, images, n_images, o.mp.n_threads, &embd) != IG_OK) {
        fprintf(stderr, "ignis run: %s\n", ig_last_error());
        goto done;
    }
    const ig_tokenizer *tok = ig_model_tokenizer(m);
    if (ids_arg) {
        if (parse_ids(ids_arg, &in)) {
            fprintf(stderr, "ignis run: --tokens-in expects comma-separated token ids\n");
            rc = 2;
            goto done;
        }
    } else {
        if (!tok) {
            fprintf(stderr, "ignis run: this model has no tokenizer; use --tokens-in\n");
            goto done;
        }
        const char *text = prompt;
        bool add_bos = true;
        const char *tmpl = ig_model_chat_template(m);
        if (!raw && tmpl && ig_chat_template_is_gemma(tmpl)) chat = true;
        if (chat) {
            ig_chat_message msgs[2];
            size_t n = 0;
            if (o.system) msgs[n++] = (ig_chat_message){"system", o.system};
            const char *content = prompt;
            if (n_images) { /* the images first, as the chat template places image parts */
                size_t len = strlen(prompt) + 16 * (size_t)n_images + 1;
                user_text = malloc(len);
                if (!user_text) goto done;
                user_text[0] = '\0';
                for (int k = 0; k < n_images; k++) strcat(user_text, "<start_of_image>");
                strcat(user_text, prompt);
                content = user_text;
            }
            msgs[n++] = (ig_chat_message){"user", content};
            if (ig_chat_render(msgs, n, true, &rendered) != IG_OK) {
                fprintf(stderr, "ignis run: %s\n", ig_last_error());
                goto done;
            }
            text = rendered;
            add_bos = false; /* the template starts with <bos> */
        }
        size_t n_ids = 0;
        if (ig_tokenize(tok, text, strlen(text), add_bos, true, &in.ids, &n_ids) != IG_OK) {
            fprintf(stderr, "ignis run: cannot tokenize the prompt: %s\n", ig_last_error());
            goto done;
        }
        in.n = in.cap = (int)n_ids;
        if (n_images && !chat) {
            fprintf(stderr, "ignis run: --image needs the chat format (or --tokens-in with image tokens)\n");
            goto done;
        }
    }
    if (n_images) {
        /* <start_of_image> ids become the full image sequence unless the
         * placeholders are already there. */
        bool has_placeholders = false;
        for (int i = 0; i < in.n; i++) has_placeholders |= in.ids[i] == ig_model_image_token_id(m);
        if (!has_placeholders) {
            int32_t *x = NULL;
            int nx = 0, ni = 0;
            if (ig_image_expand_prompt(m, in.ids, in.n, &x, &nx, &ni) != IG_OK) {
                fprintf(stderr, "ignis run: %s\n", ig_last_error());
                goto done;
            }
            ig_token_list_free(&in);
            in.ids = x;
            in.n = in.cap = nx;
        }
    }
    if (o.cp.n_ctx == 0) {
        /* Room for the prompt and the answer, within the trained context. */
        const ig_hparams *hp = ig_model_hparams(m);
        long want = (long)in.n + (o.n_predict >= 0 ? o.n_predict : 4096);
        long train = hp->n_ctx_train > 0 ? hp->n_ctx_train : 8192;
        o.cp.n_ctx = (int)(want < train ? (want > 4096 ? want : IG_MIN(4096, train)) : train);
    }
    if (ig_context_create(m, &o.cp, &ctx) != IG_OK) {
        fprintf(stderr, "ignis run: %s\n", ig_last_error());
        goto done;
    }
    if (gen_options_grammar(&o, &grammar) != 0) {
        rc = 2;
        goto done;
    }
    if (grammar && (!tok || ig_token_trie_create(tok, ig_model_hparams(m)->n_vocab_real, &trie) != IG_OK)) {
        fprintf(stderr, "ignis run: a grammar needs the model's tokenizer: %s\n", ig_last_error());
        goto done;
    }
    if (spec_options_setup("ignis run", o.draft, o.lookup, &o.spec, m, &o.mp, o.cp.n_ctx, 1, &draft_m,
                           &spec))
        goto done;
    signal(SIGINT, on_sigint);
    ig_gen_params gp = {
        .grammar = grammar,
        .trie = trie,
        .n_predict = o.n_predict,
        .sampling = o.sp,
        .stop = o.stop,
        .n_stop = o.n_stop,
        .interrupt = &g_interrupt,
        .spec = spec,
    };
    ig_gen_io io = {.emit = print_ids ? NULL : emit_stdout, .on_token = ig_token_list_collect, .user = &out};
    ig_gen_stats stats;
    int n_history = 0;
    if (n_images) {
        /* The prompt but its last token, with the images, then generation
         * reuses it as the sequence's history. */
        if (in.n < 2 || in.ids[in.n - 1] == ig_model_image_token_id(m)) {
            fprintf(stderr, "ignis run: the prompt must not end with an image\n");
            goto done;
        }
        if (ig_decode_prompt_images(ctx, 0, in.ids, in.n - 1, (const float *const *)embd, n_images) != IG_OK) {
            fprintf(stderr, "ignis run: %s\n", ig_last_error());
            goto done;
        }
        n_history = in.n - 1;
    }
    ig_status st = ig_generate(ctx, 0, tok, in.ids, in.n, n_history ? in.ids : NULL, n_history, &gp, &io, &stats);
    if (st != IG_OK) {
        fprintf(stderr, "\nignis run: %s\n", ig_last_error());
        goto done;
    }
    if (out.oom) {
        fprintf(stderr, "ignis run: out of memory\n");
        goto done;
    }
    if (print_ids) {
        for (int i = 0; i < out.n; i++) printf("%s%d", i ? "," : "", out.ids[i]);
    }
    printf("\n");
    fflush(stdout);
    /* Why generation ended: the token that ended it, a stop string, -n (or a
     * full context), or Ctrl-C. */
    char why[96];
    if (stats.finish == IG_FINISH_STOP && stats.stop_token >= 0) {
        const ig_hparams *hp = ig_model_hparams(m);
        snprintf(why, sizeof why, "stopped at %s (id %d)",
                 stats.stop_token == hp->eot_id ? "<end_of_turn>" : "<eos>", (int)stats.stop_token);
    } else if (stats.finish == IG_FINISH_STOP && grammar) {
        snprintf(why, sizeof why, "stopped: the grammar is complete");
    } else if (stats.finish == IG_FINISH_STOP) {
        snprintf(why, sizeof why, "stopped at a stop string");
    } else if (stats.finish == IG_FINISH_INTERRUPT) {
        snprintf(why, sizeof why, "interrupted");
    } else {
        snprintf(why, sizeof why, "stopped at the length limit");
    }
    fprintf(stderr, "\nprompt: %d tokens in %.2f s (%.1f tokens/s); generation: %d tokens in %.2f s (%.1f tokens/s); %s\n",
            stats.n_prompt, stats.t_prompt, stats.t_prompt > 0 ? stats.n_prompt / stats.t_prompt : 0.0,
            stats.n_generated, stats.t_generate,
            stats.t_generate > 0 ? stats.n_generated / stats.t_generate : 0.0, why);
    if (spec)
        fprintf(stderr, "speculative: %d drafted, %d accepted (%.0f%%), %.2f tokens per target step\n",
                stats.n_drafted, stats.n_accepted,
                stats.n_drafted ? 100.0 * stats.n_accepted / stats.n_drafted : 0.0,
                stats.n_steps ? (double)stats.n_generated / (stats.n_steps + 1) : 0.0);
    ig_device_stats dev;
    cli_print_memory(ig_context_device_stats(ctx, &dev) == IG_OK ? &dev : NULL);
    rc = 0;
done:
    ig_grammar_free(grammar);
    ig_token_trie_free(trie);
    ig_spec_free(spec);
    ig_model_free(draft_m);
    ig_context_free(ctx);
    ig_model_free(m);
    ig_token_list_free(&in);
    ig_token_list_free(&out);
    free(rendered);
    free(owned_prompt);
    free(user_text);
    cli_free_images(embd, n_images);
    return rc;
}
