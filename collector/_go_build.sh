# Shared by collector/build.sh and collector/build-jaeger.sh (sourced, not run): where binaries are cached,
# the `--print-path` / already-built shortcut, the Go environment of a build, and the final rename.
# The caller sets `set -euo pipefail` first; `exit` here ends the calling script.

cache="${FAITHTRACE_CACHE:-$HOME/.cache/faithtrace}"

# Print the binary's path and stop when only the path is asked for, or when the binary is already built.
#   go_build_cached <binary> "$@"
go_build_cached() {
	local binary="$1"
	if [ "${2:-}" = --print-path ] || [ -x "$binary" ]; then
		echo "$binary"
		exit 0
	fi
}

# Go must be installed; modules come from the proxy; FAITHTRACE_GO_BUILD_P packages at a time (default 2) so
# that the build shares the machine; a static binary, built by the installed toolchain (never a downloaded one).
#   go_build_env <script name> [extra GOFLAGS]
go_build_env() {
	command -v go >/dev/null || { echo "$1: Go is not installed (https://go.dev/dl)" >&2; exit 1; }
	mkdir -p "$cache"
	export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"
	export GOFLAGS="${GOFLAGS:-} ${2:+$2 }-p=${FAITHTRACE_GO_BUILD_P:-2}"
	export CGO_ENABLED=0 GOTOOLCHAIN=local
}

# Rename the finished build into place last, so that a build killed half-way never leaves a binary that looks
# finished; then report it and print its path. With STEP_TIMES=<file> (make test's step log), the build's
# time goes there too, as "<step><TAB><milliseconds>".
#   go_build_done <built file next to the binary> <binary> <what> <start $SECONDS> <step>
go_build_done() {
	mv "$1" "$2"
	echo "built $3 in $((SECONDS - $4)) s: $(du -h "$2" | cut -f1) $2" >&2
	step_time "$5" "$((SECONDS - $4))"
	echo "$2"
}

# Append a step's seconds to $STEP_TIMES, when it names a file.
#   step_time <step> <seconds>
step_time() {
	if [ -n "${STEP_TIMES:-}" ]; then printf '%s\t%s\n' "$1" "$(($2 * 1000))" >>"$STEP_TIMES"; fi
}
