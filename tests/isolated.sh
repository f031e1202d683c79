#!/usr/bin/env bash
# Runs a command in a private network namespace that has only loopback, when we may (root + unshare).
# Why: Phoenix binds its OTLP gRPC port on [::], and load/fault tests must never reach past this machine.
set -euo pipefail
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null \
   && unshare -n true 2>/dev/null; then
  exec unshare -n bash -c 'ip link set lo up && exec "$@"' isolated "$@"
fi
echo "tests/isolated.sh: not root or no unshare; running without network isolation" >&2
exec "$@"
