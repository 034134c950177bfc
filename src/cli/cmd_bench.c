#include "cli.h"

#include <stdio.h>

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ignis bench: not available in this build yet\n");
    return 1;
}
