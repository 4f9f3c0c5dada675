// Package declare holds what agent types declare and what tasks require,
// and decides whether one satisfies the other — with no connection of its
// own, so all of it is tested without a server.
//
// A Declaration says what an agent type can do and refuses (labels,
// limits, permissions, JSON Schemas of its inputs), stored under its type
// in REACH_CAPS; a Requirement (Reach-Require, or a policy's require) says
// what a task needs. Compile validates a declaration and indexes it;
// CompiledDeclaration.Match decides the hard filter without allocating and
// ValidateInput checks payloads against the declared input schema.
//
// Declarations are documents people write, in JSON or YAML; they are read
// strictly (registry/document) and every error names the field by its
// path. docs/declarations.md describes them. The registry stores them and
// keeps the last good one of every type (registry.Catalog).
package declare
