/* Hugging Face checkpoint directories (src/model/hf.c, safetensors.c): the
 * input is config.json, a NUL byte, then model.safetensors. The safetensors
 * part is also parsed from memory on its own; then both files are written to
 * a scratch directory that hf_open reads. */
#define _GNU_SOURCE
#include "fuzz_common.h"

#include "model/hf.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

static char g_dir[256];
static char g_config[300], g_weights[300];

static void remove_dir(void) {
    unlink(g_config);
    unlink(g_weights);
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/ignis-fuzz-hf-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) abort();
    snprintf(g_config, sizeof g_config, "%s/config.json", g_dir);
    snprintf(g_weights, sizeof g_weights, "%s/model.safetensors", g_dir);
    atexit(remove_dir);
    return 0;
}

static bool write_file(const char *path, const uint8_t *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return false;
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) break;
        off += (size_t)n;
    }
    close(fd);
    return off == size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *cfg, *st;
    size_t ncfg, nst;
    fuzz_split(data, size, &cfg, &ncfg, &st, &nst);

    st_file *sf = NULL;
    if (st_parse(st, nst, &sf) == IG_OK) {
        for (size_t i = 0; i < sf->tensors.count; i++) {
            char name[128];
            (void)hf_map_tensor_name(sf->tensors.items[i].name, name, sizeof name);
        }
        st_close(sf);
    }

    if (!write_file(g_config, cfg, ncfg) || !write_file(g_weights, st, nst)) return 0;
    hf_model *m = NULL;
    if (hf_open(g_dir, &m) == IG_OK) {
        for (size_t i = 0; i < m->tensors.count; i++)
            if (!m->tensors.items[i].name) abort();
        hf_close(m);
    }
    return 0;
}
