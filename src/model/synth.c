/* Synthetic Gemma 3 GGUF files (see synth.h). */
#include "model/synth.h"
#include "core/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- sizes --------------------------------------------------------------- */

static const ig_synth_config k_configs[] = {
    /* size  label  H     F      L   nH  nKV hd   W     ctx     rope  qpas */
    {"270m", "270M", 640, 2048, 18, 4, 1, 256, 512, 32768, 1.0f, 256},
    {"1b", "1B", 1152, 6912, 26, 4, 1, 256, 512, 32768, 1.0f, 256},
    {"4b", "4B", 2560, 10240, 34, 8, 4, 256, 1024, 131072, 8.0f, 256},
    {"12b", "12B", 3840, 15360, 48, 16, 8, 256, 1024, 131072, 8.0f, 256},
    {"27b", "27B", 5376, 21504, 62, 32, 16, 128, 1024, 131072, 8.0f, 168},
};

const ig_synth_config *ig_synth_find_config(const char *size) {
    if (!size) return NULL;
    for (size_t i = 0; i < IG_ARRAY_LEN(k_configs); i++)
        if (!strcasecmp(size, k_configs[i].size)) return &k_configs[i];
    return NULL;
}

bool ig_synth_parse_ftype(const char *s, ig_synth_ftype *out) {
    if (!s || !out) return false;
    if (!strcasecmp(s, "f16")) *out = IG_SYNTH_F16;
    else if (!strcasecmp(s, "q8_0")) *out = IG_SYNTH_Q8_0;
    else if (!strcasecmp(s, "q4_k_m")) *out = IG_SYNTH_Q4_K_M;
    else return false;
    return true;
}

const char *ig_synth_ftype_name(ig_synth_ftype t) {
    switch (t) {
    case IG_SYNTH_F16: return "F16";
    case IG_SYNTH_Q8_0: return "Q8_0";
    case IG_SYNTH_Q4_K_M: return "Q4_K_M";
    }
    return "?";
}

uint32_t ig_synth_file_type(ig_synth_ftype t) {
    switch (t) {
    case IG_SYNTH_F16: return 1;     /* LLAMA_FTYPE_MOSTLY_F16 */
    case IG_SYNTH_Q8_0: return 7;    /* LLAMA_FTYPE_MOSTLY_Q8_0 */
    case IG_SYNTH_Q4_K_M: return 15; /* LLAMA_FTYPE_MOSTLY_Q4_K_M */
    }
    return 0;
}

/* llama.cpp's use_more_bits (integer arithmetic). */
static bool use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

ig_dtype ig_synth_tensor_type(ig_synth_ftype ftype, ig_synth_kind kind, int layer, int n_layer,
                              int64_t ne0) {
    if (kind == IG_SYNTH_NORM) return IG_TYPE_F32;
    if (ftype == IG_SYNTH_F16) return IG_TYPE_F16;
    if (ftype == IG_SYNTH_Q8_0) return IG_TYPE_Q8_0;
    ig_dtype t = IG_TYPE_Q4_K;
    if (kind == IG_SYNTH_TOKEN_EMBD) t = IG_TYPE_Q6_K;
    else if ((kind == IG_SYNTH_ATTN_V || kind == IG_SYNTH_FFN_DOWN) &&
             use_more_bits(layer, n_layer))
        t = IG_TYPE_Q6_K;
    if (ne0 % IG_QK_K != 0) t = t == IG_TYPE_Q6_K ? IG_TYPE_Q8_0 : IG_TYPE_Q5_0;
    return t;
}

/* ---- PRNG: splitmix64 seeding, xoshiro256** stream ------------------------ */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the tensor name */
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    uint64_t x = seed ^ h;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng *r) {
    uint64_t *s = r->s;
    const uint64_t out = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in [0, 1). */
static inline float rng_unif(rng *r) { return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f); }

/* N(0, 1) by table: g[k] is the normal quantile of (k + 0.5) / 65536, and
 * each value picks one of the 65536 with 16 random bits (|g| <= 4.33, mean
 * exactly 0: the table is symmetric). */
#define GAUSS_N 65536

