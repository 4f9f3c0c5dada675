package main

import "testing"

func TestNearest(t *testing.T) {
	names := []string{"up", "agents", "call", "caps", "submit", "result", "review", "runs", "math.add", "echo"}
	for _, c := range []struct{ word, want string }{
		{"agnets", "agents"},    // two neighbours swapped: one edit
		{"calll", "call"},       // one too many
		{"sumbit", "submit"},    // swap
		{"reslt", "result"},     // one missing
		{"math.ad", "math.add"}, // one missing
		{"ecoh", "echo"},        // swap in a short word
		{"mathadd", "math.add"}, // one missing in the middle
		{"ech", "echo"},         // short: one edit
		{"cal", "call"},         // first of the equally close wins: call before caps
		{"ep", "up"},            // two letters, one edit: still closer than the word is long
		{"x", ""},               // one letter: anything is one edit away
		{"frobnicate", ""},      // nothing near
		{"eccchhho", ""},        // more edits than allowed
		{"call", ""},            // itself: no suggestion
		{"", ""},
	} {
		got, ok := nearest(c.word, names)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("nearest(%q) = %q, %t; want %q", c.word, got, ok, c.want)
		}
	}
	if d := editDistance("kitten", "sitting"); d != 3 {
		t.Errorf("editDistance(kitten, sitting) = %d, want 3", d)
	}
	if h := didYouMean("agnets", names); h != ` (did you mean "agents"?)` {
		t.Errorf("didYouMean: %q", h)
	}
}
