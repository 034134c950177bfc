# Thin wrapper over CMake: `make run` and `make test` are the two commands
# a newcomer needs (see README.md).
BUILD       ?= build
BUILD_ASAN  ?= build-asan
VENV        ?= .venv
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
MODEL       ?= $(HOME)/.cache/ignis/gemma-3-270m-q4_k_m.gguf
PROMPT      ?= Once upon a time, in a quiet village at the edge of an old forest, there lived
CMAKE_FLAGS ?=

.PHONY: all build asan deps venv model run test test-unit test-e2e test-asan check-aarch64 clean

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

# Unit tests (C runner), end-to-end tests (pytest), then the sanitizer build.
test: deps build venv model
	@$(MAKE) --no-print-directory test-unit test-e2e test-asan

test-unit:
	@$(BUILD)/ignis_tests

test-e2e:
	@IGNIS_BUILD=$(BUILD) $(VENV)/bin/python -m pytest -q tests/e2e

test-asan: asan
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(BUILD_ASAN)/ignis_tests
	@IGNIS_BUILD=$(BUILD_ASAN) IGNIS_ASAN=1 $(VENV)/bin/python -m pytest -q -m asan tests/e2e

# The library cross-compiled for aarch64 (the NEON path), run by CI.
check-aarch64:
	@scripts/check-aarch64.sh

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-aarch64
