#include "cli.h"

#include <stdio.h>

int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ignis info: not available in this build yet\n");
    return 1;
}
