#version 450
// Causal attention for many tokens at once (prefill), over an f16 KV cache:
// flash attention with tiles in shared memory, so that each K and V row is
// read once per block of query rows instead of once per token (attn.comp).
// A workgroup takes kv head x and R query rows (32, 16 for head dim 256):
// the G heads sharing the kv head for BT = R / G consecutive step rows. Per
// tile of BK keys:
//   S = Q K^T (each invocation a key and R / (256 / BK) rows; K rows padded
//       by one uvec4 so that invocations reading different keys spread over
//       the banks), scaled, soft-capped, masked;
//   online softmax per row (256 / R invocations per row, fp32): the row's new
//       max, P = exp(S - max), the running sum and the factor for O;
//   O = O * alpha + P V (each invocation 4 dims of R / (1024 / HD) rows, in
//       registers).
// The graph holds attn.comp too where attn.comp applies (pc.tiled 1), and
// attn_tiled_step picks one per step (this
// kernel when the rows come in long runs of one sequence), so that a batch
// of decoding streams, each row a sequence of its own, never lands here.
// Token t (sequence s, position p) attends keys j in [lo, p], lo = max(0,
// p - W + 1) (W = window, 0 = unlimited), slot j % cap, as attn.comp. Rows
// of several sequences in one workgroup are served one sequence after the
// other (the other rows masked): right for any batch, fast for prefill.
// Requires (host): HD 64, 128 or 256; G dividing R; q and output offsets and
// strides multiples of 4, KV offsets and kv_dim multiples of 8 (uvec4 loads
// of halves).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint G = 1;    // query heads per kv head
layout(constant_id = 2) const uint HD = 128; // head dim
layout(constant_id = 3) const uint R = 16;   // query rows per workgroup (16 or 32)

#define XT (256u / R)                    // softmax: invocations per row
#define BT (R / G)                       // step rows per workgroup
#define BK (HD >= 128u ? 4096u / HD : 32u) // keys per tile: 32 (HD 128), 16 (256)
#define HD8 (HD / 8u)
#define KS (HD8 + 1u)                    // uvec4 per K/V row in shared memory
#define SPT (R * BK / 256u)              // scores per invocation
#define OPT (R * HD / 1024u)             // rows per invocation in P V (4 dims each)

layout(set = 0, binding = 1) readonly buffer QB { vec4 qs4[]; };
layout(set = 0, binding = 2) readonly buffer KC { uvec4 kc4[]; };
layout(set = 0, binding = 3) readonly buffer VC { uvec4 vc4[]; };
layout(set = 0, binding = 4) writeonly buffer OB { vec4 os4[]; };

layout(push_constant) uniform PC {
    uint n_head, n_head_kv, hd;
    uint q_off, q_stride, o_off, o_stride;
    uint kc_off, vc_off, cap, n_seq, kv_dim;
    uint window;
    float scale, softcap;
    uint chunk_, n_chunks_, x8_stride_, kind_, hpw_; // attn.comp's, attn_reduce.comp's
    uint tiled, tile_run; // the graph also holds attn.comp: attn_tiled_step
} pc;

shared vec4 q_sh[R * HD / 4u];
shared uvec4 kv_sh[BK * KS];
shared float s_sh[R * BK];
shared float red_sh[256];
shared float m_sh[R], l_sh[R], a_sh[R];
shared int seq_sh[R], pos_sh[R], lo_sh[R]; // seq -1: no keys (dead or invalid row)
shared uint done_sh[R];

#define MASKED (-1.0e30)

