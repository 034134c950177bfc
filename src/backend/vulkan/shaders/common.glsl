// Shared by every ignis compute shader: extensions, the per-step parameter
// buffer (binding 0) and workgroup reductions.
//
// Step buffer layout (int32 words, written by the host before each submit):
//   [0] n_tokens  [1] cap (array capacity)  [2] n_out
//   [3] head rows: min(n_out, head cap), the rows of IG_VK_ROWS_HEAD ops
//   [4 + t]          token id of row t
//   [4 + cap + t]    position of row t
//   [4 + 2*cap + t]  sequence of row t
//   [4 + 3*cap + j]  row index of output j (j < n_out)
//   [4 + 4*cap]      runs of consecutive rows of one sequence
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require

layout(set = 0, binding = 0) readonly buffer StepBuf { int step_data[]; };

// Rows an op works on: sel 0 = the step's tokens, 1 = its outputs, 2 = the
// head rows.
uint step_rows(uint sel) { return uint(max(step_data[sel == 0u ? 0 : (sel == 1u ? 2 : 3)], 0)); }
int step_tok(uint t) { return step_data[4u + t]; }
int step_pos(uint t) { return step_data[4u + uint(step_data[1]) + t]; }
int step_seq(uint t) { return step_data[4u + 2u * uint(step_data[1]) + t]; }
int step_out(uint j) { return step_data[4u + 3u * uint(step_data[1]) + j]; }
uint step_seq_runs() { return uint(max(step_data[4u + 4u * uint(step_data[1])], 0)); }

// Whether attn_tile.comp runs this step rather than attn.comp: tiled 0, the
// graph has attn.comp only; 2, attn_tile.comp only; 1, both, and the tiled
// one runs when the rows of one sequence come in runs of tile_run on
// average (prefill), not one row each from many sequences (decoding).
bool attn_tiled_step(uint tiled, uint tile_run) {
    return tiled == 2u || (tiled == 1u && step_rows(0u) >= tile_run * step_seq_runs());
}

// Linear workgroup index of a 1-D grid folded into x and z (x <= 65535).
uint wg_linear() { return gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x; }

// Workgroup-wide reductions. Every invocation must call them (they contain
// barriers) and every invocation gets the result. At most 64 subgroups.
shared float ig_red[64];
float wg_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) ig_red[gl_SubgroupID] = v;
    barrier();
    float s = 0.0;
    if (gl_NumSubgroups <= gl_SubgroupSize) // the partial sums by one subgroup add, not a loop
        s = subgroupAdd(gl_SubgroupInvocationID < gl_NumSubgroups ? ig_red[gl_SubgroupInvocationID] : 0.0);
    else
        for (uint i = 0u; i < gl_NumSubgroups; i++) s += ig_red[i];
    barrier();
    return s;
}
float wg_max(float v) {
    v = subgroupMax(v);
    if (subgroupElect()) ig_red[gl_SubgroupID] = v;
    barrier();
    float s = ig_red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) s = max(s, ig_red[i]);
    barrier();
    return s;
}

// The sum of ig_red[0..31] in one fixed order, whatever the workgroup and
// subgroup sizes: for sums that kernels of different shapes must round
// alike (a head's sum of squares in rope.comp -DNORM and mv.comp -DTAIL:
// value l is the sum of the squares of elements l, l + 32, ... in order).
// The caller writes the 32 values; every invocation must call it (barriers)
// and every one gets the sum.
float sum32_red() {
    barrier();
    float s = 0.0;
    for (uint i = 0u; i < 32u; i++) s += ig_red[i];
    barrier();
    return s;
}

float h2f(uint h) { return unpackHalf2x16(h).x; }

// f32 -> f16 bits, round to nearest even (as ig_f32_to_f16), independent of
// how the driver rounds packHalf2x16.
uint f2h_rne(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);
    if (ax >= 0x477ff000u) return sign | 0x7c00u; // rounds to >= 65520: inf
    if (ax < 0x38800000u) {                       // below 2^-14: subnormal or zero
        if (ax < 0x33000000u) return sign;        // < 2^-25 rounds to zero
        uint m = (ax & 0x7fffffu) | 0x800000u;
        uint e = ax >> 23;                        // 102..112
        uint shift = 126u - e;                    // 14..24
        uint r = m >> shift;
        uint rest = m & ((1u << shift) - 1u);
        uint half_ = 1u << (shift - 1u);
        if (rest > half_ || (rest == half_ && (r & 1u) != 0u)) r++;
        return sign | r;
    }
    uint r = ((ax - 0x38000000u) >> 13);          // rebias exponent 127 -> 15
    uint rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1u) != 0u)) r++;
    return sign | r;
}

// gelu_tanh(x) = 0.5x(1 + tanh(y)) = x / (1 + exp(-2y)), y = sqrt(2/pi)(x + 0.044715x^3);
// the second form has no cancellation and no builtin tanh (whose precision
// varies by driver).
float gelu_tanh(float x) {
    float y = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * y));
}

// tanh from exp, accurate to a few ulp of the absolute value.
float tanh_acc(float x) {
    float e = exp(-2.0 * abs(x));
    float t = (1.0 - e) / (1.0 + e);
    return x < 0.0 ? -t : t;
}

// Keys per chunk of the split attention (attn.comp, attn_reduce.comp): the
// len keys a token attends spread over its n chunks, at least min_keys
// each, so that every chunk works however long the context has grown (the
// graph's chunk count is fixed when it is recorded; the keys are not).
uint attn_chunk_keys(uint len, uint n, uint min_keys) { return max(min_keys, (len + n - 1u) / n); }

