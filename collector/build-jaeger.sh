#!/usr/bin/env bash
# Build Jaeger v2 (all-in-one, cmd/jaeger) from its Go modules, once per machine, for the trace-UI tests.
#
#   collector/build-jaeger.sh               -> prints the binary's path (building it first if not cached)
#   collector/build-jaeger.sh --print-path  -> prints where it is or would be; builds nothing
#
# The version is pinned in collector/jaeger/go.mod (+ go.sum); the binary is cached under
# ~/.cache/faithtrace/jaeger-<version>-<hash of go.mod and go.sum>/. Niced, FAITHTRACE_GO_BUILD_P packages at
# a time (default 2); quiet unless it fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
module="$here/jaeger"
version="$(sed -n 's|^require github.com/jaegertracing/jaeger \(v[^ ]*\)$|\1|p' "$module/go.mod")"
hash="$(cat "$module/go.mod" "$module/go.sum" | sha256sum | cut -c1-12)"
cache="${FAITHTRACE_CACHE:-$HOME/.cache/faithtrace}"
out="$cache/jaeger-$version-$hash"
binary="$out/jaeger"

if [ "${1:-}" = --print-path ] || [ -x "$binary" ]; then
	echo "$binary"
	exit 0
fi

command -v go >/dev/null || { echo "collector/build-jaeger.sh: Go is not installed" >&2; exit 1; }
mkdir -p "$out"
log="$(mktemp "$cache/jaeger-build.XXXXXX.log")"
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}" GOFLAGS="${GOFLAGS:-} -mod=readonly -p=${FAITHTRACE_GO_BUILD_P:-2}"
export CGO_ENABLED=0 GOTOOLCHAIN=local
start=$SECONDS
if ! (cd "$module" && nice -n 10 go build -trimpath -ldflags="-s -w" -o "$out/.jaeger.tmp" \
	github.com/jaegertracing/jaeger/cmd/jaeger) >"$log" 2>&1; then
	cat "$log" >&2
	echo "collector/build-jaeger.sh: building Jaeger failed (log above)" >&2
	exit 1
fi
# Rename into place last: a build killed half-way never leaves a binary that looks finished.
mv "$out/.jaeger.tmp" "$binary"
rm -f "$log"
echo "built Jaeger $version in $((SECONDS - start)) s: $(du -h "$binary" | cut -f1) $binary" >&2
echo "$binary"
