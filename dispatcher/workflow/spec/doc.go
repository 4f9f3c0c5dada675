// Package spec holds workflow definitions (docs/workflows.md): their
// parsing and validation (Parse, Decode), their conditions and the
// references of their input and output mappings, and the evaluation of
// both against a run's values (Scope). It needs no connection: the
// workflow package runs what it defines.
//
// A definition is stored in REACH_POLICY under PolicyPrefix + its name;
// importing the package registers the kind with the registry, so every
// reader of the bucket validates definitions with Parse's rules.
package spec
