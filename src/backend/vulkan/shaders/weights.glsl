// Weight bindings: A at binding 1 and (for the fused gate/up variants) B at
// binding 2, each seen as 16-bit words and as floats; dq8_a / dq8_b read them.
layout(set = 0, binding = 1) readonly buffer WA16 { uint16_t wa16[]; };
layout(set = 0, binding = 1) readonly buffer WA32 { float wa32[]; };
#define CAT_(a, b) a##b
#define W16 wa16
#define W32 wa32
#define FN(x) CAT_(x, _a)
#include "dequant.glsl"
#undef W16
#undef W32
#undef FN
#ifdef GEGLU
layout(set = 0, binding = 2) readonly buffer WB16 { uint16_t wb16[]; };
layout(set = 0, binding = 2) readonly buffer WB32 { float wb32[]; };
#define W16 wb16
#define W32 wb32
#define FN(x) CAT_(x, _b)
#include "dequant.glsl"
#undef W16
#undef W32
#undef FN
#endif

#if defined(TYPE_F32) || defined(TYPE_F16) || defined(TYPE_BF16)
#define ROW_TAIL 1 // rows may end inside a group of 8
#endif
