#include "cli.h"

#include <stdio.h>

int cmd_detokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ignis detokenize: not available in this build yet\n");
    return 1;
}
