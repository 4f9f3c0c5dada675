package registry_test

import (
	"fmt"
	"testing"

	"github.com/agent-reach/agentreach/registry"
)

func TestNearestName(t *testing.T) {
	caps := []string{"echo", "summarize", "translate", "dlq", "stats", "ocr"}
	cases := []struct {
		name, in   string
		candidates []string
		want       string
	}{
		{"one deletion", "ech", caps, "echo"},
		{"one insertion", "echoo", caps, "echo"},
		{"one substitution", "summarise", caps, "summarize"},
		{"swap counts as one edit", "dql", caps, "dlq"},
		{"two edits in a long name", "transalte", caps, "translate"},
		{"missing letter", "stat", caps, "stats"},
		{"too far for a short name", "xyz", caps, ""},
		{"two edits in a short name", "ec", caps, ""},
		{"one letter is never close", "x", []string{"y"}, ""},
		{"exact match is not suggested", "echo", []string{"echo"}, ""},
		{"exact match skipped, next close one kept", "echo", []string{"echo", "echoes"}, "echoes"},
		{"no candidates", "echo", nil, ""},
		{"empty name", "", caps, ""},
		{"empty candidate ignored", "ab", []string{""}, ""},
		{"closest of several wins", "sumarize", []string{"summarizer", "summarize"}, "summarize"},
		{"tie goes to the first in sort order", "cat", []string{"cut", "bat"}, "bat"},
		{"tie ignores candidate order", "cat", []string{"bat", "cut"}, "bat"},
		{"multi-byte characters count once", "café", []string{"cafe"}, "cafe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := registry.NearestName(c.in, c.candidates); got != c.want {
				t.Fatalf("NearestName(%q, %q) = %q, want %q", c.in, c.candidates, got, c.want)
			}
		})
	}
}

// An unknown name gets a suggestion only when a known one is close.
func ExampleNearestName() {
	known := []string{"echo", "summarize", "translate"}
	fmt.Printf("%q\n", registry.NearestName("ech", known))
	fmt.Printf("%q\n", registry.NearestName("weather", known))
	// Output:
	// "echo"
	// ""
}