static double norm_quantile(double p) {
    /* Abramowitz & Stegun 26.2.23 (error < 4.5e-4), then Newton on Phi. */
    double q = p < 0.5 ? p : 1.0 - p;
    double t = sqrt(-2.0 * log(q));
    double x = t - (2.515517 + 0.802853 * t + 0.010328 * t * t) /
                       (1.0 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t * t * t);
    if (p < 0.5) x = -x;
    for (int i = 0; i < 3; i++) {
        double phi = exp(-0.5 * x * x) * 0.3989422804014327;
        double cdf = 0.5 * erfc(-x * 0.7071067811865476);
        x -= (cdf - p) / phi;
    }
    return x;
}

static void gauss_table_init(float *g) {
    for (int k = 0; k < GAUSS_N / 2; k++) {
        float v = (float)norm_quantile(((double)k + 0.5) / GAUSS_N);
        g[k] = v;
        g[GAUSS_N - 1 - k] = -v;
    }
}

/* out[i] = mean + sd * N(0, 1), n values. */
static void gauss_fill(rng *r, const float *g, float *out, int64_t n, float mean, float sd) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint64_t u = rng_next(r);
        for (int k = 0; k < 4; k++) out[i + k] = mean + sd * g[(u >> (16 * k)) & 0xffff];
    }
    if (i < n) {
        uint64_t u = rng_next(r);
        for (int k = 0; i < n; i++, k++) out[i] = mean + sd * g[(u >> (16 * k)) & 0xffff];
    }
}

/* F16 values sd * N(0, 1) straight from a per-tensor table of the 65536
 * fp16 quantiles (the same numbers gauss_fill + ig_quantize_row give). */
static void gen_f16(rng *r, const uint16_t *h, uint8_t *dst, size_t n) {
    uint16_t *o = (uint16_t *)(void *)dst; /* dst comes from malloc: aligned */
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint64_t u = rng_next(r);
        for (int k = 0; k < 4; k++) o[i + k] = h[(u >> (16 * k)) & 0xffff];
    }
    if (i < n) {
        uint64_t u = rng_next(r);
        for (int k = 0; i < n; i++, k++) o[i] = h[(u >> (16 * k)) & 0xffff];
    }
}

/* ---- direct random quantized blocks --------------------------------------- *
 * Each generator draws quants uniformly over all levels and picks per-block
 * scales so that the values have standard deviation ~std, with a random
 * sign per block (or per scale) so that the uniform's half-step offset
 * averages out. Block scales vary by +-20% around the nominal value. */

static inline float jitter(rng *r) { return 0.8f + 0.4f * rng_unif(r); }

static void fill_random(rng *r, uint8_t *p, size_t n) {
    while (n >= 8) {
        uint64_t v = rng_next(r);
        memcpy(p, &v, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t v = rng_next(r);
        memcpy(p, &v, n);
    }
}

static uint16_t f16_signed(rng *r, float v) {
    return ig_f32_to_f16(rng_next(r) & 1 ? -v : v);
}

/* values d*q, q uniform in -128..127: sd 73.9*d */
static void gen_q8_0(rng *r, uint8_t *dst, size_t nb, float std) {
    for (size_t i = 0; i < nb; i++, dst += sizeof(ig_block_q8_0)) {
        ig_block_q8_0 b;
        b.d = f16_signed(r, std / 73.9f * jitter(r));
        fill_random(r, (uint8_t *)b.qs, sizeof b.qs);
        memcpy(dst, &b, sizeof b);
    }
}

/* values d*(q-16), q uniform in 0..31: sd 9.23*d */
static void gen_q5_0(rng *r, uint8_t *dst, size_t nb, float std) {
    for (size_t i = 0; i < nb; i++, dst += sizeof(ig_block_q5_0)) {
        ig_block_q5_0 b;
        b.d = f16_signed(r, std / 9.233f * jitter(r));
        fill_random(r, b.qh, sizeof b.qh);
        fill_random(r, b.qs, sizeof b.qs);
        memcpy(dst, &b, sizeof b);
    }
}

/* values d*sc*q - dmin*m with q uniform in 0..15, sc in 40..63, dmin = 8d
 * and m = round(sc*15/16), so that dmin*m ~ d*sc*7.5 centres the levels:
 * sd ~ 4.61*d*sc, rms(sc) ~ 51.96. */
static void gen_q4_K(rng *r, uint8_t *dst, size_t nb, float std) {
    for (size_t i = 0; i < nb; i++, dst += sizeof(ig_block_q4_K)) {
        ig_block_q4_K b;
        b.d = ig_f32_to_f16(std / (4.610f * 51.96f) * jitter(r));
        b.dmin = ig_f32_to_f16(8.0f * ig_f16_to_f32(b.d));
        uint64_t u = rng_next(r);
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = (uint8_t)(40 + ((u >> (8 * j)) & 0xff) % 24);
            m[j] = (uint8_t)((sc[j] * 15 + 8) / 16);
        }
        memset(b.scales, 0, sizeof b.scales);
        for (int j = 0; j < 8; j++) { /* the inverse of ig_q4_K_scale_min */
            if (j < 4) {
                b.scales[j] = sc[j];
                b.scales[j + 4] = m[j];
            } else {
                b.scales[j + 4] = (uint8_t)((sc[j] & 0xfu) | ((m[j] & 0xfu) << 4));
                b.scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
                b.scales[j] |= (uint8_t)((m[j] >> 4) << 6);
            }
        }
        fill_random(r, b.qs, sizeof b.qs);
        memcpy(dst, &b, sizeof b);
    }
}

