package cli

import (
	"fmt"

	"github.com/agent-reach/agentreach/registry"
)

// DidYouMean is the hint for a mistyped word: ` (did you mean "name"?)`
// with the nearest of names (registry.NearestName, which the dispatcher's
// NO_AGENT suggestion uses too), or "".
func DidYouMean(word string, names []string) string {
	if n := registry.NearestName(word, names); n != "" {
		return fmt.Sprintf(" (did you mean %q?)", n)
	}
	return ""
}
