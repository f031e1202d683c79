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
# shellcheck source=collector/_go_build.sh
. "$here/_go_build.sh"
out="$cache/otelcol-$version-$hash"
binary="$out/otelcol-faithtrace"

go_build_cached "$binary" "$@"
go_build_env collector/build.sh
work="$(mktemp -d "$cache/otelcol-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
log="$work/build.log"
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
cp "$work/src/otelcol-faithtrace" "$out/.otelcol-faithtrace.tmp"
go_build_done "$out/.otelcol-faithtrace.tmp" "$binary" "the Collector" "$start" otelcol
