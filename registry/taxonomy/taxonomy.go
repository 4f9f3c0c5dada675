// Package taxonomy governs the capability catalog: an optional list of
// official first-level capability types, kept under the key "taxonomy" of
// REACH_POLICY, and the warnings `agentreach caps` and the dashboard give
// for a capability outside it or named almost like another.
//
// A capability's type is the first token of its name ("orders" of
// "orders.query"; "echo" of "echo"); the rest of the name is free. The
// checks are pure functions: they warn, they never refuse a declaration.
//
// Two names are near-duplicates when, normalised (lowercase, split into
// words at '.', '-', '_' and spaces), every word of the shorter matches a
// different word of the longer and the longer has at most one word more.
// Words match when equal or, both of 4 letters or more, when one is the
// other's prefix ("data", "database") or one edit apart ("query",
// "qeury"), and hold no digit ("shard01" and "shard02" differ). So "query", "data-query" and "database.query" are
// near-duplicates of one another, and "orders.query" and "users.query"
// are not.
package taxonomy

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/agent-reach/agentreach/registry/document"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// PolicyKey is the REACH_POLICY key of the taxonomy.
const PolicyKey = "taxonomy"

// MaxTypes bounds the types of a taxonomy: it is meant to be short.
const MaxTypes = 200

// maxDescription bounds a type's description, in bytes.
const maxDescription = 500

// Taxonomy is the official first-level capability types. It is immutable
// once parsed.
type Taxonomy struct {
	Types []Type `json:"types"`
}

// Type is one official first-level capability type.
type Type struct {
	// Name is one capability token: lowercase letters, digits, '_' and
	// '-', starting with a letter or digit.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

func init() { policy.RegisterKind(PolicyKey, decode) }

// Parse reads a taxonomy from JSON or YAML strictly (an unknown key, a key
// given twice, a value of the wrong type or a bad type name is an error
// naming the field, "types[2].name"), as `agentreach policy set taxonomy`
// does. Errors wrap policy.ErrInvalid.
func Parse(data []byte) (*Taxonomy, error) {
	v, err := policy.Parse(PolicyKey, data)
	if err != nil {
		return nil, err
	}
	return v.Decoded.(*Taxonomy), nil
}

// decode is the policy.Decoder of the "taxonomy" kind.
func decode(key string, value json.RawMessage) (any, error) {
	if key != PolicyKey {
		return nil, fmt.Errorf("the taxonomy is stored under the key %q alone", PolicyKey)
	}
	tree, err := document.ReadTree(value)
	if err != nil {
		return nil, err
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want an object {\"types\": [{\"name\", \"description\"}, …]}")
	}
	var problems []string
	add := func(path, format string, args ...any) {
		problems = append(problems, path+": "+fmt.Sprintf(format, args...))
	}
	for k := range obj {
		if k != "types" {
			add(k, "unknown key (want types)")
		}
	}
	list, ok := obj["types"].([]any)
	switch {
	case obj["types"] == nil:
		add("types", "required: a list of {name, description}")
	case !ok:
		add("types", "want a list of {name, description}")
	case len(list) > MaxTypes:
		add("types", "%d types, more than the %d allowed (a taxonomy is a short list)", len(list), MaxTypes)
	}
	t := &Taxonomy{Types: []Type{}}
	seen := map[string]int{}
	for i, item := range list {
		path := fmt.Sprintf("types[%d]", i)
		m, ok := item.(map[string]any)
		if !ok {
			add(path, "want an object {name, description}")
			continue
		}
		var ty Type
		for k, v := range m {
			s, isString := v.(string)
			switch {
			case k != "name" && k != "description":
				add(path+"."+k, "unknown key (want name or description)")
			case !isString:
				add(path+"."+k, "want a string")
			case k == "name":
				ty.Name = s
			default:
				ty.Description = s
			}
		}
		if err := validateTypeName(ty.Name); err != nil {
			add(path+".name", "%v", err)
		} else if j, dup := seen[ty.Name]; dup {
			add(path+".name", "%q is also types[%d]", ty.Name, j)
		} else {
			seen[ty.Name] = i
		}
		if len(ty.Description) > maxDescription {
			add(path+".description", "%d bytes, more than the %d allowed", len(ty.Description), maxDescription)
		}
		t.Types = append(t.Types, ty)
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("and %d more", len(problems)-20))
		}
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return t, nil
}

// validateTypeName reports why name cannot be a first-level type.
func validateTypeName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("required: one capability token such as \"query\"")
	case strings.Contains(name, "."):
		return fmt.Errorf("%q: a type is one token, the first of a capability's name (no '.')", name)
	}
	if err := streams.ValidateCapability(name); err != nil {
		return fmt.Errorf("%q: lowercase letters, digits, '_' and '-', starting with a letter or digit", name)
	}
	return nil
}

// Names returns the type names, in the taxonomy's order.
func (t *Taxonomy) Names() []string {
	if t == nil {
		return nil
	}
	out := make([]string, len(t.Types))
	for i, ty := range t.Types {
		out[i] = ty.Name
	}
	return out
}

// Has reports whether typ is an official type. A nil taxonomy has every
// type: without one, nothing is outside it.
func (t *Taxonomy) Has(typ string) bool {
	return t == nil || slices.ContainsFunc(t.Types, func(ty Type) bool { return ty.Name == typ })
}

// TypeOf returns a capability's first-level type: the first token of its
// name.
func TypeOf(capability string) string {
	typ, _, _ := strings.Cut(capability, ".")
	return typ
}
