#!/usr/bin/env bash
# Creates the peers' venv used by overhead.py and accuracy.py: faithtrace (editable) plus DeepEval, RAGAS,
# OpenInference, Logfire and Langfuse, pinned in requirements-peers.txt. Separate from .venv because the peers
# pull in langchain and friends. About a minute and ~1 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${FAITHTRACE_BENCH_PEERS_VENV:-$HOME/.cache/faithtrace/bench-peers-venv}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q -U pip
"$VENV/bin/python" -m pip install --disable-pip-version-check -q -c constraints.txt -e . \
    -r benchmarks/requirements-peers.txt
echo "peers venv ready: $VENV"
