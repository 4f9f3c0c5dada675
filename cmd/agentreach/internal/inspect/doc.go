// Package inspect holds the commands that read what the registry and the
// dispatcher replicas hold: agents, stats and breakers.
package inspect
