#!/usr/bin/env bash
# Apache Kafka's broker (KRaft, no ZooKeeper) for the Kafka-path tests and benchmarks, once per machine: the
# `kafka_2.13` artifact and its runtime dependencies from Maven Central (collector/kafka/pom.xml), copied into a
# cached classpath. Java 17 and Maven must be installed; nothing is built.
#
#   collector/fetch-kafka.sh              -> prints the classpath folder (fetching it first if not cached)
#   collector/fetch-kafka.sh --print-path -> prints where it is or would be; fetches nothing
#
# Cached under ~/.cache/faithtrace/kafka-<version>-<hash of the pom>/lib; a `.fetched` mark is written last, so
# a fetch killed half-way is never taken for a finished one.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pom="$here/kafka/pom.xml"
version="$(sed -n 's|^ *<kafka.version>\(.*\)</kafka.version>$|\1|p' "$pom")"
hash="$(sha256sum "$pom" | cut -c1-12)"
cache="${FAITHTRACE_CACHE:-$HOME/.cache/faithtrace}"
lib="$cache/kafka-$version-$hash/lib"
if [ "${1:-}" = --print-path ] || [ -e "$lib/.fetched" ]; then
	echo "$lib"
	exit 0
fi
for tool in java mvn; do
	command -v "$tool" >/dev/null || { echo "collector/fetch-kafka.sh: $tool is not installed (Java 17+, Maven)" >&2; exit 1; }
done
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
start=$SECONDS
rm -rf "$lib"
if ! nice -n 10 mvn -B -q -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
	-DoutputDirectory="$lib" >"$log" 2>&1; then
	cat "$log" >&2
	echo "collector/fetch-kafka.sh: resolving Kafka $version from Maven Central failed (log above)" >&2
	exit 1
fi
touch "$lib/.fetched"
echo "fetched Kafka $version in $((SECONDS - start)) s: $(du -sh "$lib" | cut -f1) $lib" >&2
# make test's step log (see the Makefile's STEP_TIMES).
if [ -n "${STEP_TIMES:-}" ]; then printf 'kafka\t%s\n' "$(((SECONDS - start) * 1000))" >>"$STEP_TIMES"; fi
echo "$lib"
