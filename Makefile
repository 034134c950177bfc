# Thin wrapper over CMake: `make run` and `make test` are the two commands
# a newcomer needs (see README.md); `make check` is the quick test tier.
BUILD       ?= build
BUILD_ASAN  ?= build-asan
VENV        ?= .venv
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
MODEL       ?= $(HOME)/.cache/ignis/gemma-3-270m-q4_k_m.gguf
PROMPT      ?= Once upon a time, in a quiet village at the edge of an old forest, there lived
CMAKE_FLAGS ?=
PREFIX      ?= /usr/local
# e2e tests spread over workers (pytest-xdist), one file per worker
PYTEST_JOBS ?= $(JOBS)
PYTEST_PAR  := -n $(PYTEST_JOBS) --dist loadfile
QUICK_E2E   := tests/e2e/test_quant.py tests/e2e/test_install.py
ASAN_ENV    := ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1

.PHONY: all build asan deps venv model run check test test-unit test-e2e test-asan \
        test-asan-slow test-slow install check-aarch64 clean

all: build

deps:
	@scripts/install-deps.sh

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

asan:
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DIGNIS_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)

venv: $(VENV)/.ready
$(VENV)/.ready: tests/requirements.txt
	@scripts/make-venv.sh $(VENV) tests/requirements.txt
	@touch $@

model: $(MODEL)
$(MODEL):
	@scripts/fetch-model.sh $(MODEL)

# The default model is a base model: it continues text rather than answering
# instructions, so the prompt is the opening of a story, and a mild repeat
# penalty keeps a small model from circling.
run: deps build model
	@$(BUILD)/ignis run $(MODEL) -p "$(PROMPT)" -n 200 --repeat-penalty 1.1
	@echo
	@echo "(Gemma 3 270M base continues text. To chat, give an instruction-tuned model:"
	@echo " $(BUILD)/ignis chat gemma-3-270m-it-Q4_K_M.gguf; see README.md.)"

# The quick tier, under a minute on two cores: the unit tests not marked
# IG_TEST_SLOW and a few quick end-to-end tests (the installed library).
check: build model venv
	@$(BUILD)/ignis_tests --fast
	@IGNIS_BUILD=$(BUILD) $(VENV)/bin/python -m pytest -q -p no:cacheprovider $(QUICK_E2E)

# The test suite: every unit test but those marked IG_TEST_SLOW, and every
# end-to-end test but those marked slow (pytest, PYTEST_JOBS workers). The
# tiers of several minutes per test run in CI after it (.ci/run):
# `make test-slow` (the slow unit and end-to-end tests: the real model on
# lavapipe, whole-model comparisons), `make test-asan` and
# `make test-asan-slow` (the sanitizer build).
test: deps build venv model
	@$(MAKE) --no-print-directory test-unit test-e2e

test-unit:
	@$(BUILD)/ignis_tests --fast

test-e2e:
	@IGNIS_BUILD=$(BUILD) $(VENV)/bin/python -m pytest -q $(PYTEST_PAR) -m "not slow" tests/e2e

test-slow: build venv model
	@$(BUILD)/ignis_tests --slow
	@IGNIS_BUILD=$(BUILD) $(VENV)/bin/python -m pytest -q -m slow tests/e2e

# The sanitizer build over the quick unit tier and the e2e tests marked asan
# (one at a time: their servers' deadlines assume the machine is not shared
# with another sanitized server).
test-asan: asan venv model
	@$(ASAN_ENV) $(BUILD_ASAN)/ignis_tests --fast
	@IGNIS_BUILD=$(BUILD_ASAN) IGNIS_ASAN=1 $(VENV)/bin/python -m pytest -q -m asan tests/e2e

test-asan-slow: asan
	@$(ASAN_ENV) $(BUILD_ASAN)/ignis_tests --slow

install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# The library cross-compiled for aarch64 (the NEON path), run by CI.
check-aarch64:
	@scripts/check-aarch64.sh

# A soak of the server (bench/soak, docs/server.md): SOAK_DURATION of seeded
# mixed load on the default model, then the checks (no lost request, no
# unexpected status, RSS, fds, threads, inter-token latency); exit 1 on any
# failure. SOAK_OUT keeps samples.json and soak.png.
SOAK_DURATION ?= 3m
SOAK_OUT      ?=
.PHONY: soak
soak: build venv model
	@$(VENV)/bin/python bench/soak --duration $(SOAK_DURATION) --ignis $(BUILD)/ignis \
		--model $(MODEL) $(if $(SOAK_OUT),--out $(SOAK_OUT))

# The libFuzzer targets (tests/fuzz, docs/fuzzing.md), built with clang in
# build-fuzz, each run FUZZ_SECONDS on a scratch copy of its seed corpus.
FUZZ_SECONDS ?= 60
.PHONY: fuzz
fuzz:
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(JOBS) scripts/fuzz.sh

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-aarch64
