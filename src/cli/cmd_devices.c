#include "cli.h"

#include <stdio.h>

int cmd_devices(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ignis devices: not available in this build yet\n");
    return 1;
}
