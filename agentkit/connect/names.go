package connect

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// CapabilityName returns the capability that serves the upstream name under
// the connector's name prefix (see the package doc for the rule), or why
// there is none.
func CapabilityName(prefix, name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("the name is empty")
	}
	var b strings.Builder
	b.Grow(len(prefix) + 1 + len(name) + 4)
	b.WriteString(prefix)
	b.WriteByte('.')
	var prev rune
	for _, r := range name {
		switch {
		case r >= 'A' && r <= 'Z':
			if (prev >= 'a' && prev <= 'z') || (prev >= '0' && prev <= '9') {
				b.WriteByte('_')
			}
			b.WriteRune(r + ('a' - 'A'))
		case (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' || r == '-' || r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		prev = r
	}
	c := b.String()
	if err := streams.ValidateCapability(c); err != nil {
		return "", fmt.Errorf("%q maps to no valid capability: %w", name, err)
	}
	return c, nil
}

// Skipped is an upstream name left out, with the reason.
type Skipped struct {
	Name   string
	Reason string
}

// entry is one upstream name on its way to a capability.
type entry struct {
	name string // upstream name
	cap  declare.DeclaredCapability
	err  error
}

// resolve turns entries into the served set: each entry with an error is
// skipped; names given more than once, and distinct names mapping onto one
// capability, are skipped together (which of them a call would reach is not
// knowable). The result is sorted by capability.
func resolve(entries []entry) (served []entry, skipped []Skipped) {
	names := map[string]int{}
	caps := map[string][]string{}
	for _, e := range entries {
		names[e.name]++
		if e.err == nil {
			caps[e.cap.Name] = append(caps[e.cap.Name], e.name)
		}
	}
	seenDup := map[string]bool{}
	for _, e := range entries {
		switch {
		case names[e.name] > 1:
			if !seenDup[e.name] {
				seenDup[e.name] = true
				skipped = append(skipped, Skipped{e.name, fmt.Sprintf("the name is given %d times", names[e.name])})
			}
		case e.err != nil:
			skipped = append(skipped, Skipped{e.name, e.err.Error()})
		case len(caps[e.cap.Name]) > 1:
			others := slices.DeleteFunc(slices.Clone(caps[e.cap.Name]), func(n string) bool { return n == e.name })
			skipped = append(skipped, Skipped{e.name, fmt.Sprintf("its capability %q is also the one of %q", e.cap.Name, others)})
		default:
			served = append(served, e)
		}
	}
	slices.SortFunc(served, func(a, b entry) int { return strings.Compare(a.cap.Name, b.cap.Name) })
	return served, skipped
}

// checkCapability validates one capability as its own declaration of type
// typ would, so one bad schema skips one capability, not the whole set.
func checkCapability(typ string, c declare.DeclaredCapability) error {
	d := declare.Declaration{Type: typ, Capabilities: []declare.DeclaredCapability{c}}
	if err := d.Validate(); err != nil {
		return err
	}
	return nil
}

// rawSchema marshals a decoded schema; nil stays nil.
func rawSchema(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if string(b) == "null" {
		return nil, nil
	}
	return b, nil
}

// declaration returns the declaration of typ serving entries.
func declaration(typ, version, description string, served []entry) *declare.Declaration {
	d := &declare.Declaration{Type: typ, Version: version, Description: description}
	for _, e := range served {
		d.Capabilities = append(d.Capabilities, e.cap)
	}
	return d
}
