// Package document reads the documents people write by hand — agent
// declarations, requirements, policy values, workflow definitions — in JSON
// or YAML, strictly: an unknown key, a key given twice, a value of the wrong
// type or nesting too deep is an error that names the field by its path
// ("capabilities[1].timeout_ms"), never a Go type. Decode reads a document
// into a struct with json tags, ReadTree into a generic tree, and Problems
// gathers every validation problem of a document into one error.
//
// It needs no connection: registry/declare and registry/policy build on it,
// and the registry stores what they accept.
package document
