package taxonomy

import (
	"fmt"
	"sort"
	"strings"
)

// The kinds of Warning.
const (
	KindOutside       = "outside_taxonomy" // the capability's type is not an official one
	KindNearDuplicate = "near_duplicate"   // named almost like another capability
)

// Warning is one thing about a capability's name the catalog's governance
// would have otherwise: never a reason to refuse it.
type Warning struct {
	Capability string `json:"capability"`
	Kind       string `json:"kind"`
	// Other is the capability it nearly duplicates (KindNearDuplicate), or
	// the official type its type is nearest to (KindOutside), if any.
	Other   string `json:"other,omitempty"`
	Message string `json:"message"`
}

func (w Warning) String() string { return w.Message }

// Check returns the warnings for the capabilities names (say, of a
// declaration about to be put): each whose type t lacks (none with t nil),
// and each that is a near-duplicate of another in names or in others (the
// catalog's other capabilities). Identical names are not near-duplicates:
// the same capability served by two types is normal. Warnings are sorted
// by capability, then kind, then other.
func Check(t *Taxonomy, names, others []string) []Warning {
	var out []Warning
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		if typ := TypeOf(name); !t.Has(typ) {
			w := Warning{Capability: name, Kind: KindOutside,
				Message: fmt.Sprintf("%s: its type %q is not in the taxonomy (%s)", name, typ, strings.Join(t.Names(), ", "))}
			if near := nearestType(t, typ); near != "" {
				w.Other = near
				w.Message += fmt.Sprintf("; did you mean %q?", near)
			}
			out = append(out, w)
		}
	}
	pairs := map[[2]string]bool{}
	words := map[string][]string{} // each name's words, split once: a catalog compares every pair
	wordsOf := func(name string) []string {
		w, ok := words[name]
		if !ok {
			w = Words(name)
			words[name] = w
		}
		return w
	}
	warn := func(name, other string) {
		if name == other || pairs[[2]string{name, other}] || !nearWords(wordsOf(name), wordsOf(other)) {
			return
		}
		pairs[[2]string{name, other}] = true
		out = append(out, Warning{Capability: name, Kind: KindNearDuplicate, Other: other,
			Message: fmt.Sprintf("%s is named almost like %s: one capability under two names splits its callers and its routing", name, other)})
	}
	for i, name := range names {
		for _, other := range names[i+1:] {
			warn(name, other)
		}
		for _, other := range others {
			warn(name, other)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Capability != b.Capability {
			return a.Capability < b.Capability
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Other < b.Other
	})
	return out
}

// nearestType returns the official type typ nearly matches, "" if none.
func nearestType(t *Taxonomy, typ string) string {
	for _, name := range t.Names() {
		if NearDuplicate(typ, name) {
			return name
		}
	}
	return ""
}

// Words returns name normalised: lowercase, split into words at '.', '-',
// '_' and white space.
func Words(name string) []string {
	return strings.FieldsFunc(strings.ToLower(name), func(r rune) bool {
		return r == '.' || r == '-' || r == '_' || r == ' ' || r == '\t' || r == '\n'
	})
}

// NearDuplicate reports whether a and b are named almost alike (see the
// package's doc): normalised, every word of the one with fewer words
// matches a different word of the other, which has at most one word more.
// Names equal once normalised ("data-query", "data_query") are
// near-duplicates; a name is not its own.
func NearDuplicate(a, b string) bool {
	if a == b {
		return false
	}
	return nearWords(Words(a), Words(b))
}

// nearWords is NearDuplicate of two names' words.
func nearWords(wa, wb []string) bool {
	if len(wa) > len(wb) {
		wa, wb = wb, wa
	}
	if len(wa) == 0 || len(wb)-len(wa) > 1 {
		return false
	}
	var small [8]bool
	used := small[:0]
	if len(wb) <= len(small) {
		used = small[:len(wb)]
	} else {
		used = make([]bool, len(wb))
	}
	return cover(wa, wb, used)
}

// cover reports whether each of short matches a distinct unused word of
// long (a small backtracking search: names have few words).
func cover(short, long []string, used []bool) bool {
	if len(short) == 0 {
		return true
	}
	for j, w := range long {
		if !used[j] && wordsMatch(short[0], w) {
			used[j] = true
			if cover(short[1:], long, used) {
				return true
			}
			used[j] = false
		}
	}
	return false
}

// minFuzzy is the shortest word matched by prefix or one edit: shorter
// ones ("add", "sub") must be equal.
const minFuzzy = 4

// wordsMatch reports whether two words name the same thing: equal, or both
// of minFuzzy bytes or more, without digits, and one the other's prefix or
// one edit apart. A word with a digit is a version or a number ("v2",
// "gpt4", "shard01"): it must be equal.
func wordsMatch(a, b string) bool {
	if a == b {
		return true
	}
	if len(a) < minFuzzy || len(b) < minFuzzy || hasDigit(a) || hasDigit(b) {
		return false
	}
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) || oneEdit(a, b)
}

func hasDigit(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			return true
		}
	}
	return false
}

// oneEdit reports whether a and b differ by one insertion, deletion,
// substitution or swap of two neighbouring bytes.
func oneEdit(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	if len(b)-len(a) > 1 {
		return false
	}
	i := 0
	for i < len(a) && a[i] == b[i] {
		i++
	}
	if i == len(a) {
		return true // equal, or one byte added at the end
	}
	if len(a) == len(b) {
		if a[i+1:] == b[i+1:] {
			return true // substitution
		}
		return i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] && a[i+2:] == b[i+2:] // swap
	}
	return a[i:] == b[i+1:] // insertion
}
