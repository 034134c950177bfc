#include "cli.h"

#include <stdio.h>

int cmd_chat(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ignis chat: not available in this build yet\n");
    return 1;
}
