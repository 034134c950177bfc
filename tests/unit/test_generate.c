/* Generation. The loop on a tiny fixture model (no tokenizer: ids only):
 * greedy output equals transformers' generate(), end-of-turn stops, -n and a
 * full context end with "length", and a prompt that does not fit is refused.
 * The per-sequence step on a tiny in-memory tokenizer and hand-made logits:
 * stop strings and UTF-8 split across tokens, logprobs released with their
 * text, finish reasons; stop-string scanning; prefix reuse decisions. */
#include "test.h"

#include "gen/generate.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct ids {
    int32_t v[256];
    int n;
} ids;

static void collect(void *user, int32_t id) {
    ids *l = user;
    if (l->n < 256) l->v[l->n++] = id;
}

static ig_model *tiny(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/hf/%s/f32", ig_test_fixtures(), name);
    ig_model *m = NULL;
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 2;
    return ig_model_load(path, &mp, &m) == IG_OK ? m : NULL;
}

static int greedy_reference(const char *name, ids *prompt, ids *out) {
    char path[1024];
    snprintf(path, sizeof path, "%s/hf/%s/reference.json", ig_test_fixtures(), name);
    json_t *root = json_load_file(path, 0, NULL);
    if (!root) return -1;
    json_t *g = json_object_get(root, "greedy");
    json_t *p = json_object_get(g, "prompt"), *o = json_object_get(g, "output");
    prompt->n = (int)json_array_size(p);
    out->n = (int)json_array_size(o) - prompt->n; /* output repeats the prompt */
    for (int i = 0; i < prompt->n; i++) prompt->v[i] = (int32_t)json_integer_value(json_array_get(p, (size_t)i));
    for (int i = 0; i < out->n; i++)
        out->v[i] = (int32_t)json_integer_value(json_array_get(o, (size_t)(prompt->n + i)));
    json_decref(root);
    return 0;
}

static ig_status generate(ig_model *m, int n_ctx, const ids *prompt, int n_predict, ids *out,
                          ig_gen_stats *stats) {
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 4; /* prompt in several chunks */
    cp.kv_type = IG_KV_F32;
    ig_context *ctx = NULL;
    ig_status st = ig_context_create(m, &cp, &ctx);
    if (st != IG_OK) return st;
    ig_gen_params gp = {.n_predict = n_predict, .sampling = ig_sampler_default_params()};
    gp.sampling.temperature = 0;
    ig_gen_io io = {.on_token = collect, .user = out};
    out->n = 0;
    st = ig_generate(ctx, 0, NULL, prompt->v, prompt->n, NULL, 0, &gp, &io, stats);
    ig_context_free(ctx);
    return st;
}

IG_TEST(generate_greedy_matches_transformers) {
    const char *names[] = {"tiny-1b-like", "tiny-27b-like"};
    for (int k = 0; k < 2; k++) {
        ids prompt, want, got;
        REQUIRE(greedy_reference(names[k], &prompt, &want) == 0);
        ig_model *m = tiny(names[k]);
        REQUIRE(m);
        m->hp.eot_id = m->hp.eos_id = -1; /* transformers generated max_new_tokens */
        ig_gen_stats st;
        REQUIRE_OK(generate(m, 64, &prompt, want.n, &got, &st));
        CHECK_EQ_INT(got.n, want.n);
        for (int i = 0; i < got.n && i < want.n; i++) CHECK_EQ_INT(got.v[i], want.v[i]);
        CHECK_EQ_INT(st.finish, IG_FINISH_LENGTH);
        CHECK_EQ_INT(st.n_prompt, prompt.n);
        ig_model_free(m);
    }
}

IG_TEST(generate_stops_at_end_of_turn) {
    ids prompt, want, got;
    REQUIRE(greedy_reference("tiny-1b-like", &prompt, &want) == 0);
    REQUIRE(want.n > 3);
    ig_model *m = tiny("tiny-1b-like");
    REQUIRE(m);
    m->hp.eos_id = -1;
    m->hp.eot_id = want.v[2]; /* the third greedy token ends the turn */
    ig_gen_stats st;
    REQUIRE_OK(generate(m, 64, &prompt, 20, &got, &st));
    int first = 0;
    while (first < want.n && want.v[first] != want.v[2]) first++;
    CHECK_EQ_INT(got.n, first); /* stops before emitting the end token */
    CHECK_EQ_INT(st.finish, IG_FINISH_STOP);
    ig_model_free(m);
}