/* values d*sc*(q-32), q uniform in 0..63, |sc| in 64..127 with a random
 * sign: sd ~ 18.47*d*rms(sc), rms(sc) ~ 97.3. */
static void gen_q6_K(rng *r, uint8_t *dst, size_t nb, float std) {
    for (size_t i = 0; i < nb; i++, dst += sizeof(ig_block_q6_K)) {
        ig_block_q6_K b;
        fill_random(r, b.ql, sizeof b.ql);
        fill_random(r, b.qh, sizeof b.qh);
        uint64_t u[2] = {rng_next(r), rng_next(r)};
        for (int j = 0; j < 16; j++) {
            unsigned v = (unsigned)(u[j / 8] >> (8 * (j % 8))) & 0xffu;
            int mag = 64 + (int)(v & 63u);
            b.scales[j] = (int8_t)(v & 0x80u ? -mag : mag);
        }
        b.d = ig_f32_to_f16(std / (18.47f * 97.3f) * jitter(r));
        memcpy(dst, &b, sizeof b);
    }
}

/* ---- the plan ------------------------------------------------------------ */

typedef struct synth_tensor {
    char name[GGUF_WRITER_MAX_NAME + 1];
    ig_synth_kind kind;
    ig_dtype type;
    int n_dims;
    int64_t ne[2];
    float mean; /* norms: the stored 1+w is mean + N(0, std^2) */
    float std;  /* matrices: sd of the values (mean 0) */
} synth_tensor;

struct ig_synth {
    ig_synth_params p;
    ig_synth_config cfg;
    gguf_writer *w;
    synth_tensor *tensors;
    size_t n_tensors;
    uint64_t n_params;
    int n_vocab;
    ig_synth_progress_fn progress;
    void *progress_user;
    float *gauss; /* GAUSS_N quantiles */
    bool written;
};

static ig_status add_tensor(ig_synth *s, const char *name, ig_synth_kind kind, int layer,
                            int n_dims, int64_t ne0, int64_t ne1, float mean, float std) {
    synth_tensor *t = &s->tensors[s->n_tensors];
    if (strlen(name) > GGUF_WRITER_MAX_NAME)
        return ig_fail(IG_ERR_INTERNAL, "synth: tensor name %s too long", name);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->type = ig_synth_tensor_type(s->p.ftype, kind, layer, s->cfg.n_layer, ne0);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims > 1 ? ne1 : 1;
    t->mean = mean;
    t->std = std;
    IG_TRY(gguf_writer_add_tensor(s->w, t->name, n_dims, t->ne, t->type));
    s->n_params += (uint64_t)t->ne[0] * (uint64_t)t->ne[1];
    s->n_tensors++;
    return IG_OK;
}

