// Package tracing holds the end-to-end tests of the traces Agent-Reach
// leaves (OpenTelemetry): a test binary of its own, whose process-wide
// tracer provider records into memory without slowing any other test.
package tracing
