// Fragments of the f16 tensor-core matmul (mmcm.comp) and its store
// (cm_store.glsl): NV cooperative matrix v1 (16 x 8 x 16 products, what
// Debian 12's glslc compiles), or with KHR, GL_KHR_cooperative_matrix in
// 16 x 16 x 16 (the shape AMD's RDNA3 has; glslang >= 13). The including
// shader enables the extension. Defines
//   CM_N                   tokens of a fragment (8 or 16)
//   CM_A, CM_B, CM_C       16 x 16 f16, 16 x CM_N f16, 16 x CM_N f32
//   CM_IA, CM_IB, CM_IC    16 x 32 s8, 32 x CM_N s8, 16 x CM_N s32 (mmq.comp)
//   CM_LOAD(m, buf, element, stride, layout), CM_STORE(...), CM_MULADD(a, b, c)
//   CM_ROW_MAJOR, CM_COL_MAJOR   the layouts
// One variable per declaration: glslang 13 gives the second name of a list
// of KHR matrices another type (spirv-val then rejects the module).
#ifdef KHR
#define CM_N 16u
#define CM_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define CM_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define CM_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define CM_IA coopmat<int8_t, gl_ScopeSubgroup, 16, 32, gl_MatrixUseA>
#define CM_IB coopmat<int8_t, gl_ScopeSubgroup, 32, 16, gl_MatrixUseB>
#define CM_IC coopmat<int, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define CM_LOAD coopMatLoad
#define CM_STORE coopMatStore
#define CM_MULADD coopMatMulAdd
#define CM_ROW_MAJOR gl_CooperativeMatrixLayoutRowMajor
#define CM_COL_MAJOR gl_CooperativeMatrixLayoutColumnMajor
#else
#define CM_N 8u
#define CM_A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CM_B fcoopmatNV<16, gl_ScopeSubgroup, 16, 8>
#define CM_C fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>
#define CM_IA icoopmatNV<8, gl_ScopeSubgroup, 16, 32>
#define CM_IB icoopmatNV<8, gl_ScopeSubgroup, 32, 8>
#define CM_IC icoopmatNV<32, gl_ScopeSubgroup, 16, 8>
#define CM_LOAD coopMatLoadNV
#define CM_STORE coopMatStoreNV
#define CM_MULADD coopMatMulAddNV
#define CM_ROW_MAJOR false
#define CM_COL_MAJOR true
#endif