static ig_status plan_tensors(ig_synth *s) {
    const ig_synth_config *c = &s->cfg;
    const int64_t H = c->n_embd, F = c->n_ff, q_dim = (int64_t)c->n_head * c->head_dim,
                  kv_dim = (int64_t)c->n_head_kv * c->head_dim, hd = c->head_dim;
    size_t n = 13 * (size_t)c->n_layer + 2;
    s->tensors = ig_calloc_array(n, sizeof *s->tensors);
    if (!s->tensors) return IG_ERR_NO_MEMORY;
    const float norm_sd = 0.1f;
    /* llama.cpp's attention scale for this layer count vs the intended one:
     * any difference is folded into attn_q_norm (q is normed just before
     * the scores, so scaling its weight scales q.k). */
    const double derived = c->n_layer == 62 ? (double)(c->n_embd / c->n_head) : (double)hd;
    const float q_norm_mean = (float)sqrt(derived / (double)c->query_pre_attn_scalar);
    /* matrices ~ N(0, 1/fan_in) */
    const float sd_h = 1.0f / sqrtf((float)H), sd_o = 1.0f / sqrtf((float)q_dim),
                sd_f = 1.0f / sqrtf((float)F);
    IG_TRY(add_tensor(s, "token_embd.weight", IG_SYNTH_TOKEN_EMBD, 0, 2, H, s->n_vocab, 0.0f,
                      1.0f / sqrtf((float)H)));
    char name[96];
    for (int l = 0; l < c->n_layer; l++) {
#define T(suffix, kind, nd, a, b, mean, sd)                                                        \
    do {                                                                                           \
        snprintf(name, sizeof name, "blk.%d." suffix, l);                                          \
        IG_TRY(add_tensor(s, name, kind, l, nd, a, b, mean, sd));                                  \
    } while (0)
        T("attn_norm.weight", IG_SYNTH_NORM, 1, H, 1, 1.0f, norm_sd);
        T("attn_q.weight", IG_SYNTH_ATTN_Q, 2, H, q_dim, 0.0f, sd_h);
        T("attn_k.weight", IG_SYNTH_ATTN_K, 2, H, kv_dim, 0.0f, sd_h);
        T("attn_v.weight", IG_SYNTH_ATTN_V, 2, H, kv_dim, 0.0f, sd_h);
        T("attn_q_norm.weight", IG_SYNTH_NORM, 1, hd, 1, q_norm_mean, norm_sd * q_norm_mean);
        T("attn_k_norm.weight", IG_SYNTH_NORM, 1, hd, 1, 1.0f, norm_sd);
        T("attn_output.weight", IG_SYNTH_ATTN_OUTPUT, 2, q_dim, H, 0.0f, sd_o);
        T("post_attention_norm.weight", IG_SYNTH_NORM, 1, H, 1, 1.0f, norm_sd);
        T("ffn_norm.weight", IG_SYNTH_NORM, 1, H, 1, 1.0f, norm_sd);
        T("ffn_gate.weight", IG_SYNTH_FFN_GATE, 2, H, F, 0.0f, sd_h);
        T("ffn_up.weight", IG_SYNTH_FFN_UP, 2, H, F, 0.0f, sd_h);
        T("ffn_down.weight", IG_SYNTH_FFN_DOWN, 2, F, H, 0.0f, sd_f);
        T("post_ffw_norm.weight", IG_SYNTH_NORM, 1, H, 1, 1.0f, norm_sd);
#undef T
    }
    IG_TRY(add_tensor(s, "output_norm.weight", IG_SYNTH_NORM, 0, 1, H, 1, 1.0f, norm_sd));
    return IG_OK;
}

/* ---- vocabulary ---------------------------------------------------------- */

/* The tokenizer.* keys of path; with `image`, "<image_soft_token>" is
 * appended (id n, as in the multimodal Gemma 3 releases) unless the
 * vocabulary has it, so that images have their placeholder. */
