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

#endif