IG_TEST(generate_context_limits) {
    ids prompt, want, got;
    REQUIRE(greedy_reference("tiny-27b-like", &prompt, &want) == 0);
    ig_model *m = tiny("tiny-27b-like");
    REQUIRE(m);
    m->hp.eot_id = m->hp.eos_id = -1;
    ig_gen_stats st;
    /* n_predict unlimited: generation ends when the context is full. */
    REQUIRE_OK(generate(m, prompt.n + 3, &prompt, -1, &got, &st));
    CHECK_EQ_INT(st.finish, IG_FINISH_LENGTH);
    CHECK_EQ_INT(got.n, 4); /* 3 fed back + the last one sampled from a full context */
    for (int i = 0; i < got.n; i++) CHECK_EQ_INT(got.v[i], want.v[i]);
    /* A prompt that does not leave room for one new token is refused. */
    CHECK_STATUS(generate(m, prompt.n, &prompt, 4, &got, &st), IG_ERR_CONTEXT_FULL);
    ig_model_free(m);
}

/* ---- stop strings -------------------------------------------------------- */

IG_TEST(generate_stop_scan_match_and_holdback) {
    const char *stops[] = {"###", "\n\nUser:"};
    bool m;
    /* no stop anywhere, nothing resembling one: release everything */
    CHECK_EQ_INT(ig_gen_stop_scan("hello", 5, stops, 2, &m), 5);
    CHECK(!m);
    /* full match: release up to it */
    CHECK_EQ_INT(ig_gen_stop_scan("ab###cd", 7, stops, 2, &m), 2);
    CHECK(m);
    /* partial match at the end is held back */
    CHECK_EQ_INT(ig_gen_stop_scan("ab##", 4, stops, 2, &m), 2);
    CHECK(!m);
    CHECK_EQ_INT(ig_gen_stop_scan("ab#", 3, stops, 2, &m), 2);
    CHECK_EQ_INT(ig_gen_stop_scan("x\n\nUs", 5, stops, 2, &m), 1);
    CHECK(!m);
    /* a '#' that cannot start a match once followed by something else */
    CHECK_EQ_INT(ig_gen_stop_scan("a#b", 3, stops, 2, &m), 3);
    /* earliest of two matches wins */
    CHECK_EQ_INT(ig_gen_stop_scan("z\n\nUser: ###", 12, stops, 2, &m), 1);
    CHECK(m);
    /* match at the very start */
    CHECK_EQ_INT(ig_gen_stop_scan("###", 3, stops, 2, &m), 0);
    CHECK(m);
    /* no stops: everything */
    CHECK_EQ_INT(ig_gen_stop_scan("abc", 3, NULL, 0, &m), 3);
    CHECK(!m);
    /* empty stop strings are ignored */
    const char *empty[] = {""};
    CHECK_EQ_INT(ig_gen_stop_scan("abc", 3, empty, 1, &m), 3);
    CHECK(!m);
}

IG_TEST(generate_stop_scan_utf8_holdback_on_char_boundary) {
    const char *stops[] = {"\xc3\xa9t\xc3\xa9"}; /* "été" */
    bool m;
    /* "caf" + "é" : the é could begin "été" */
    CHECK_EQ_INT(ig_gen_stop_scan("caf\xc3\xa9", 5, stops, 1, &m), 3);
    CHECK(!m);
    CHECK_EQ_INT(ig_gen_stop_scan("un \xc3\xa9t\xc3\xa9 chaud", 14, stops, 1, &m), 3);
    CHECK(m);
}

/* Simulates streaming: text arrives in pieces; what is released plus the
 * final flush equals the text up to the first stop string. */
IG_TEST(generate_stop_scan_streaming_simulation) {
    const char *pieces[] = {"The answer", " is 4", "2.\n", "\nUs", "er: more", " text"};
    const char *stops[] = {"\n\nUser:"};
    char pend[256] = "", out[256] = "";
    size_t plen = 0, olen = 0;
    bool stopped = false;
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0] && !stopped; i++) {
        size_t n = strlen(pieces[i]);
        memcpy(pend + plen, pieces[i], n);
        plen += n;
        bool m;
        size_t rel = ig_gen_stop_scan(pend, plen, stops, 1, &m);
        memcpy(out + olen, pend, rel);
        olen += rel;
        if (m) stopped = true;
        memmove(pend, pend + rel, plen - rel);
        plen -= rel;
    }
    out[olen] = '\0';
    CHECK(stopped);
    CHECK(!strcmp(out, "The answer is 42."));
}

/* ---- the per-sequence step ------------------------------------------------ */