static ig_status copy_vocab(gguf_writer *w, const char *path, bool image, int *n_vocab) {
    gguf_file *f = NULL;
    ig_status st = gguf_open(path, &f);
    if (st != IG_OK) return ig_fail_wrap(st, "--vocab-from %s", path);
    static const char soft[] = "<image_soft_token>";
    const void *arr, *sc = NULL, *ty = NULL;
    uint64_t n = 0, nsc = 0, nty = 0;
    if (!gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &arr, &n) || n == 0 ||
        n > (1u << 24)) {
        st = ig_fail(IG_ERR_FORMAT, "--vocab-from %s: no usable tokenizer.ggml.tokens array", path);
        gguf_close(f);
        return st;
    }
    const gguf_str *toks = arr;
    bool add = image;
    for (uint64_t i = 0; i < n && add; i++)
        if (toks[i].len == sizeof soft - 1 && !memcmp(toks[i].ptr, soft, sizeof soft - 1)) add = false;
    if (add && (!gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &sc, &nsc) || nsc != n ||
                !gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &ty, &nty) || nty != n))
        st = ig_fail(IG_ERR_FORMAT, "--vocab-from %s: no scores or token types to extend", path);
    *n_vocab = (int)n + add;
    for (size_t i = 0; i < f->n_kv && st == IG_OK; i++) {
        const char *k = f->kv[i].key;
        if (strncmp(k, "tokenizer.", 10)) continue;
        if (add && !strcmp(k, "tokenizer.ggml.tokens")) {
            gguf_str *t = ig_calloc_array(n + 1, sizeof *t);
            if (!t) st = IG_ERR_NO_MEMORY;
            else {
                memcpy(t, toks, n * sizeof *t);
                t[n] = (gguf_str){.ptr = soft, .len = sizeof soft - 1};
                st = gguf_writer_add_arr_str(w, k, t, n + 1);
                free(t);
            }
        } else if (add && (!strcmp(k, "tokenizer.ggml.scores") || !strcmp(k, "tokenizer.ggml.token_type"))) {
            uint32_t *v = ig_calloc_array(n + 1, 4); /* f32 scores or i32 types: 4 bytes each */
            if (!v) st = IG_ERR_NO_MEMORY;
            else {
                const bool scores = !strcmp(k, "tokenizer.ggml.scores");
                memcpy(v, scores ? sc : ty, n * 4);
                if (scores) {
                    const float z = 0.0f;
                    memcpy(&v[n], &z, 4);
                } else {
                    v[n] = 3; /* control */
                }
                st = gguf_writer_add_arr(w, k, scores ? GGUF_TYPE_FLOAT32 : GGUF_TYPE_INT32, v, n + 1);
                free(v);
            }
        } else {
            st = gguf_writer_add_kv(w, &f->kv[i]);
        }
    }
    if (st != IG_OK) ig_fail_wrap(st, "--vocab-from %s", path);
    gguf_close(f);
    return st;
}

/* A small SentencePiece-style vocabulary of n pieces, laid out like
 * Gemma 3's where it matters (0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, 105/106
 * <start_of_turn>/<end_of_turn>, 107 "\n", byte pieces <0x00>..<0xFF> at
 * 238..493), then every printable ASCII character, U+2581, and lowercase
 * words with and without a leading U+2581 (shortest first, scores falling),
 * so that text tokenizes into something sensible. */
