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
# shellcheck source=collector/_go_build.sh
. "$here/_go_build.sh"
out="$cache/jaeger-$version-$hash"
binary="$out/jaeger"

go_build_cached "$binary" "$@"
go_build_env collector/build-jaeger.sh -mod=readonly
mkdir -p "$out"
log="$(mktemp "$cache/jaeger-build.XXXXXX.log")"
start=$SECONDS
if ! (cd "$module" && nice -n 10 go build -trimpath -ldflags="-s -w" -o "$out/.jaeger.tmp" \
	github.com/jaegertracing/jaeger/cmd/jaeger) >"$log" 2>&1; then
	cat "$log" >&2
	echo "collector/build-jaeger.sh: building Jaeger failed (log above)" >&2
	exit 1
fi
rm -f "$log"
go_build_done "$out/.jaeger.tmp" "$binary" "Jaeger $version" "$start" jaeger
