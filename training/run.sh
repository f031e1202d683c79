#!/usr/bin/env bash
# The detector recipe's one command. See training/README.md for what each mode costs.
#
#   training/run.sh --setup                 make the training venv (TRAIN_VENV, default ~/.cache/faithtrace/train-venv)
#   training/run.sh --tiny [OUT]            CPU: the tiny test model, end to end (default OUT tests/data/tiny-detector)
#   training/run.sh --prepare-carry         here: fetch + check mpnet, pack it and the data into training/.carry
#   training/run.sh --gpu TRANSFER          GPU machine: train mpnet from training/.carry, trained weights -> TRANSFER
#   training/run.sh --finish TRANSFER [OUT] here: export, quantise, check, figures -> OUT (default build/detector)
#   training/run.sh --cpu-partial [OUT]     CPU: train the top layers only, from cached lower layers (default
#                                           OUT build/detector-cpu); resumes where a killed run stopped
#
# Extra arguments after the mode's own go to `python -m training.train` (e.g. --epochs 4 --lr 3e-5).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TRAIN_VENV="${TRAIN_VENV:-$HOME/.cache/faithtrace/train-venv}"
if [[ -n "${TRAIN_PYTHON:-}" ]]; then PY="$TRAIN_PYTHON"
elif [[ -x "$TRAIN_VENV/bin/python" ]]; then PY="$TRAIN_VENV/bin/python"
else PY=python3; fi
CARRY=training/.carry
MPNET="$HOME/.cache/faithtrace/base/all-mpnet-base-v2"
DATA_DEFAULT="$ROOT/../shared/data/ragtruth_qa_train.jsonl"
export PYTHONUNBUFFERED=1

mode="${1:---help}"; shift || true
case "$mode" in
  --setup)
    python3 -m venv "$TRAIN_VENV"
    "$TRAIN_VENV/bin/pip" install --disable-pip-version-check -q -r training/requirements.txt
    echo "training venv ready: $TRAIN_VENV" ;;
  --tiny)
    out="${1:-tests/data/tiny-detector}"; shift || true
    "$PY" -m training.fetch_base mpnet --dest "$MPNET"
    transfer="$(mktemp -d)"; trap 'rm -rf "$transfer"' EXIT
    # 2 layers of width 64, 800 real answers + 400 synthetic, 3 epochs, every evaluation answer:
    # about 10 minutes on 2 busy cores. Only the tokenizer and config come from mpnet; the weights are random.
    nice "$PY" -m training.train all --tiny --cpu --base "$MPNET" --base-name sentence-transformers/all-mpnet-base-v2 \
      --data "${DATA:-$DATA_DEFAULT}" --out "$out" --transfer "$transfer" --max-train 800 --max-length 512 --epochs 3 --lr 1e-3 \
      --batch 16 --log-every 20 "$@" ;;
  --prepare-carry)
    "$PY" -m training.fetch_base mpnet --dest "$MPNET"
    rm -rf "$CARRY"; mkdir -p "$CARRY"
    "$PY" -m training.pack_base pack "$MPNET" "$CARRY/base"
    gzip -9 -c "${DATA:-$DATA_DEFAULT}" > "$CARRY/ragtruth_qa_train.jsonl.gz"
    # One device call carries the working tree (tracked and untracked-not-ignored files) plus the carry.
    tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    carried=$(du -sb "$CARRY" | cut -f1)
    echo "travels: tree $((tree >> 20)) MiB + carry $((carried >> 20)) MiB = $(((tree + carried) >> 20)) MiB of 64"
    if (( tree + carried >= 64 << 20 )); then echo "too big for one device call" >&2; exit 1; fi
    echo "device call: command 'training/run.sh --gpu \"\$OUT/transfer\" 2>&1 | tee \"\$OUT/train.log\"', carry [\"$CARRY\"]" ;;
  --gpu)
    transfer="${1:?--gpu TRANSFER_DIR}"; shift
    base=/tmp/faithtrace-base
    "$PY" -m training.pack_base unpack "$CARRY/base" "$base"
    "$PY" -m training.train train --base "$base" --data "$CARRY/ragtruth_qa_train.jsonl.gz" --transfer "$transfer" \
      --epochs 5 --lr 4e-5 --batch 16 --max-length 512 --log-every 50 "$@" ;;
  --finish)
    transfer="${1:?--finish TRANSFER_DIR [OUT]}"; shift
    out="${1:-build/detector}"; shift || true
    base="$HOME/.cache/faithtrace/base/mpnet-from-carry"
    "$PY" -m training.pack_base unpack "$CARRY/base" "$base"
    data="$CARRY/ragtruth_qa_train.jsonl.gz"
    nice "$PY" -m training.train finish --base "$base" --data "$data" --transfer "$transfer" --out "$out" "$@" ;;
  --cpu-partial)
    out="${1:-build/detector-cpu}"; shift || true
    "$PY" -m training.fetch_base mpnet --dest "$MPNET"
    # One cache of layers 8, 10 and 11 serves --freeze-below 8, 10 and 11 (override after OUT). Everything
    # resumes: the cache by shard, training from the checkpoint in OUT/.transfer. Lowest priority: hours of
    # CPU on a machine others share.
    nice -n 19 "$PY" -m training.train all --cpu --base "$MPNET" --data "${DATA:-$DATA_DEFAULT}" --out "$out" \
      --cache "${CACHE:-$HOME/.cache/faithtrace/detector-cache}" --cache-layers 8 10 11 --freeze-below 10 \
      --epochs 3 --lr 1e-4 --batch 16 --checkpoint-minutes 15 --resume --log-every 20 "$@" ;;
  *)
    sed -n '2,13p' "$0"; exit 2 ;;
esac
