#include "cli.h"

#include <stdio.h>

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ignis tokenize: not available in this build yet\n");
    return 1;
}
