// Package benchmark holds the bench command, which runs the scenarios of
// integration/bench and prints their reports (BENCHMARKS.md).
package benchmark
