package cli

import "testing"

func TestDidYouMean(t *testing.T) {
	names := []string{"up", "agents", "call", "caps", "submit", "result"}
	for word, want := range map[string]string{
		"agnets":     ` (did you mean "agents"?)`, // two neighbours swapped: one edit
		"sumbit":     ` (did you mean "submit"?)`,
		"calll":      ` (did you mean "call"?)`,
		"frobnicate": "", // nothing near
		"call":       "", // itself: no suggestion
	} {
		if got := DidYouMean(word, names); got != want {
			t.Errorf("didYouMean(%q) = %q, want %q", word, got, want)
		}
	}
}
