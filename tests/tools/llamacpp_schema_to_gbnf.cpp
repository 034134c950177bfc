// JSON Schema -> GBNF with llama.cpp's own converter (json_schema_to_grammar
// of its common library), for bench/vs-llamacpp-grammar: llama.cpp's side
// of the comparison gets the grammar llama.cpp itself would use for
// --json-schema. Built by that script against the libllama-common of
// scripts/build-llamacpp.sh (into the cache, never part of ignis).
//
//   llamacpp_schema_to_gbnf SCHEMA.json > OUT.gbnf
#include "json-schema-to-grammar.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

int main(int argc, char ** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: llamacpp_schema_to_gbnf SCHEMA.json\n");
        return 2;
    }
    std::ifstream in(argv[1]);
    if (!in) {
        std::fprintf(stderr, "llamacpp_schema_to_gbnf: cannot open %s\n", argv[1]);
        return 1;
    }
    std::stringstream text;
    text << in.rdbuf();
    try {
        std::cout << json_schema_to_grammar(common_json::parse(text.str()), true);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "llamacpp_schema_to_gbnf: %s\n", e.what());
        return 1;
    }
    return 0;
}