#define SYN_BYTE0 238
static ig_status make_vocab(gguf_writer *w, int n) {
    static const char sp[] = "\xe2\x96\x81"; /* U+2581 */
    ig_status st = IG_OK;
    gguf_str *strs = ig_calloc_array((size_t)n, sizeof *strs);
    float *scores = ig_calloc_array((size_t)n, sizeof *scores);
    int32_t *types = ig_calloc_array((size_t)n, sizeof *types);
    size_t cap = (size_t)n * 12 + 4096;
    char *buf = ig_malloc(cap), *p = buf;
    if (!strs || !scores || !types || !buf) {
        st = IG_ERR_NO_MEMORY;
        goto done;
    }
#define PIECE(id, ty, sc, ...)                                                                     \
    do {                                                                                           \
        int k_ = snprintf(p, 64, __VA_ARGS__);                                                     \
        strs[id].ptr = p;                                                                          \
        strs[id].len = (size_t)k_;                                                                 \
        p += k_;                                                                                   \
        types[id] = (ty);                                                                          \
        scores[id] = (sc);                                                                         \
    } while (0)
    int id = 0;
    for (; id < n && id < SYN_BYTE0; id++) {
        switch (id) {
        case 0: PIECE(id, 3, -1000.0f, "<pad>"); break;
        case 1: PIECE(id, 3, -1000.0f, "<eos>"); break;
        case 2: PIECE(id, 3, -1000.0f, "<bos>"); break;
        case 3: PIECE(id, 2, -1000.0f, "<unk>"); break;
        case 4: PIECE(id, 3, -1000.0f, "<mask>"); break;
        case 105: PIECE(id, 3, -1000.0f, "<start_of_turn>"); break;
        case 106: PIECE(id, 3, -1000.0f, "<end_of_turn>"); break;
        case 107: PIECE(id, 4, -1000.0f, "\n"); break;
        default: PIECE(id, 3, -1000.0f, "<unused%d>", id); break;
        }
    }
    for (int b = 0; b < 256 && id < n; b++, id++) PIECE(id, 6, 0.0f, "<0x%02X>", b);
    float score = 0.0f;
    for (int c = 0x21; c < 0x7f && id < n; c++, id++) PIECE(id, 1, score -= 1.0f, "%c", c);
    if (id < n) {
        PIECE(id, 1, score -= 1.0f, "%s", sp);
        id++;
    }
    /* words over a..z: length 1 with U+2581 only (bare letters exist), then
     * each length with and without it */
    for (int len = 1; len <= 8 && id < n; len++) {
        char word[9];
        int idx[8] = {0};
        for (;;) {
            for (int i = 0; i < len; i++) word[i] = (char)('a' + idx[i]);
            word[len] = '\0';
            if (id < n) {
                PIECE(id, 1, score -= 1.0f, "%s%s", sp, word);
                id++;
            }
            if (len > 1 && id < n) {
                PIECE(id, 1, score -= 1.0f, "%s", word);
                id++;
            }
            if (id >= n) break;
            int i = len - 1; /* next word */
            while (i >= 0 && ++idx[i] == 26) idx[i--] = 0;
            if (i < 0) break;
        }
    }
#undef PIECE
    if (id < n) {
        st = ig_fail(IG_ERR_INTERNAL, "synth: generated only %d of %d pieces", id, n);
        goto done;
    }
    st = gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    if (st == IG_OK) st = gguf_writer_add_str(w, "tokenizer.ggml.pre", "default");
    if (st == IG_OK) st = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", strs, (uint64_t)n);
    if (st == IG_OK)
        st = gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores,
                                 (uint64_t)n);
    if (st == IG_OK)
        st = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types,
                                 (uint64_t)n);
    if (st == IG_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 2);
    if (st == IG_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 1);
    if (st == IG_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 3);
    if (st == IG_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", 0);
    if (st == IG_OK) st = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (st == IG_OK) st = gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", false);
    if (st == IG_OK) st = gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", false);
done:
    free(strs);
    free(scores);
    free(types);
    free(buf);
    return st;
}

/* ---- metadata ------------------------------------------------------------ */

static ig_status plan_metadata(ig_synth *s, const char *vocab_from) {
    const ig_synth_config *c = &s->cfg;
    gguf_writer *w = s->w;
    char name[128], desc[192];
    snprintf(name, sizeof name, "Gemma 3 %s synthetic %s", c->label,
             ig_synth_ftype_name(s->p.ftype));
    snprintf(desc, sizeof desc,
             "random weights written by ignis synth (seed %llu%s); not a trained model",
             (unsigned long long)s->p.seed, s->p.exact ? ", exact quantization" : "");
    IG_TRY(gguf_writer_add_str(w, "general.architecture", "gemma3"));
    IG_TRY(gguf_writer_add_str(w, "general.type", "model"));
    IG_TRY(gguf_writer_add_str(w, "general.name", name));
    IG_TRY(gguf_writer_add_str(w, "general.description", desc));
    IG_TRY(gguf_writer_add_str(w, "general.size_label", c->label));
    IG_TRY(gguf_writer_add_u32(w, "gemma3.context_length", (uint32_t)c->n_ctx_train));
    IG_TRY(gguf_writer_add_u32(w, "gemma3.embedding_length", (uint32_t)c->n_embd));
    IG_TRY(gguf_writer_add_u32(w, "gemma3.block_count", (uint32_t)c->n_layer));
    IG_TRY(gguf_writer_add_u32(w, "gemma3.feed_forward_length", (uint32_t)c->n_ff));
    IG_TRY(gguf_writer_add_u32(w, "gemma3.attention.head_count", (uint32_t)c->n_head));
    IG_TRY(gguf_writer_add_u32(w, "gemma3.attention.head_count_kv", (uint32_t)c->n_head_kv));
    IG_TRY(gguf_writer_add_u32(w, "gemma3.attention.key_length", (uint32_t)c->head_dim));
    IG_TRY(gguf_writer_add_u32(w, "gemma3.attention.value_length", (uint32_t)c->head_dim));
    IG_TRY(gguf_writer_add_f32(w, "gemma3.attention.layer_norm_rms_epsilon", 1e-6f));
    IG_TRY(gguf_writer_add_f32(w, "gemma3.rope.freq_base", 1e6f));
    IG_TRY(gguf_writer_add_u32(w, "gemma3.attention.sliding_window", (uint32_t)c->sliding_window));
    if (c->rope_scale_global != 1.0f) {
        IG_TRY(gguf_writer_add_str(w, "gemma3.rope.scaling.type", "linear"));
        IG_TRY(gguf_writer_add_f32(w, "gemma3.rope.scaling.factor", c->rope_scale_global));
    }
    if (vocab_from) IG_TRY(copy_vocab(w, vocab_from, s->p.image_tokens, &s->n_vocab));
    else IG_TRY(make_vocab(w, s->n_vocab));
    IG_TRY(gguf_writer_add_u32(w, "general.quantization_version", 2));
    IG_TRY(gguf_writer_add_u32(w, "general.file_type", ig_synth_file_type(s->p.ftype)));
    return IG_OK;
}

