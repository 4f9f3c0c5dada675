// Package demo holds the demo agents (echo, slow, math.add) and the demo
// command that runs them; up starts the same agents.
package demo
