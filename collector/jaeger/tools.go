//go:build tools

// Package jaeger pins Jaeger v2 (the Go module github.com/jaegertracing/jaeger, tagged v1.x for its v2
// releases: v1.76.0 is Jaeger 2.13) so that collector/build-jaeger.sh can build its all-in-one binary
// (cmd/jaeger) from the Go module proxy. `go install ...@version` refuses the module because its go.mod
// has a replace directive; this wrapper module repeats that replace.
package jaeger

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
