/* Attention of a block of query rows that share one KV head and one
 * sequence (the heads of a GQA group, for a few consecutive tokens): one
 * pass over the keys in tiles of 16 with an online softmax, each K and V row
 * converted once per tile for all query rows. Only the keys in the union of
 * the rows' ranges are read; a row ignores keys outside its own range
 * (causal mask, sliding window). */
#ifndef IG_CPU_ATTENTION_H
#define IG_CPU_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>

#define IG_ATTN_MAX_ROWS 16
#define IG_ATTN_TILE 16

typedef struct ig_attn_block {
    int n_rows;                         /* 1 .. IG_ATTN_MAX_ROWS */
    const float *q[IG_ATTN_MAX_ROWS];   /* hd floats each */
    float *o[IG_ATTN_MAX_ROWS];         /* hdv floats each (written) */
    int lo[IG_ATTN_MAX_ROWS];           /* keys lo .. hi (positions, inclusive) */
    int hi[IG_ATTN_MAX_ROWS];
    int jlo, jhi;                       /* min lo, max hi */
    const void *k, *v;                  /* position j: row j % cap at k + row * kstride elements */
    size_t kstride, vstride;
    int cap;
    bool f16;                           /* cache of IEEE halves, else f32 */
    int hd, hdv;
    float scale;   /* applied to q.k */
    float softcap; /* > 0: s = softcap * tanh(s / softcap) */
    float *scratch; /* ig_attn_scratch_floats(hd, hdv) floats, 64-byte aligned */
} ig_attn_block;

static inline size_t ig_attn_scratch_floats(int hd, int hdv) {
    const size_t w = (size_t)(hd > hdv ? hd : hdv) + 16;
    return 2 * IG_ATTN_MAX_ROWS * IG_ATTN_TILE + 4 * IG_ATTN_MAX_ROWS + 4 * w;
}

void ig_attn_block_scalar(const ig_attn_block *a);
#if defined(__x86_64__) || defined(__i386__)
void ig_attn_block_avx2(const ig_attn_block *a);
void ig_attn_block_avx512(const ig_attn_block *a);
#endif

/* Attention with every key visible (encoders: the vision tower), f32:
 * rows [t0, t0 + nq) of one head (row t at q/o + t * stride) against keys
 * [0, n) packed once per head by ig_vattn_pack_avx2: the keys in tiles of
 * IG_VATTN_BK, each transposed (kt: [tile][hd][BK]), the values row after
 * row (vp: [tile * BK][hd]), zeros past n, so that every block streams
 * them contiguously. hd a multiple of 8. A block of IG_VATTN_BQ query rows
 * goes over the tiles: scores as a register-blocked product, an online
 * softmax, then P·V, the rows' outputs in the scratch until the end. */
#define IG_VATTN_BQ 48
#define IG_VATTN_BK 64

typedef struct ig_vattn {
    const float *q;
    float *o;
    size_t stride;
    const float *kt, *vp; /* the head's packed keys and values */
    int n, hd;
    float scale;
} ig_vattn;

static inline int ig_vattn_tiles(int n) { return (n + IG_VATTN_BK - 1) / IG_VATTN_BK; }
/* Floats of one head's packed keys (as many again for its values). */
static inline size_t ig_vattn_head_floats(int n, int hd) {
    return (size_t)ig_vattn_tiles(n) * IG_VATTN_BK * (size_t)hd;
}
static inline size_t ig_vattn_scratch_floats(int hd) {
    return 2 * (size_t)IG_VATTN_BQ * hd + (size_t)IG_VATTN_BQ * IG_VATTN_BK + 2 * IG_VATTN_BQ + 64;
}

#if defined(__x86_64__) || defined(__i386__)
/* Packs tiles [tile0, tile1) of one head (k, v: row j at + j * stride). */
void ig_vattn_pack_avx2(const float *k, const float *v, size_t stride, int n, int hd, int tile0, int tile1,
                        float *kt, float *vp);
/* nq <= IG_VATTN_BQ; scratch: ig_vattn_scratch_floats(hd), 64-byte aligned. */
void ig_vattn_rows_avx2(const ig_vattn *a, int t0, int nq, float *scratch);
#endif

#endif
