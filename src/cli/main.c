#include "cli.h"

#include <stdio.h>
#include <string.h>

#ifdef IGNIS_HAVE_VULKAN
#include "backend/vulkan/vk_tuning.h"
#endif

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "interactive multi-turn chat"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
    {"bench", cmd_bench, "measure prompt and generation speed"},
    {"info", cmd_info, "show a model's hyper-parameters and tensors"},
    {"logits", cmd_logits, "compute logits for token ids"},
    {"perplexity", cmd_perplexity, "perplexity and KL divergence on a text"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"detokenize", cmd_detokenize, "print the text of token ids"},
    {"synth", cmd_synth, "write a random-weight GGUF of a Gemma 3 size"},
    {"quantize", cmd_quantize, "convert an F32/F16/BF16 GGUF to F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1 or a K-quant mix"},
    {"imatrix", cmd_imatrix, "importance matrix of a model on a text (for quantize --imatrix)"},
    {"devices", cmd_devices, "list Vulkan devices"},
};

static void usage(FILE *f) {
    fprintf(f, "ignis %s — Gemma 3 inference engine\n\nusage: ignis COMMAND [options]\n\n",
            IGNIS_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nMODEL is a .gguf file or a Hugging Face directory; when omitted, the default\n"
               "Gemma 3 270M Q4_K_M in ~/.cache/ignis/ is used.\n"
               "Run 'ignis COMMAND --help' for a command's options.\n"
               "--deterministic (with any command): batch-invariant kernels, so a token's\n"
               "logits do not depend on what else shares its step (docs/vulkan.md).\n");
}

const char *cli_vk_tuning;
bool cli_deterministic;

/* `--deterministic`, anywhere on the command line: the models loaded use
 * batch-invariant kernels on every backend (ig_model_params.deterministic).
 * Removes it from argv. */
static void take_deterministic(int *argc, char **argv) {
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--deterministic") != 0) continue;
        cli_deterministic = true;
        for (int j = i; j + 1 <= *argc; j++) argv[j] = argv[j + 1];
        *argc -= 1;
        i--;
    }
}

/* Testing: `--debug-vk-tuning NAME=VALUE,...`, anywhere on the command line,
 * overrides the Vulkan device's tuning (vk_tuning.h) of the models loaded.
 * Removes the pair from argv; 0, or 2 after printing an error. */
static int take_vk_tuning(int *argc, char **argv) {
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--debug-vk-tuning") != 0) continue;
        if (i + 1 >= *argc) {
            fprintf(stderr, "ignis: --debug-vk-tuning needs a value\n");
            return 2;
        }
#ifdef IGNIS_HAVE_VULKAN
        ig_vk_tuning t = {0};
        if (ig_vk_tuning_parse(&t, argv[i + 1]) != IG_OK) {
            fprintf(stderr, "ignis: --debug-vk-tuning: %s\n", ig_last_error());
            return 2;
        }
        cli_vk_tuning = argv[i + 1];
#else
        fprintf(stderr, "ignis: --debug-vk-tuning: built without Vulkan\n");
        return 2;
#endif
        for (int j = i; j + 2 <= *argc; j++) argv[j] = argv[j + 2];
        *argc -= 2;
        i--;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (take_vk_tuning(&argc, argv)) return 2;
    take_deterministic(&argc, argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("ignis %s\n", IGNIS_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "ignis: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
