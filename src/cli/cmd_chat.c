/* ignis chat [MODEL]: an interactive multi-turn conversation. Each turn
 * re-renders the whole conversation with the chat template; the generation
 * loop reuses the prefix the KV cache already holds, so only the new turn is
 * evaluated. Ctrl-C stops the current answer, Ctrl-D (end of input) quits. */
#include "cli.h"
#include "gen_options.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_interrupt;
static void on_sigint(int sig) {
    (void)sig;
    g_interrupt = 1;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ignis chat [MODEL] [options]\n"
               "Type a message and press Enter. Ctrl-C stops the current answer, Ctrl-D quits.\n"
               "Commands: /reset starts over, /quit quits.\n");
    gen_options_help(f);
}

typedef struct answer {
    char *text;
    size_t len, cap;
    ig_token_list ids;
} answer;

static bool emit(void *user, const char *text, size_t len) {
    answer *a = user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (a->len + len + 1 > a->cap) {
        size_t cap = (a->len + len + 1) * 2;
        char *p = realloc(a->text, cap);
        if (!p) return false;
        a->text = p;
        a->cap = cap;
    }
    memcpy(a->text + a->len, text, len);
    a->len += len;
    a->text[a->len] = '\0';
    return true;
}

static void on_token(void *user, int32_t id) { ig_token_list_push(&((answer *)user)->ids, id); }

typedef struct conversation {
    ig_chat_message *msgs;
    char **owned;
    size_t n, cap;
} conversation;

static int conv_add(conversation *c, const char *role, const char *text) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        ig_chat_message *m = realloc(c->msgs, sizeof *m * cap);
        if (!m) return -1;
        c->msgs = m;
        char **o = realloc(c->owned, sizeof *o * cap);
        if (!o) return -1;
        c->owned = o;
        c->cap = cap;
    }
    char *copy = strdup(text);
    if (!copy) return -1;
    c->owned[c->n] = copy;
    c->msgs[c->n].role = role;
    c->msgs[c->n].content = copy;
    c->n++;
    return 0;
}

static void conv_truncate(conversation *c, size_t n) {
    while (c->n > n) free(c->owned[--c->n]);
}

