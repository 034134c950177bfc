# Turns a SPIR-V module into a C source with a uint32_t array (SPIR-V is a
# stream of little-endian 32-bit words; vkCreateShaderModule wants them
# aligned). Usage: cmake -DIN=x.spv -DOUT=x.c -DNAME=x -P embed_spirv.cmake
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR rem "${n} % 8")
if(n EQUAL 0 OR NOT rem EQUAL 0)
  message(FATAL_ERROR "${IN}: not a SPIR-V module (${n} hex digits)")
endif()
math(EXPR words "${n} / 8")
# bytes b0 b1 b2 b3 -> word 0xb3b2b1b0, eight words per line
string(REGEX REPLACE "(..)(..)(..)(..)" "0x\\4\\3\\2\\1u," body "${hex}")
string(REGEX REPLACE "(0x........u,0x........u,0x........u,0x........u,0x........u,0x........u,0x........u,0x........u,)" "\\1\n    " body "${body}")
file(WRITE ${OUT}.tmp
"/* Generated from ${NAME}.spv by embed_spirv.cmake. */
#include <stddef.h>
#include <stdint.h>

extern const uint32_t ig_vk_spv_${NAME}[];
extern const size_t ig_vk_spv_${NAME}_words;
const uint32_t ig_vk_spv_${NAME}[] = {
    ${body}
};
const size_t ig_vk_spv_${NAME}_words = ${words};
")
file(RENAME ${OUT}.tmp ${OUT})
