package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/agent-reach/agentreach/registry/document"
	"github.com/agent-reach/agentreach/streams"
)

// KeyACL is the REACH_POLICY key of the access control list (docs/security.md, The ACL).
const KeyACL = "acl"

// ACL says which callers may call which capabilities: the value of "acl" in
// REACH_POLICY. A caller may call a capability when some rule's Caller
// matches the caller's identity and one of its MayCall patterns matches the
// capability. With no rule that matches, it may call nothing. An ACL is
// immutable once parsed; its methods are safe for concurrent use.
type ACL struct {
	Rules []ACLRule `json:"rules"`
}

// ACLRule grants the callers Caller matches the capabilities MayCall
// matches.
//
// Caller is an identity name in which '*' stands for any run of characters
// ("billing-*" matches "billing-1" and "billing-eu-2"; "*" matches every
// identity). Each MayCall entry is a capability whose tokens may be '*' (any
// one token) or, last, '>' (one or more tokens), as in NATS subjects:
// "payment.*" matches "payment.execute" but not "payment.refund.partial";
// "payment.>" matches both; ">" matches every capability.
type ACLRule struct {
	Caller  string   `json:"caller"`
	MayCall []string `json:"may_call"`
}

// maxACLRules bounds the rules of one ACL.
const maxACLRules = 10000

func init() { RegisterKind(KeyACL, decodeACL) }

// ParseACL reads an ACL from JSON or YAML strictly: an unknown key, a key
// given twice or a value of the wrong type is an error, and so is any
// invalid pattern; every error wraps ErrInvalid and names the field
// ("rules[1].may_call[0]").
func ParseACL(data []byte) (*ACL, error) {
	v, err := Parse(KeyACL, data)
	if err != nil {
		return nil, err
	}
	return v.Decoded.(*ACL), nil
}

// decodeACL is the Decoder of the "acl" kind.
func decodeACL(key string, value json.RawMessage) (any, error) {
	if key != KeyACL {
		return nil, fmt.Errorf("the ACL is stored under the key %q alone", KeyACL)
	}
	var acl ACL
	if err := document.DecodeJSON(value, &acl); err != nil {
		return nil, err
	}
	var p document.Problems
	if acl.Rules == nil {
		p.Add("rules", "required: a list of {caller, may_call} rules (an empty list grants nothing)")
	}
	if len(acl.Rules) > maxACLRules {
		p.Add("rules", "%d rules, more than the %d allowed", len(acl.Rules), maxACLRules)
	}
	for i, r := range acl.Rules {
		path := document.IndexPath("rules", i)
		if err := validateCallerPattern(r.Caller); err != nil {
			p.Add(path+".caller", "%v", err)
		}
		if len(r.MayCall) == 0 {
			p.Add(path+".may_call", "required: at least one capability pattern")
		}
		for j, c := range r.MayCall {
			if err := ValidateCapabilityPattern(c); err != nil {
				p.Add(document.IndexPath(path+".may_call", j), "%v", err)
			}
		}
	}
	if err := p.Err(ErrInvalid, ""); err != nil {
		// Parse names the key and the sentinel; keep only the list.
		return nil, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
	}
	return &acl, nil
}

// validateCallerPattern reports why s cannot match identity names: it is
// an identity name (letters, digits, '_' and '-') in which '*' may stand for
// any run of characters.
func validateCallerPattern(s string) error {
	if s == "" {
		return fmt.Errorf("required: an identity name, '*' standing for any characters (\"billing-*\")")
	}
	if len(s) > streams.MaxNameLength {
		return fmt.Errorf("%q is longer than %d bytes", s, streams.MaxNameLength)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '*') {
			return fmt.Errorf("%q: an identity name holds only letters, digits, '_' and '-', and '*' for any characters", s)
		}
	}
	return nil
}

// ValidateCapabilityPattern reports why s is not a capability pattern: a
// capability whose tokens may be '*' (one token) or, last, '>' (the rest).
// A wildcard is always a whole token: "pay*" is refused.
func ValidateCapabilityPattern(s string) error {
	if s == "" {
		return fmt.Errorf("empty: want a capability such as \"payment.execute\", \"payment.*\" or \"payment.>\"")
	}
	if len(s) > streams.MaxNameLength {
		return fmt.Errorf("%q is longer than %d bytes", s, streams.MaxNameLength)
	}
	tokens := strings.Split(s, ".")
	for i, tok := range tokens {
		switch {
		case tok == "*":
		case tok == ">":
			if i != len(tokens)-1 {
				return fmt.Errorf("%q: '>' may only be the last token", s)
			}
		case strings.ContainsAny(tok, "*>"):
			return fmt.Errorf("%q: a wildcard must be a whole token (\"payment.*\", \"payment.>\"), not part of one", s)
		case streams.ValidateCapability(tok) != nil:
			return fmt.Errorf("%q: token %q must be lowercase [a-z0-9_-], starting with a letter or digit", s, tok)
		}
	}
	return nil
}

// Allows reports whether caller may call capability.
func (a *ACL) Allows(caller, capability string) bool {
	if a == nil {
		return false
	}
	for _, r := range a.Rules {
		if matchCaller(r.Caller, caller) && slices.ContainsFunc(r.MayCall, func(p string) bool { return MatchCapability(p, capability) }) {
			return true
		}
	}
	return false
}

// Grants returns the capability patterns caller may call, sorted, without
// duplicates: what a credential's permissions are generated from.
func (a *ACL) Grants(caller string) []string {
	if a == nil {
		return nil
	}
	var out []string
	for _, r := range a.Rules {
		if matchCaller(r.Caller, caller) {
			out = append(out, r.MayCall...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// matchCaller reports whether name matches pattern, in which '*' stands for
// any run of characters.
func matchCaller(pattern, name string) bool {
	first, rest, wild := strings.Cut(pattern, "*")
	if !wild {
		return pattern == name
	}
	if !strings.HasPrefix(name, first) {
		return false
	}
	name = name[len(first):]
	parts := strings.Split(rest, "*")
	last := parts[len(parts)-1]
	for _, part := range parts[:len(parts)-1] {
		i := strings.Index(name, part)
		if i < 0 {
			return false
		}
		name = name[i+len(part):]
	}
	return strings.HasSuffix(name, last) && len(name) >= len(last)
}

// MatchCapability reports whether capability matches pattern (see
// ACLRule).
func MatchCapability(pattern, capability string) bool {
	if capability == "" {
		return false
	}
	for {
		ptok, prest, pmore := strings.Cut(pattern, ".")
		ctok, crest, cmore := strings.Cut(capability, ".")
		switch {
		case ptok == ">":
			return capability != ""
		case ptok != "*" && ptok != ctok:
			return false
		case !pmore || !cmore:
			return pmore == cmore
		}
		pattern, capability = prest, crest
	}
}