enum {
    T_BOS, T_UNK, T_END, T_HELLO, T_WORLD, T_HASH2, T_HASH, T_C3, T_A9, T_X, T_SPACE, T_AB,
    N_TINY
};

/* Pieces: "Hello", "\u2581world" (" world"), "##", "#", byte pieces 0xC3 and
 * 0xA9 (together "\u00e9"), "x", "\u2581", "ab"; <bos> and <end> control. */
static ig_tokenizer *tiny_tok(void) {
    const char *json =
        "{\"added_tokens\": [{\"id\": 0, \"content\": \"<bos>\", \"special\": true},"
        " {\"id\": 2, \"content\": \"<end>\", \"special\": true}],"
        " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\","
        " \"vocab\": {\"<bos>\": 0, \"<unk>\": 1, \"<end>\": 2, \"Hello\": 3,"
        " \"\xE2\x96\x81world\": 4, \"##\": 5, \"#\": 6, \"<0xC3>\": 7, \"<0xA9>\": 8, \"x\": 9,"
        " \"\xE2\x96\x81\": 10, \"ab\": 11}, \"merges\": []}}";
    ig_tokenizer *t = NULL;
    return ig_tokenizer_from_hf_json_buf(json, strlen(json), &t) == IG_OK ? t : NULL;
}

/* Greedy parameters over the tiny vocabulary, <end> as the stop id. */
static ig_gen_seq_params tiny_params(const ig_tokenizer *tok, const char *const *stop,
                                     size_t n_stop) {
    static const int32_t stop_ids[] = {-1, T_END};
    ig_gen_seq_params p = {.sampling = ig_sampler_default_params(), .n_vocab = N_TINY, .tok = tok};
    p.sampling.temperature = 0;
    p.stop_ids = stop_ids;
    p.n_stop_ids = 2;
    p.stop = stop;
    p.n_stop = n_stop;
    p.max_tokens = -1;
    return p;
}

/* Logits that make greedy sampling pick id. */
static const float *pick(int32_t id) {
    static float l[N_TINY];
    for (int i = 0; i < N_TINY; i++) l[i] = 0;
    l[id] = 8;
    return l;
}

/* Steps through toks, collecting released text and logprob toks; returns the
 * finish reason of the last step. */
typedef struct run_out {
    char text[256];
    size_t n_text;
    int32_t lp_ids[64];
    size_t n_lps;
    int n_events;
} run_out;

static void collect_event(run_out *o, const ig_gen_event *ev) {
    if (ev->n_text && o->n_text + ev->n_text < sizeof o->text) {
        memcpy(o->text + o->n_text, ev->text, ev->n_text);
        o->n_text += ev->n_text;
        o->text[o->n_text] = '\0';
    }
    for (size_t i = 0; i < ev->n_lps && o->n_lps < 64; i++) o->lp_ids[o->n_lps++] = ev->lps[i].id;
    o->n_events++;
}

static ig_finish run_ids(ig_gen_seq *s, const int32_t *toks, int n, run_out *o) {
    memset(o, 0, sizeof *o);
    ig_gen_event ev = {0};
    for (int i = 0; i < n; i++) {
        if (ig_gen_seq_step(s, pick(toks[i]), &ev) != IG_OK) return (ig_finish)-1;
        if (ev.token != toks[i]) return (ig_finish)-2;
        collect_event(o, &ev);
        if (ev.finish != IG_FINISH_NONE) return ev.finish;
    }
    return IG_FINISH_NONE;
}

