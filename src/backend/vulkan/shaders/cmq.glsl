// Weight items of mvq.glsl as runs of consecutive row elements, for the
// tensor-core matmul (mmcm.comp). Include after mvq.glsl. Defines
//   CM_KSPAN   row elements a workgroup takes per step (whole items)
//   CM_IPS     items in those CM_KSPAN elements (items CM_IPS*s .. of step s)
//   CM_RUNS    runs per item, CM_RUNLEN elements each (16, or 8 for F16)
//   cm_run_k(it, run)          first row element of run `run` of item `it`
//   cm_run(w, it, run, v[4])   its 16 dequantized values (not for F16: its
//                              item is 8 halves, stored as they are)
// The arithmetic is mvq.glsl's (and so the reference's scale products).

#if defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
#define CM_KSPAN 64u
#define CM_IPS 2u
#define CM_RUNS 2u
#define CM_RUNLEN 16u
// item it: block it/8, 16 bytes at l = it%8: sub-blocks 2j (low nibbles) and
// 2j+1 (high nibbles), elements 16(l&1) .. of each
uint cm_run_k(uint it, uint run) { return (it >> 3) * 256u + ((it & 7u) >> 1) * 64u + (it & 1u) * 16u + run * 32u; }
void cm_run(ITEM w, uint it, uint run, out vec4 v[4]) {
    const uint sh = run * 4u;
    const float d = run == 0u ? w.dm.x : w.dm.z, m = run == 0u ? w.dm.y : w.dm.w;
#if defined(TYPE_Q5_K)
    const uint hs = ((it & 7u) >> 1) * 2u + run;
#endif
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uvec4 q = (uvec4(w.q[k]) >> (uvec4(0u, 8u, 16u, 24u) + sh)) & 0xFu;
#if defined(TYPE_Q5_K)
        q |= ((uvec4(w.qh[k]) >> (uvec4(0u, 8u, 16u, 24u) + hs)) & 1u) << 4;
#endif
        v[k] = d * u2f(q) - m;
    }
}

#elif defined(TYPE_Q6_K)
#define CM_KSPAN 128u
#define CM_IPS 2u
#define CM_RUNS 4u
#define CM_RUNLEN 16u
// item it: block it/4, half n = (it/2)%2, lanes 16(it%2) ..: quarter q at +32q
uint cm_run_k(uint it, uint run) { return (it >> 2) * 256u + ((it >> 1) & 1u) * 128u + (it & 1u) * 16u + run * 32u; }
void cm_run(ITEM w, uint it, uint run, out vec4 v[4]) {
    const float s = run == 0u ? w.s.x : run == 1u ? w.s.y : run == 2u ? w.s.z : w.s.w;
    const uint lsh = (run >> 1) * 4u, hsh = run * 2u;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        const uint lw = (run & 1u) == 0u ? w.a[k] : w.b[k];
        uvec4 q = (uvec4(lw) >> (uvec4(0u, 8u, 16u, 24u) + lsh)) & 0xFu;
        q |= ((uvec4(w.h[k]) >> (uvec4(0u, 8u, 16u, 24u) + hsh)) & 3u) << 4;
        v[k] = s * (u2f(q) - 32.0);
    }
}

#elif defined(TYPE_Q8_0) || defined(TYPE_Q4_0) || defined(TYPE_Q5_0)
#define CM_KSPAN 64u
#define CM_IPS 2u
#define CM_RUNS 2u
#define CM_RUNLEN 16u
// item = one block of 32: run 0 its elements 0..15 (Q8_0: bytes 0..15;
// Q4_0/Q5_0: the low nibbles), run 1 elements 16..31 (the high nibbles)
uint cm_run_k(uint it, uint run) { return it * 32u + run * 16u; }
void cm_run(ITEM w, uint it, uint run, out vec4 v[4]) {
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
#if defined(TYPE_Q8_0)
        const uint word = run == 0u ? w.a[k] : w.b[k];
        v[k] = w.d * s8f((uvec4(word) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu);
#else
        uvec4 q = (uvec4(w.q[k]) >> (uvec4(0u, 8u, 16u, 24u) + run * 4u)) & 0xFu;
#if defined(TYPE_Q5_0)
        q |= ((uvec4(w.h) >> (uvec4(0u, 1u, 2u, 3u) + 4u * k + run * 16u)) & 1u) << 4;
        v[k] = w.d * (u2f(q) - 16.0);
#else
        v[k] = w.d * (u2f(q) - 8.0);
#endif
#endif
    }
}

#elif defined(TYPE_F16)
#define CM_KSPAN 64u
#define CM_IPS 8u
#define CM_RUNS 1u
#define CM_RUNLEN 8u
uint cm_run_k(uint it, uint run) { return it * 8u; }

#else
#error "cmq.glsl: no tensor-core path for this type"
#endif
