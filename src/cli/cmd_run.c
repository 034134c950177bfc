#include "cli.h"

#include <stdio.h>

int cmd_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ignis run: not available in this build yet\n");
    return 1;
}