IG_TEST(generate_step_stop_string_split_across_tokens) {
    ig_tokenizer *tok = tiny_tok();
    REQUIRE(tok);
    const char *stop[] = {"###"};
    ig_gen_seq_params p = tiny_params(tok, stop, 1);
    p.logprobs = true;
    ig_gen_seq *s = NULL;
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    ig_gen_event ev;
    REQUIRE_OK(ig_gen_seq_step(s, pick(T_HELLO), &ev));
    CHECK_EQ_INT(ev.n_text, 5);
    CHECK(!memcmp(ev.text, "Hello", 5));
    CHECK_EQ_INT(ev.n_lps, 1);
    CHECK_EQ_INT(ev.finish, IG_FINISH_NONE);
    /* "##" may begin "###": held back, and its logprob with it */
    REQUIRE_OK(ig_gen_seq_step(s, pick(T_HASH2), &ev));
    CHECK_EQ_INT(ev.n_text, 0);
    CHECK_EQ_INT(ev.n_lps, 0);
    CHECK_EQ_INT(ev.finish, IG_FINISH_NONE);
    /* "#" completes it: nothing of it goes out, and no logprob of a token
     * that contributed no released text */
    REQUIRE_OK(ig_gen_seq_step(s, pick(T_HASH), &ev));
    CHECK_EQ_INT(ev.token, T_HASH);
    CHECK_EQ_INT(ev.n_text, 0);
    CHECK_EQ_INT(ev.n_lps, 0);
    CHECK_EQ_INT(ev.finish, IG_FINISH_STOP);
    CHECK_STATUS(ig_gen_seq_step(s, pick(T_X), &ev), IG_ERR_INVALID_ARG); /* it has ended */
    ig_gen_seq_free(s);

    /* held text that turns out not to be a stop string is released */
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    run_out o;
    const int32_t toks[] = {T_HASH2, T_X, T_HASH};
    CHECK_EQ_INT(run_ids(s, toks, 3, &o), IG_FINISH_NONE);
    CHECK(!strcmp(o.text, "##x"));        /* the last "#" is held */
    CHECK_EQ_INT(o.n_lps, 2);             /* "##" and "x", not "#" yet */
    REQUIRE_OK(ig_gen_seq_finish(s, IG_FINISH_INTERRUPT, &ev));
    CHECK_EQ_INT(ev.finish, IG_FINISH_INTERRUPT);
    CHECK_EQ_INT(ev.n_text, 1);
    CHECK(ev.text[0] == '#');
    CHECK_EQ_INT(ev.n_lps, 1);
    CHECK_EQ_INT(ev.lps[0].id, T_HASH);
    ig_gen_seq_free(s);
    ig_tokenizer_free(tok);
}

IG_TEST(generate_step_stop_string_cuts_mid_token) {
    ig_tokenizer *tok = tiny_tok();
    REQUIRE(tok);
    const char *stop[] = {"lo w"};
    ig_gen_seq_params p = tiny_params(tok, stop, 1);
    p.logprobs = true;
    ig_gen_seq *s = NULL;
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    run_out o;
    const int32_t toks[] = {T_HELLO, T_WORLD, T_X};
    CHECK_EQ_INT(run_ids(s, toks, 3, &o), IG_FINISH_STOP);
    CHECK_EQ_INT(o.n_events, 2);
    CHECK(!strcmp(o.text, "Hel"));
    /* "Hello" was cut through: its entry goes out with the cut text; " world"
     * contributed nothing that was released */
    CHECK_EQ_INT(o.n_lps, 1);
    CHECK_EQ_INT(o.lp_ids[0], T_HELLO);
    ig_gen_seq_free(s);
    ig_tokenizer_free(tok);
}

IG_TEST(generate_step_utf8_split_across_tokens) {
    ig_tokenizer *tok = tiny_tok();
    REQUIRE(tok);
    ig_gen_seq_params p = tiny_params(tok, NULL, 0);
    p.logprobs = true;
    ig_gen_seq *s = NULL;
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    ig_gen_event ev;
    /* the first byte of "\u00e9" is no character yet: no text */
    REQUIRE_OK(ig_gen_seq_step(s, pick(T_C3), &ev));
    CHECK_EQ_INT(ev.n_text, 0);
    CHECK_EQ_INT(ev.n_lps, 1); /* a token without text: its entry at once */
    REQUIRE_OK(ig_gen_seq_step(s, pick(T_A9), &ev));
    CHECK_EQ_INT(ev.n_text, 2);
    CHECK(!memcmp(ev.text, "\xc3\xa9", 2));
    CHECK_EQ_INT(ev.n_lps, 1);
    CHECK_EQ_INT(ev.lps[0].id, T_A9);
    /* a dangling first byte at a stop id comes out as U+FFFD */
    REQUIRE_OK(ig_gen_seq_step(s, pick(T_C3), &ev));
    CHECK_EQ_INT(ev.n_text, 0);
    REQUIRE_OK(ig_gen_seq_step(s, pick(T_END), &ev));
    CHECK(ev.stop_token);
    CHECK_EQ_INT(ev.token, T_END);
    CHECK_EQ_INT(ev.finish, IG_FINISH_STOP);
    CHECK_EQ_INT(ev.n_text, 3);
    CHECK(!memcmp(ev.text, "\xef\xbf\xbd", 3));
    CHECK_EQ_INT(ev.n_lps, 0); /* a stop id has no entry */
    ig_gen_seq_free(s);

    /* the same split under a stop string starting with the character */
    const char *stop[] = {"\xc3\xa9x"};
    p = tiny_params(tok, stop, 1);
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    run_out o;
    const int32_t toks[] = {T_HELLO, T_C3, T_A9, T_AB};
    CHECK_EQ_INT(run_ids(s, toks, 4, &o), IG_FINISH_NONE);
    CHECK(!strcmp(o.text, "Hello\xc3\xa9" "ab"));
    ig_gen_seq_free(s);
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    const int32_t toks2[] = {T_HELLO, T_C3, T_A9, T_X};
    CHECK_EQ_INT(run_ids(s, toks2, 4, &o), IG_FINISH_STOP);
    CHECK(!strcmp(o.text, "Hello"));
    ig_gen_seq_free(s);
    ig_tokenizer_free(tok);
}

