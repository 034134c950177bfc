/* The generation loop on a tiny fixture model (no tokenizer: ids only):
 * greedy output equals transformers' generate(), end-of-turn stops, -n and a
 * full context end with "length", and a prompt that does not fit is refused. */
#include "test.h"

#include "gen/generate.h"
#include "model/model.h"

#include <jansson.h>
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
