package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
)

// MaxToolName is the longest tool name served: what the model APIs behind
// common clients accept (^[a-zA-Z0-9_-]{1,64}$).
const MaxToolName = 64

// hashLen is the length of the hex suffix a tool name gets on a collision
// or when it would pass MaxToolName; longHashLen when even that collides.
const (
	hashLen     = 8
	longHashLen = 16
)

// baseName is a capability's tool name before collisions: every byte
// outside [a-zA-Z0-9_-] written as '_' (a capability's dots).
func baseName(capability string) string {
	b := []byte(capability)
	for i, c := range b {
		if !validToolByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

func validToolByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// ValidToolName reports whether name matches ^[a-zA-Z0-9_-]{1,64}$.
func ValidToolName(name string) bool {
	if name == "" || len(name) > MaxToolName {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !validToolByte(name[i]) {
			return false
		}
	}
	return true
}

// hashedName is base cut to fit with the suffix "_<n hex digits of the
// capability's SHA-256>".
func hashedName(capability, base string, n int) string {
	sum := sha256.Sum256([]byte(capability))
	suffix := "_" + hex.EncodeToString(sum[:])[:n]
	if len(base) > MaxToolName-len(suffix) {
		base = base[:MaxToolName-len(suffix)]
	}
	return base + suffix
}

// ToolNames maps each capability to its tool name (docs/mcp.md, Names):
// the capability with every '.' (and any other byte outside
// [a-zA-Z0-9_-]) written as '_'. A name that would pass 64 bytes, or
// that two capabilities would share, instead gets a suffix "_" and 8 hex
// digits of the capability's SHA-256 (the name cut to fit) — except a
// capability that is its own name (no dot), which keeps it. A suffixed
// name that would still collide gets 16 digits. The result depends only on
// the set of capabilities, not their order; every name is unique and
// matches ^[a-zA-Z0-9_-]{1,64}$. Duplicates and empty strings in caps are
// ignored.
func ToolNames(caps []string) map[string]string {
	caps = slices.Clone(caps)
	slices.Sort(caps)
	caps = slices.Compact(caps)
	if len(caps) > 0 && caps[0] == "" {
		caps = caps[1:]
	}
	bases := make(map[string][]string, len(caps)) // base → the capabilities that have it
	for _, c := range caps {
		b := baseName(c)
		bases[b] = append(bases[b], c)
	}
	out := make(map[string]string, len(caps))
	taken := make(map[string]bool, len(caps))
	var hashed []string
	for _, c := range caps {
		b := baseName(c)
		switch {
		case len(b) > MaxToolName:
			hashed = append(hashed, c)
		case len(bases[b]) == 1 || b == c:
			out[c], taken[b] = b, true
		default:
			hashed = append(hashed, c)
		}
	}
	// Suffixed names: 8 digits, unless that is taken or shared.
	short := make(map[string]int, len(hashed))
	for _, c := range hashed {
		short[hashedName(c, baseName(c), hashLen)]++
	}
	for _, c := range hashed {
		name := hashedName(c, baseName(c), hashLen)
		if taken[name] || short[name] > 1 {
			name = hashedName(c, baseName(c), longHashLen)
		}
		out[c] = name
	}
	return out
}

// capabilityMeta is the _meta key of a tool that names its capability.
const capabilityMeta = "io.agentreach/capability"

// trimDescription bounds a description taken from a declaration.
func trimDescription(s string) string {
	const max = 4096
	s = strings.TrimSpace(s)
	if len(s) > max {
		s = s[:max]
	}
	return s
}
