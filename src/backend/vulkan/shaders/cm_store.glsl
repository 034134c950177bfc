// The tensor-core matmuls' store of a 16 x CM_N accumulator fragment (rows
// r.., tokens t..; cm_frag.glsl) to Y at yb (token t, row r at t * y_stride
// + y_row0 + r): a whole fragment straight to Y where Y's offsets allow it,
// a partial one through the subgroup's 256 floats of stage (or, with
// CM_STAGE_IN_SA, of the uint array sa, which holds floats' bits there).
// Include after cm_frag.glsl, the push constants (pc) and the ys and stage
// (sa) arrays; uniform per subgroup.
void cm_store(CM_C v, uint r, uint t, uint yb, uint n, bool direct_ok) {
    if (r >= pc.n_rows || t >= n) return;
    if (direct_ok && r + 16u <= pc.n_rows && t + CM_N <= n) {
        CM_STORE(v, ys, yb + t * pc.y_stride + pc.y_row0 + r, pc.y_stride, CM_COL_MAJOR);
        return;
    }
    const uint sbase = gl_SubgroupID * 256u;
#ifdef CM_STAGE_IN_SA
    CM_STORE(v, sa, sbase, 16u, CM_COL_MAJOR); // (m, n) at n * 16 + m
#else
    CM_STORE(v, stage, sbase, 16u, CM_COL_MAJOR);
#endif
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint e = gl_SubgroupInvocationID; e < 16u * CM_N; e += gl_SubgroupSize) {
        const uint m = e % 16u, nn = e / 16u;
#ifdef CM_STAGE_IN_SA
        const float y = uintBitsToFloat(sa[sbase + e]);
#else
        const float y = stage[sbase + e];
#endif
        if (r + m < pc.n_rows && t + nn < n) ys[yb + (t + nn) * pc.y_stride + pc.y_row0 + r + m] = y;
    }
    subgroupBarrier();
}
