#include "cli.h"

#include <stdio.h>

int cmd_synth(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ignis synth: not available in this build yet\n");
    return 1;
}
