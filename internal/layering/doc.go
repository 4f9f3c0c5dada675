// Package layering holds no code: its test checks the module's package
// graph against the order of docs/architecture.md — no package imports one
// above it, agentkit never depends on the dispatcher — and that no non-test
// package grows past what one person can hold in mind (maxLines).
package layering