void main() {
    const uint kvh = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * BT, tid = gl_LocalInvocationID.x;
    const uint n = step_rows(0u);
    if (t0 >= n || !attn_tiled_step(pc.tiled, pc.tile_run)) return; // uniform

    // rows: r = (token t0 + r / G, head kvh * G + r % G); q into shared memory
    if (tid < R) {
        const uint t = t0 + tid / G;
        int s = -1, p = 0, lo = 0;
        if (tid < BT * G && t < n) {
            p = step_pos(t);
            s = step_seq(t);
            if (p < 0 || s < 0 || uint(s) >= pc.n_seq) s = -1;
            lo = pc.window > 0u ? max(0, p - int(pc.window) + 1) : 0;
        }
        seq_sh[tid] = s;
        pos_sh[tid] = p;
        lo_sh[tid] = lo;
        done_sh[tid] = s < 0 ? 1u : 0u;
        m_sh[tid] = MASKED;
        l_sh[tid] = 0.0;
    }
    for (uint i = tid; i < R * HD / 4u; i += 256u) {
        const uint r = i / (HD / 4u), d4 = i % (HD / 4u), t = t0 + r / G;
        q_sh[i] = r < BT * G && t < n ? qs4[(pc.q_off + t * pc.q_stride + (kvh * G + r % G) * HD) / 4u + d4] : vec4(0.0);
    }
    barrier();

    // this invocation's share of the phases
    const uint sk = tid % BK, sr0 = tid / BK;        // S: key sk, rows sr0 + j * (256 / BK)
    const uint xr = tid / XT, xsub = tid % XT;       // softmax: row xr, keys xsub + XT j
    const uint od4 = tid % (HD / 4u), or0 = tid / (HD / 4u); // P V: dims 4 od4, rows or0 + j * (1024 / HD)
    vec4 o[OPT];
    [[unroll]] for (uint j = 0u; j < OPT; j++) o[j] = vec4(0.0);

    for (;;) {
        // the next sequence with rows left, and the keys its rows attend
        int cur = -1, jlo = 0x7FFFFFFF, jhi = -1;
        for (uint r = 0u; r < R; r++) {
            if (done_sh[r] == 0u && cur < 0) cur = seq_sh[r];
            if (done_sh[r] == 0u && seq_sh[r] == cur) {
                jlo = min(jlo, lo_sh[r]);
                jhi = max(jhi, pos_sh[r]);
            }
        }
        if (cur < 0) break; // uniform: every invocation read the same shared state
        const uint kbase = uint(cur) * pc.cap * pc.kv_dim + kvh * HD;

        for (int j0 = jlo; j0 <= jhi; j0 += int(BK)) {
            // K tile (keys past jhi load slot 0 and are masked)
            barrier(); // kv_sh and s_sh are free
            for (uint i = tid; i < BK * HD8; i += 256u) {
                const uint k = i / HD8, c = i % HD8, j = uint(min(j0 + int(k), jhi));
                kv_sh[k * KS + c] = kc4[(pc.kc_off + kbase + (j % pc.cap) * pc.kv_dim) / 8u + c];
            }
            barrier();
            // S = Q K^T, scaled and masked
            {
                float acc[SPT];
                [[unroll]] for (uint j = 0u; j < SPT; j++) acc[j] = 0.0;
                for (uint c = 0u; c < HD8; c++) {
                    const uvec4 kq = kv_sh[sk * KS + c];
                    const vec4 ka = vec4(unpackHalf2x16(kq.x), unpackHalf2x16(kq.y));
                    const vec4 kb = vec4(unpackHalf2x16(kq.z), unpackHalf2x16(kq.w));
                    [[unroll]] for (uint j = 0u; j < SPT; j++) {
                        const uint r = sr0 + j * (256u / BK);
                        acc[j] += dot(q_sh[r * (HD / 4u) + 2u * c], ka) + dot(q_sh[r * (HD / 4u) + 2u * c + 1u], kb);
                    }
                }
                const int key = j0 + int(sk);
                [[unroll]] for (uint j = 0u; j < SPT; j++) {
                    const uint r = sr0 + j * (256u / BK);
                    float sc = acc[j] * pc.scale;
                    if (pc.softcap > 0.0) sc = pc.softcap * tanh_acc(sc / pc.softcap);
                    const bool live = done_sh[r] == 0u && seq_sh[r] == cur && key >= lo_sh[r] && key <= pos_sh[r];
                    s_sh[r * BK + sk] = live ? sc : MASKED;
                }
            }
            barrier();
            // V tile into kv_sh (K is no longer read), then the softmax step
            for (uint i = tid; i < BK * HD8; i += 256u) {
                const uint k = i / HD8, c = i % HD8, j = uint(min(j0 + int(k), jhi));
                kv_sh[k * KS + c] = vc4[(pc.vc_off + kbase + (j % pc.cap) * pc.kv_dim) / 8u + c];
            }
            float mx = MASKED;
            for (uint k = xsub; k < BK; k += XT) mx = max(mx, s_sh[xr * BK + k]);
            red_sh[tid] = mx;
            barrier();
            float rmax = MASKED;
            [[unroll]] for (uint u = 0u; u < XT; u++) rmax = max(rmax, red_sh[xr * XT + u]);
            const float m_old = m_sh[xr], m_new = max(m_old, rmax);
            float sum = 0.0;
            for (uint k = xsub; k < BK; k += XT) {
                const float sc = s_sh[xr * BK + k];
                const float p = sc > 0.5 * MASKED ? exp(sc - m_new) : 0.0;
                s_sh[xr * BK + k] = p;
                sum += p;
            }
            barrier(); // red_sh (maxima) read by all
            red_sh[tid] = sum;
            barrier();
            if (xsub == 0u) {
                float l = 0.0;
                [[unroll]] for (uint u = 0u; u < XT; u++) l += red_sh[xr * XT + u];
                const float alpha = exp(m_old - m_new); // 1 while the row has no key yet (both MASKED)
                l_sh[xr] = l_sh[xr] * alpha + l;
                a_sh[xr] = alpha;
                m_sh[xr] = m_new;
            }
            barrier();
            // O = O * alpha + P V
            [[unroll]] for (uint j = 0u; j < OPT; j++) {
                const uint r = or0 + j * (1024u / HD);
                vec4 acc = o[j] * a_sh[r];
                for (uint k = 0u; k < BK; k++) {
                    const uvec4 vq = kv_sh[k * KS + od4 / 2u];
                    const uvec2 h = (od4 & 1u) == 0u ? vq.xy : vq.zw;
                    const vec4 v = vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
                    acc += s_sh[r * BK + k] * v;
                }
                o[j] = acc;
            }
        }
        barrier(); // every invocation chose `cur` before its rows are marked
        if (tid < R && seq_sh[tid] == cur) done_sh[tid] = 1u;
        barrier();
    }

    // O / l; rows of tokens without keys (invalid) are zero
    [[unroll]] for (uint j = 0u; j < OPT; j++) {
        const uint r = or0 + j * (1024u / HD), t = t0 + r / G;
        if (r < BT * G && t < n) {
            const float l = l_sh[r];
            os4[(pc.o_off + t * pc.o_stride + (kvh * G + r % G) * HD) / 4u + od4] =
                seq_sh[r] >= 0 && l > 0.0 ? o[j] / l : vec4(0.0);
        }
    }
}
