#include "cli.h"

#include <stdio.h>

int cmd_logits(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ignis logits: not available in this build yet\n");
    return 1;
}