IG_TEST(generate_step_length_flushes_held_text) {
    ig_tokenizer *tok = tiny_tok();
    REQUIRE(tok);
    const char *stop[] = {"###"};
    ig_gen_seq_params p = tiny_params(tok, stop, 1);
    p.logprobs = true;
    p.max_tokens = 2;
    ig_gen_seq *s = NULL;
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    run_out o;
    const int32_t toks[] = {T_HELLO, T_HASH2, T_X};
    CHECK_EQ_INT(run_ids(s, toks, 3, &o), IG_FINISH_LENGTH);
    CHECK_EQ_INT(o.n_events, 2);
    CHECK(!strcmp(o.text, "Hello##"));
    CHECK_EQ_INT(o.n_lps, 2);
    ig_gen_seq_free(s);

    /* a full context: the k-th token finds n_prompt + k - 1 positions held */
    p = tiny_params(tok, NULL, 0);
    p.n_prompt = 5;
    p.n_ctx = 7;
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    const int32_t toks2[] = {T_X, T_AB, T_HELLO, T_X};
    CHECK_EQ_INT(run_ids(s, toks2, 4, &o), IG_FINISH_LENGTH);
    CHECK_EQ_INT(o.n_events, 3);
    CHECK(!strcmp(o.text, "xabHello"));
    CHECK_EQ_INT(o.n_lps, 0); /* none asked for */
    ig_gen_seq_free(s);

    /* no tokenizer: toks only, stop strings never match */
    p = tiny_params(NULL, stop, 1);
    p.max_tokens = 3;
    p.logprobs = true;
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    const int32_t toks3[] = {T_HASH, T_HASH, T_HASH, T_X};
    CHECK_EQ_INT(run_ids(s, toks3, 4, &o), IG_FINISH_LENGTH);
    CHECK_EQ_INT(o.n_events, 3);
    CHECK_EQ_INT(o.n_text, 0);
    CHECK_EQ_INT(o.n_lps, 3);
    ig_gen_seq_free(s);
    ig_tokenizer_free(tok);
}

IG_TEST(generate_step_logprobs_and_top) {
    ig_gen_seq_params p = tiny_params(NULL, NULL, 0);
    p.logprobs = true;
    p.top_logprobs = 3;
    ig_gen_seq *s = NULL;
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    float l[N_TINY] = {0};
    l[T_AB] = 3;
    l[T_X] = 2;
    l[T_HASH] = 2; /* ties with x: the lower id first */
    float want[N_TINY];
    ig_sampler *ref = NULL;
    REQUIRE_OK(ig_sampler_create(&p.sampling, N_TINY, &ref));
    ig_sampler_logprobs(ref, l, want);
    ig_sampler_free(ref);
    ig_gen_event ev;
    REQUIRE_OK(ig_gen_seq_step(s, l, &ev));
    CHECK_EQ_INT(ev.token, T_AB);
    REQUIRE(ev.n_lps == 1);
    CHECK_EQ_INT(ev.lps[0].id, T_AB);
    CHECK_NEAR(ev.lps[0].logprob, want[T_AB], 1e-6);
    CHECK(ev.lps[0].logprob < -0.1f); /* not certainty: the others have mass */
    REQUIRE(ev.lps[0].n_top == 3);
    CHECK_EQ_INT(ev.lps[0].top[0].id, T_AB);
    CHECK_EQ_INT(ev.lps[0].top[1].id, T_HASH);
    CHECK_EQ_INT(ev.lps[0].top[2].id, T_X);
    CHECK_NEAR(ev.lps[0].top[1].logprob, want[T_X], 1e-6);
    ig_gen_seq_free(s);

    /* more alternatives than allowed are clamped */
    p.top_logprobs = 1000;
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    REQUIRE_OK(ig_gen_seq_step(s, l, &ev));
    REQUIRE(ev.n_lps == 1);
    CHECK_EQ_INT(ev.lps[0].n_top, N_TINY); /* every token, fewer than the cap */
    ig_gen_seq_free(s);
}

