"""The installed library: `cmake --install` into a temporary prefix, then a
small C program built with `pkg-config --cflags --libs ignis` alone (no
source tree on its include path) loads a tiny fixture model, checks its
logits against transformers' and decodes a few tokens greedily."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get("IGNIS_FIXTURES") or REPO / "tests" / "fixtures")
TINY = FIXTURES / "hf" / "tiny-27b-like"

PROGRAM = r"""
#include <ignis.h>

#include <stdio.h>
#include <stdlib.h>

/* usage: prog MODEL_DIR N_NEW TOKEN...: prints the last prompt position's
 * logits, then N_NEW greedy tokens */
int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int n_new = atoi(argv[2]), n_prompt = argc - 3;
    int32_t tokens[64], pos[64], seq[64];
    uint8_t want[64];
    if (n_prompt > 64) return 2;
    for (int i = 0; i < n_prompt; i++) {
        tokens[i] = atoi(argv[3 + i]);
        pos[i] = i;
        seq[i] = 0;
        want[i] = i == n_prompt - 1;
    }
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 1;
    ig_model *model = NULL;
    if (ig_model_load(argv[1], &mp, &model) != IG_OK) {
        fprintf(stderr, "load: %s\n", ig_last_error());
        return 1;
    }
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 64;
    cp.kv_type = IG_KV_F32;
    ig_context *ctx = NULL;
    if (ig_context_create(model, &cp, &ctx) != IG_OK) {
        fprintf(stderr, "context: %s\n", ig_last_error());
        return 1;
    }
    int n_vocab = ig_model_hparams(model)->n_vocab;
    ig_batch b = {n_prompt, tokens, pos, seq, want};
    for (int step = 0; step <= n_new; step++) {
        if (ig_decode(ctx, &b) != IG_OK) {
            fprintf(stderr, "decode: %s\n", ig_last_error());
            return 1;
        }
        const float *logits = ig_get_logits(ctx, 0);
        if (!logits) return 1;
        int best = 0;
        for (int v = 0; v < n_vocab; v++) {
            if (step == 0) printf("%s%.9g", v ? " " : "logits ", logits[v]);
            if (logits[v] > logits[best]) best = v;
        }
        printf(step == 0 ? "\ntokens %d" : " %d", best);
        tokens[0] = best;
        pos[0] = n_prompt + step;
        want[0] = 1;
        b.n_tokens = 1;
    }
    printf("\n");
    ig_context_free(ctx);
    ig_model_free(model);
    return 0;
}
"""


def test_installed_library_builds_and_runs_a_program(ignis_build: Path, tmp_path: Path):
    if os.environ.get("IGNIS_ASAN"):
        pytest.skip("the install is checked on the normal build")
    for tool in ("cc", "pkg-config"):
        if not shutil.which(tool):
            pytest.skip(f"no {tool}")
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", str(ignis_build), "--prefix", str(prefix)],
                   check=True, capture_output=True, text=True)
    assert (prefix / "include" / "ignis.h").is_file()
    assert [p.name for p in (prefix / "include").iterdir()] == ["ignis.h"]
    assert (prefix / "bin" / "ignis").is_file()
    pcs = list(prefix.glob("lib*/**/pkgconfig/ignis.pc"))
    assert len(pcs) == 1, pcs
    libdir = pcs[0].parent.parent

    env = dict(os.environ, PKG_CONFIG_PATH=str(pcs[0].parent))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "ignis"], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
    assert [Path(f[2:]).resolve() for f in flags if f.startswith("-I")] == \
        [(prefix / "include").resolve()]
    assert [Path(f[2:]).resolve() for f in flags if f.startswith("-L")] == [libdir.resolve()]
    assert "-lignis" in flags
    src = tmp_path / "prog.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "prog"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(src), "-o", str(exe),
                    *flags], check=True, capture_output=True, text=True)

    ref = json.loads((TINY / "reference.json").read_text())
    prompt = ref["sequences"][0]["tokens"]
    n_new = 6
    run_env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    out = subprocess.run([str(exe), str(TINY / "f32"), str(n_new), *map(str, prompt)],
                         env=run_env, check=True, capture_output=True, text=True, timeout=120)
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    got = np.array(lines["logits"].split(), dtype=np.float64)
    want = np.array(ref["sequences"][0]["logits"][len(prompt) - 1], dtype=np.float64)
    assert got.shape == want.shape
    # the CPU backend's tolerance against transformers' float32 logits
    assert np.max(np.abs(got - want)) <= 1e-3 * max(1.0, np.max(np.abs(want)))
    tokens = [int(t) for t in lines["tokens"].split()]
    assert len(tokens) == n_new + 1
    assert tokens[0] == int(np.argmax(want))

    # the greedy continuation transformers produced for its prompt
    g = ref["greedy"]
    out = subprocess.run([str(exe), str(TINY / "f32"), str(n_new), *map(str, g["prompt"])],
                         env=run_env, check=True, capture_output=True, text=True, timeout=120)
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    got_ids = [int(t) for t in lines["tokens"].split()]
    assert got_ids == g["output"][len(g["prompt"]):len(g["prompt"]) + n_new + 1]