int cmd_chat(int argc, char **argv) {
    gen_options o;
    gen_options_init(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = gen_options_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ignis chat: unknown or incomplete option %s\n", a);
            usage(stderr);
            return 2;
        } else if (!o.model) {
            o.model = a;
        } else {
            fprintf(stderr, "ignis chat: unexpected argument %s\n", a);
            return 2;
        }
    }
    gen_options_finish(&o);
    ig_model *m = cli_load_model(o.model, &o.mp);
    if (!m) return 1;
    const ig_tokenizer *tok = ig_model_tokenizer(m);
    int rc = 1;
    ig_context *ctx = NULL;
    ig_model *draft_m = NULL;
    ig_spec *spec = NULL;
    conversation conv = {0};
    int32_t *history = NULL;
    int n_history = 0;
    char *line = NULL;
    size_t line_cap = 0;
    if (!tok) {
        fprintf(stderr, "ignis chat: this model has no tokenizer\n");
        goto done;
    }
    /* A base model was never taught the turn format: it continues the
     * rendered conversation as text, which reads as nonsense. Say so. */
    if (!ig_model_chat_template(m))
        fprintf(stderr, "ignis chat: note: this model carries no chat template, so it is probably a base\n"
                        "  model that continues text rather than answering; use an instruction-tuned\n"
                        "  (-it) model to chat, or `ignis run` for completions\n");
    if (o.cp.n_ctx == 0) {
        int train = ig_model_hparams(m)->n_ctx_train;
        o.cp.n_ctx = train > 0 && train < 8192 ? train : 8192;
    }
    if (ig_context_create(m, &o.cp, &ctx) != IG_OK) {
        fprintf(stderr, "ignis chat: %s\n", ig_last_error());
        goto done;
    }
    if (spec_options_setup("ignis chat", o.draft, o.lookup, &o.spec, m, &o.mp, o.cp.n_ctx, 1, &draft_m,
                           &spec))
        goto done;
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: Ctrl-C at the prompt interrupts getline */
    bool tty = isatty(STDIN_FILENO);
    if (o.system && conv_add(&conv, "system", o.system)) goto oom;
    if (tty) fprintf(stderr, "ignis chat — Ctrl-C stops an answer, Ctrl-D quits, /reset starts over.\n");
    for (;;) {
        if (tty) {
            fputs("\n> ", stdout);
            fflush(stdout);
        }
        g_interrupt = 0;
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) {
            if (g_interrupt && !feof(stdin)) {
                clearerr(stdin);
                continue; /* Ctrl-C at the prompt: a fresh prompt */
            }
            break; /* Ctrl-D or end of the pipe */
        }
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if (got == 0) continue;
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            conv_truncate(&conv, o.system ? 1 : 0);
            ig_seq_clear(ctx, 0);
            n_history = 0;
            continue;
        }
        size_t before = conv.n;
        if (conv_add(&conv, "user", line)) goto oom;
        char *text = NULL;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (ig_chat_render(conv.msgs, conv.n, true, &text) != IG_OK ||
            ig_tokenize(tok, text, strlen(text), false, true, &ids, &n_ids) != IG_OK) {
            fprintf(stderr, "ignis chat: %s\n", ig_last_error());
            free(text);
            conv_truncate(&conv, before);
            continue;
        }
        free(text);
        answer ans = {0};
        ig_gen_params gp = {
            .n_predict = o.n_predict,
            .sampling = o.sp,
            .stop = o.stop,
            .n_stop = o.n_stop,
            .interrupt = &g_interrupt,
            .spec = spec,
        };
        ig_gen_io io = {.emit = emit, .on_token = on_token, .user = &ans};
        ig_gen_stats stats;
        ig_status st = ig_generate(ctx, 0, tok, ids, (int)n_ids, history, n_history, &gp, &io, &stats);
        fputs("\n", stdout);
        fflush(stdout);
        if (st != IG_OK) {
            fprintf(stderr, "ignis chat: %s\n", ig_last_error());
            conv_truncate(&conv, before);
            ig_seq_clear(ctx, 0);
            n_history = 0;
            free(ids);
            free(ans.text);
            ig_token_list_free(&ans.ids);
            if (st == IG_ERR_CONTEXT_FULL) {
                fprintf(stderr, "(the conversation no longer fits the context: use /reset)\n");
                continue;
            }
            continue;
        }
        if (stats.finish == IG_FINISH_INTERRUPT) fprintf(stderr, "[stopped]\n");
        /* What the cache now holds: the prompt, then the generated ids. */
        int32_t *h = realloc(history, sizeof *h * (n_ids + (size_t)ans.ids.n));
        if (!h || ans.ids.oom) {
            if (h) history = h;
            free(ids);
            free(ans.text);
            ig_token_list_free(&ans.ids);
            goto oom;
        }
        history = h;
        memcpy(history, ids, sizeof *ids * n_ids);
        if (ans.ids.n) memcpy(history + n_ids, ans.ids.ids, sizeof *ids * (size_t)ans.ids.n);
        n_history = (int)n_ids + ans.ids.n;
        if (n_history > ig_seq_len(ctx, 0)) n_history = ig_seq_len(ctx, 0);
        if (conv_add(&conv, "assistant", ans.text ? ans.text : "")) goto oom;
        fprintf(stderr, "[%d prompt tokens (%d reused), %d generated, %.1f tokens/s]\n",
                    stats.n_prompt, stats.n_reused, stats.n_generated,
                    stats.t_generate > 0 ? stats.n_generated / stats.t_generate : 0.0);
        free(ids);
        free(ans.text);
        ig_token_list_free(&ans.ids);
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "ignis chat: out of memory\n");
done:
    conv_truncate(&conv, 0);
    free(conv.msgs);
    free(conv.owned);
    free(history);
    free(line);
    ig_spec_free(spec);
    ig_model_free(draft_m);
    ig_context_free(ctx);
    ig_model_free(m);
    return rc;
}