IG_TEST(generate_step_seeded_streams_are_per_sequence) {
    ig_gen_seq_params p = tiny_params(NULL, NULL, 0);
    p.sampling.temperature = 1;
    p.sampling.top_k = 0;
    p.sampling.top_p = 1;
    p.sampling.seed = 1234;
    p.stop_ids = NULL;
    p.n_stop_ids = 0;
    ig_gen_seq *a = NULL, *b = NULL, *c = NULL;
    REQUIRE_OK(ig_gen_seq_create(&p, &a));
    REQUIRE_OK(ig_gen_seq_create(&p, &b));
    p.sampling.seed = 1235;
    REQUIRE_OK(ig_gen_seq_create(&p, &c));
    float flat[N_TINY] = {0};
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < 32; i++) {
        ig_gen_event ea, eb, ec;
        /* interleaved: one sequence's draws do not move another's stream */
        REQUIRE_OK(ig_gen_seq_step(a, flat, &ea));
        REQUIRE_OK(ig_gen_seq_step(c, flat, &ec));
        REQUIRE_OK(ig_gen_seq_step(b, flat, &eb));
        same_ab += ea.token == eb.token;
        same_ac += ea.token == ec.token;
    }
    CHECK_EQ_INT(same_ab, 32);
    CHECK(same_ac < 16);
    ig_gen_seq_free(a);
    ig_gen_seq_free(b);
    ig_gen_seq_free(c);
}

IG_TEST(generate_token_bytes_of_pieces) {
    ig_tokenizer *tok = tiny_tok();
    REQUIRE(tok);
    char b[16];
    CHECK_EQ_INT(ig_token_bytes(tok, T_C3, false, b, sizeof b), 1);
    CHECK((unsigned char)b[0] == 0xC3);
    CHECK_EQ_INT(ig_token_bytes(tok, T_WORLD, false, b, sizeof b), 6);
    CHECK(!memcmp(b, " world", 6));
    CHECK_EQ_INT(ig_token_bytes(tok, T_SPACE, false, b, sizeof b), 1);
    CHECK(b[0] == ' ');
    /* control pieces: nothing, or their text when rendered */
    CHECK_EQ_INT(ig_token_bytes(tok, T_END, false, b, sizeof b), 0);
    CHECK_EQ_INT(ig_token_bytes(tok, T_END, true, b, sizeof b), 5);
    CHECK(!memcmp(b, "<end>", 5));
    /* capacity is respected but the full size is reported */
    memset(b, 0, sizeof b);
    CHECK_EQ_INT(ig_token_bytes(tok, T_WORLD, false, b, 2), 6);
    CHECK(!memcmp(b, " w\0", 3));
    CHECK_EQ_INT(ig_token_bytes(tok, N_TINY, true, b, sizeof b), 0);
    CHECK_EQ_INT(ig_token_bytes(tok, -1, true, b, sizeof b), 0);
    ig_tokenizer_free(tok);
}

/* ---- prefix reuse --------------------------------------------------------- */

IG_TEST(generate_prefix_len_decisions) {
    const int32_t cached[] = {1, 2, 3, 4, 5};
    const int32_t same[] = {1, 2, 3, 4, 5};
    const int32_t longer[] = {1, 2, 3, 4, 5, 6, 7};
    const int32_t diverge[] = {1, 2, 9, 4, 5};
    /* the whole prompt is cached: one token is left to feed */
    CHECK_EQ_INT(ig_gen_prefix_len(cached, 5, same, 5), 4);
    CHECK_EQ_INT(ig_gen_prefix_len(cached, 5, same, 3), 2);
    /* the prompt extends the cache: all of it is kept */
    CHECK_EQ_INT(ig_gen_prefix_len(cached, 5, longer, 7), 5);
    CHECK_EQ_INT(ig_gen_prefix_len(cached, 5, diverge, 5), 2);
    CHECK_EQ_INT(ig_gen_prefix_len(cached, 5, same, 1), 0);
    CHECK_EQ_INT(ig_gen_prefix_len(NULL, 0, same, 5), 0);
    CHECK_EQ_INT(ig_gen_common_prefix(cached, 5, longer, 7), 5);
    CHECK_EQ_INT(ig_gen_common_prefix(cached, 5, diverge, 5), 2);
    CHECK_EQ_INT(ig_gen_common_prefix(cached, 0, same, 5), 0);
}