ig_status ig_synth_create(const ig_synth_params *p, ig_synth **out) {
    if (!out) return ig_fail(IG_ERR_INVALID_ARG, "ig_synth_create: NULL argument");
    *out = NULL;
    if (!p) return ig_fail(IG_ERR_INVALID_ARG, "ig_synth_create: NULL argument");
    const ig_synth_config *c = ig_synth_find_config(p->size);
    if (!c)
        return ig_fail(IG_ERR_INVALID_ARG, "synth: unknown size '%s' (270m, 1b, 4b, 12b or 27b)",
                       p->size ? p->size : "(null)");
    if (p->ftype != IG_SYNTH_F16 && p->ftype != IG_SYNTH_Q8_0 && p->ftype != IG_SYNTH_Q4_K_M)
        return ig_fail(IG_ERR_INVALID_ARG, "synth: unknown file type %d", (int)p->ftype);
    if (p->n_layer < 0 || p->n_layer > IG_MAX_LAYERS)
        return ig_fail(IG_ERR_INVALID_ARG, "synth: %d layers (must be 1..%d)", p->n_layer,
                       IG_MAX_LAYERS);
    ig_synth *s = ig_calloc_array(1, sizeof *s);
    if (!s) return ig_fail(IG_ERR_NO_MEMORY, "synth: out of memory");
    s->p = *p;
    s->p.size = c->size;
    s->p.vocab_from = NULL; /* borrowed: only read while planning */
    s->cfg = *c;
    if (p->n_layer > 0) s->cfg.n_layer = p->n_layer;
    s->n_vocab = IG_SYNTH_N_VOCAB;
    s->gauss = ig_calloc_array(GAUSS_N, sizeof *s->gauss);
    if (!s->gauss) {
        ig_synth_free(s);
        return IG_ERR_NO_MEMORY;
    }
    gauss_table_init(s->gauss);
    ig_status st = gguf_writer_create(0, &s->w);
    if (st == IG_OK) st = plan_metadata(s, p->vocab_from);
    if (st == IG_OK) st = plan_tensors(s);
    if (st != IG_OK) {
        ig_synth_free(s);
        return st;
    }
    *out = s;
    return IG_OK;
}

void ig_synth_free(ig_synth *s) {
    if (!s) return;
    gguf_writer_free(s->w);
    free(s->tensors);
    free(s->gauss);
    free(s);
}

void ig_synth_set_progress(ig_synth *s, ig_synth_progress_fn fn, void *user) {
    if (!s) return;
    s->progress = fn;
    s->progress_user = user;
}

uint64_t ig_synth_file_size(const ig_synth *s) { return s ? gguf_writer_file_size(s->w) : 0; }
uint64_t ig_synth_n_params(const ig_synth *s) { return s ? s->n_params : 0; }
const ig_synth_config *ig_synth_get_config(const ig_synth *s) { return s ? &s->cfg : NULL; }

/* ---- data ---------------------------------------------------------------- */

#define CHUNK_BYTES ((size_t)8 << 20)

typedef struct writer_ctx {
    ig_synth *s;
    uint64_t done, total;
} writer_ctx;

static ig_status emit(writer_ctx *c, const void *data, size_t n) {
    IG_TRY(gguf_writer_write(c->s->w, data, n));
    c->done += n;
    if (c->s->progress) c->s->progress(c->s->progress_user, c->done, c->total);
    return IG_OK;
}

