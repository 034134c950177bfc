#include "cli.h"

#include <stdio.h>

int cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ignis serve: not available in this build yet\n");
    return 1;
}
