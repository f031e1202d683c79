#!/usr/bin/env bash
# Build the faithtrace OpenTelemetry Collector with the official Collector Builder, once per machine.
#
#   collector/build.sh              -> prints the path of the binary (building it first if it is not cached)
#   collector/build.sh --print-path -> prints where the binary is or would be, and builds nothing
#
# The binary is cached under ~/.cache/faithtrace/otelcol-<version>-<manifest hash>/, so an unchanged manifest
# is never rebuilt and a changed one never reuses a stale binary. Go's module and build caches stay in their
# default places (~/go/pkg/mod, ~/.cache/go-build), which makes a rebuild after a manifest edit cheap.
# The build is niced and runs FAITHTRACE_GO_BUILD_P packages at a time (default 2) so that it shares the
# machine; quiet unless it fails, when the builder's log is printed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
manifest="$here/builder-config.yaml"
version="$(sed -n 's/^  version: *//p' "$manifest" | head -1)"
builder_version="v${version%%-*}"
hash="$(sha256sum "$manifest" | cut -c1-12)"
cache="${FAITHTRACE_CACHE:-$HOME/.cache/faithtrace}"
out="$cache/otelcol-$version-$hash"
binary="$out/otelcol-faithtrace"

if [ "${1:-}" = --print-path ] || [ -x "$binary" ]; then
	echo "$binary"
	exit 0
fi

command -v go >/dev/null || { echo "collector/build.sh: Go is not installed (https://go.dev/dl)" >&2; exit 1; }
mkdir -p "$cache"
work="$(mktemp -d "$cache/otelcol-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
log="$work/build.log"
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}" GOFLAGS="${GOFLAGS:-} -p=${FAITHTRACE_GO_BUILD_P:-2}"
export CGO_ENABLED=0 GOTOOLCHAIN=local
start=$SECONDS
{
	GOBIN="$cache/ocb-$builder_version" nice -n 10 go install "go.opentelemetry.io/collector/cmd/builder@$builder_version"
	sed "s|^  output_path: .*|  output_path: $work/src|" "$manifest" >"$work/manifest.yaml"
	nice -n 10 "$cache/ocb-$builder_version/builder" --config="$work/manifest.yaml"
} >"$log" 2>&1 || {
	cat "$log" >&2
	echo "collector/build.sh: building the Collector failed (log above)" >&2
	exit 1
}
mkdir -p "$out"
# Rename into place last: a build killed half-way never leaves a binary that looks finished.
cp "$work/src/otelcol-faithtrace" "$out/.otelcol-faithtrace.tmp"
mv "$out/.otelcol-faithtrace.tmp" "$binary"
echo "built the Collector in $((SECONDS - start)) s: $(du -h "$binary" | cut -f1) $binary" >&2
echo "$binary"