/* Feeds toks[0..n) to sequence 0 from position 0. */
static ig_status feed(ig_context *ctx, const int32_t *toks, int n) {
    for (int i = 0; i < n; i += 4) {
        int32_t pos[4], seq[4] = {0};
        int k = n - i < 4 ? n - i : 4;
        for (int q = 0; q < k; q++) pos[q] = i + q;
        ig_batch b = {k, toks + i, pos, seq, NULL};
        ig_status st = ig_decode(ctx, &b);
        if (st != IG_OK) return st;
    }
    return IG_OK;
}

IG_TEST(generate_prefix_keep_truncates_or_clears) {
    ig_model *m = tiny("tiny-1b-like"); /* sliding window 16 */
    REQUIRE(m);
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 4;
    cp.kv_type = IG_KV_F32;
    ig_context *ctx = NULL;
    REQUIRE_OK(ig_context_create(m, &cp, &ctx));
    int32_t toks[40], other[40];
    for (int i = 0; i < 40; i++) toks[i] = other[i] = 10 + i;
    REQUIRE_OK(feed(ctx, toks, 12));
    /* a prompt sharing 8 tokens: truncated to them */
    other[8] = 300;
    CHECK_EQ_INT(ig_gen_prefix_keep(ctx, 0, toks, 12, other, 20), 8);
    CHECK_EQ_INT(ig_seq_len(ctx, 0), 8);
    /* the same prompt again: all but its last token */
    CHECK_EQ_INT(ig_gen_prefix_keep(ctx, 0, toks, 8, toks, 8), 7);
    CHECK_EQ_INT(ig_seq_len(ctx, 0), 7);
    /* cached toks that do not match what the sequence holds are not trusted */
    CHECK_EQ_INT(ig_gen_prefix_keep(ctx, 0, toks, 5, toks, 20), 0);
    CHECK_EQ_INT(ig_seq_len(ctx, 0), 0);
    /* nothing in common: cleared */
    REQUIRE_OK(feed(ctx, toks, 12));
    other[0] = 301;
    CHECK_EQ_INT(ig_gen_prefix_keep(ctx, 0, toks, 12, other, 20), 0);
    CHECK_EQ_INT(ig_seq_len(ctx, 0), 0);
    /* 40 tokens overran the sliding-window ring: going back to position 5 is
     * refused, so the sequence is cleared; position 38 is still held */
    REQUIRE_OK(feed(ctx, toks, 40));
    int32_t back[40];
    memcpy(back, toks, sizeof back);
    back[5] = 302;
    CHECK_EQ_INT(ig_gen_prefix_keep(ctx, 0, toks, 40, back, 40), 0);
    CHECK_EQ_INT(ig_seq_len(ctx, 0), 0);
    REQUIRE_OK(feed(ctx, toks, 40));
    back[5] = toks[5];
    back[38] = 303;
    CHECK_EQ_INT(ig_gen_prefix_keep(ctx, 0, toks, 40, back, 40), 38);
    CHECK_EQ_INT(ig_seq_len(ctx, 0), 38);
    ig_context_free(ctx);
    ig_model_free(m);
}

/* ---- the loop on the real model ------------------------------------------- */

typedef struct loop_out {
    char text[4096];
    size_t n_text;
    int n_emits;
    int stop_after; /* emit answers false from this call on (0: never) */
    ig_token_list ids;
} loop_out;

static bool loop_emit(void *user, const char *text, size_t len) {
    loop_out *o = user;
    if (o->n_text + len < sizeof o->text) {
        memcpy(o->text + o->n_text, text, len);
        o->n_text += len;
        o->text[o->n_text] = '\0';
    }
    o->n_emits++;
    return !(o->stop_after && o->n_emits >= o->stop_after);
}

static void loop_token(void *user, int32_t id) { ig_token_list_push(&((loop_out *)user)->ids, id); }

static ig_status loop(ig_context *ctx, const ig_tokenizer *tok, const int32_t *prompt, int n_prompt,
                      const int32_t *hist, int n_hist, const char *stop, int n_predict,
                      loop_out *o, ig_gen_stats *st) {
    const char *stops[] = {stop};
    ig_gen_params gp = {.n_predict = n_predict, .sampling = ig_sampler_default_params(),
                        .stop = stops, .n_stop = stop ? 1 : 0};
    gp.sampling.temperature = 0;
    ig_gen_io io = {.emit = loop_emit, .on_token = loop_token, .user = o};
    return ig_generate(ctx, 0, tok, prompt, n_prompt, hist, n_hist, &gp, &io, st);
}