static bool direct_supported(ig_dtype t) {
    return t == IG_TYPE_Q8_0 || t == IG_TYPE_Q5_0 || t == IG_TYPE_Q4_K || t == IG_TYPE_Q6_K;
}

static ig_status write_tensor(writer_ctx *c, const synth_tensor *t, uint8_t *buf, float *row,
                              uint16_t *h16) {
    const ig_synth *s = c->s;
    rng r;
    rng_seed(&r, s->p.seed, t->name);
    size_t row_bytes;
    if (!ig_dtype_row_bytes(t->type, t->ne[0], &row_bytes))
        return ig_fail(IG_ERR_INTERNAL, "synth: bad row for %s", t->name);
    const int64_t n_rows = t->ne[1];
    const int64_t rows_per_chunk = (int64_t)IG_MAX(1, CHUNK_BYTES / row_bytes);
    const bool norm = t->kind == IG_SYNTH_NORM;
    const bool direct = !s->p.exact && !norm && direct_supported(t->type);
    const bool f16 = !norm && t->type == IG_TYPE_F16;
    const size_t blocks_per_row = (size_t)t->ne[0] / ig_dtype_block_elems(t->type);
    if (f16)
        for (int k = 0; k < GAUSS_N; k++) h16[k] = ig_f32_to_f16(t->std * s->gauss[k]);
    for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_chunk) {
        const int64_t nr = IG_MIN(rows_per_chunk, n_rows - r0);
        if (f16) {
            gen_f16(&r, h16, buf, (size_t)nr * (size_t)t->ne[0]);
        } else if (direct) {
            const size_t nb = blocks_per_row * (size_t)nr;
            switch (t->type) {
            case IG_TYPE_Q8_0: gen_q8_0(&r, buf, nb, t->std); break;
            case IG_TYPE_Q5_0: gen_q5_0(&r, buf, nb, t->std); break;
            case IG_TYPE_Q4_K: gen_q4_K(&r, buf, nb, t->std); break;
            case IG_TYPE_Q6_K: gen_q6_K(&r, buf, nb, t->std); break;
            default: return ig_fail(IG_ERR_INTERNAL, "synth: no direct generator");
            }
        } else {
            for (int64_t i = 0; i < nr; i++) {
                gauss_fill(&r, s->gauss, row, t->ne[0], t->mean, t->std);
                ig_quantize_row(t->type, row, buf + (size_t)i * row_bytes, t->ne[0]);
            }
        }
        IG_TRY(emit(c, buf, (size_t)nr * row_bytes));
    }
    return IG_OK;
}

ig_status ig_synth_write(ig_synth *s, FILE *fp) {
    if (!s || !fp) return ig_fail(IG_ERR_INVALID_ARG, "ig_synth_write: NULL argument");
    if (s->written) return ig_fail(IG_ERR_INVALID_ARG, "ig_synth_write: already written");
    s->written = true;
    writer_ctx c = {s, 0, 0};
    int64_t max_ne0 = 0;
    size_t max_row = 0;
    for (size_t i = 0; i < s->n_tensors; i++) {
        c.total += gguf_writer_tensor_bytes(s->w, i);
        size_t rb = 0;
        if (!ig_dtype_row_bytes(s->tensors[i].type, s->tensors[i].ne[0], &rb))
            return ig_fail(IG_ERR_INTERNAL, "synth: bad row for %s", s->tensors[i].name);
        max_ne0 = IG_MAX(max_ne0, s->tensors[i].ne[0]);
        max_row = IG_MAX(max_row, rb);
    }
    uint8_t *buf = ig_malloc(IG_MAX(CHUNK_BYTES, max_row));
    float *row = ig_calloc_array((size_t)max_ne0, sizeof *row);
    uint16_t *h16 = ig_calloc_array(GAUSS_N, sizeof *h16);
    ig_status st = buf && row && h16 ? IG_OK : IG_ERR_NO_MEMORY;
    if (st == IG_OK) st = gguf_writer_begin(s->w, fp);
    for (size_t i = 0; i < s->n_tensors && st == IG_OK; i++)
        st = write_tensor(&c, &s->tensors[i], buf, row, h16);
    if (st == IG_OK) st = gguf_writer_finish(s->w);
    free(buf);
    free(row);
    free(h16);
    return st;
}