IG_TEST(generate_loop_text_stop_interrupt_and_reuse) {
    const char *path = ig_test_real_model();
    if (!path) {
        if (getenv("IGNIS_ALLOW_MISSING_MODEL")) ig_test_skip("real model not present");
        else ig_test_fail_at(__FILE__, __LINE__, "real model missing (set IGNIS_MODEL)");
        return;
    }
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 2;
    ig_model *m = NULL;
    REQUIRE_OK(ig_model_load(path, &mp, &m));
    const ig_tokenizer *tok = ig_model_tokenizer(m);
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 128;
    ig_context *ctx = NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    char *decoded = NULL;
    loop_out *o = calloc(1, sizeof *o);
    REQUIRE(o && tok);
    if (ig_context_create(m, &cp, &ctx) != IG_OK ||
        ig_tokenize(tok, "Once upon a time", 16, true, true, &prompt, &n_prompt) != IG_OK) {
        CHECK(!"setup failed");
        goto done;
    }
    /* the emitted text is the decoded ids; -n ends with "length" and leaves
     * the last token unfed */
    ig_gen_stats st;
    REQUIRE_OK(loop(ctx, tok, prompt, (int)n_prompt, NULL, 0, NULL, 16, o, &st));
    CHECK_EQ_INT(st.finish, IG_FINISH_LENGTH);
    CHECK_EQ_INT(st.n_generated, 16);
    CHECK_EQ_INT(o->ids.n, 16);
    CHECK_EQ_INT(ig_seq_len(ctx, 0), (int)n_prompt + 15);
    REQUIRE_OK(ig_detokenize(tok, o->ids.ids, (size_t)o->ids.n, false, &decoded));
    CHECK(!strcmp(o->text, decoded));
    REQUIRE(strlen(decoded) > 12);
    char full[4096];
    snprintf(full, sizeof full, "%s", decoded);

    /* a stop string inside a word cuts the same text */
    char stop[3] = {full[9], full[10], '\0'};
    const char *at = strstr(full, stop);
    REQUIRE(at);
    ig_token_list_free(&o->ids);
    memset(o, 0, sizeof *o);
    REQUIRE_OK(loop(ctx, tok, prompt, (int)n_prompt, NULL, 0, stop, 16, o, &st));
    CHECK_EQ_INT(st.finish, IG_FINISH_STOP);
    CHECK_EQ_INT(st.stop_token, -1);
    CHECK_EQ_INT(o->n_text, (size_t)(at - full));
    CHECK(!strncmp(o->text, full, (size_t)(at - full)));

    /* the same prompt with the history of what the sequence holds: all of
     * the prompt but its last token is reused (the text is not compared: a
     * prefix fed in other batch shapes may round differently) */
    int n_hist = ig_seq_len(ctx, 0);
    CHECK(n_hist >= (int)n_prompt);
    int32_t *hist = malloc(sizeof *hist * (n_prompt + (size_t)o->ids.n));
    REQUIRE(hist);
    memcpy(hist, prompt, sizeof *prompt * n_prompt);
    if (o->ids.n) memcpy(hist + n_prompt, o->ids.ids, sizeof *hist * (size_t)o->ids.n);
    ig_token_list_free(&o->ids);
    memset(o, 0, sizeof *o);
    ig_status s3 = loop(ctx, tok, prompt, (int)n_prompt, hist, n_hist, NULL, 4, o, &st);
    free(hist);
    REQUIRE_OK(s3);
    CHECK_EQ_INT(st.n_reused, (int)n_prompt - 1);
    CHECK_EQ_INT(st.n_prompt, 1);
    CHECK_EQ_INT(st.n_generated, 4);

    /* emit says stop at once: the loop ends ("interrupt") after one token */
    ig_token_list_free(&o->ids);
    memset(o, 0, sizeof *o);
    o->stop_after = 1;
    REQUIRE_OK(loop(ctx, tok, prompt, (int)n_prompt, NULL, 0, NULL, 16, o, &st));
    CHECK_EQ_INT(st.finish, IG_FINISH_INTERRUPT);
    CHECK_EQ_INT(st.n_reused, 0); /* no history given: the sequence was cleared */
    CHECK_EQ_INT(st.n_generated, 1);
    CHECK(o->n_text > 0 && !strncmp(o->text, full, o->n_text));
done:
    if (o) ig_token_list_free(&o->ids);
    free(o);
    free(decoded);
    free(prompt);
    ig_context_free(ctx);
    ig_model_free(m);
}
