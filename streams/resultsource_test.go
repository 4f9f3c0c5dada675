package streams_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/streams"
)

func TestResultSubjectNamesItsSubmitter(t *testing.T) {
	var s streams.Subjects
	if got := s.Result("alice", "r1"); got != "reach.result.alice.r1" {
		t.Errorf("Result = %q", got)
	}
	if got := s.ResultsOf("alice"); got != "reach.result.alice.>" {
		t.Errorf("ResultsOf = %q", got)
	}
	if got := (streams.Subjects{Prefix: "p"}).Result(streams.NoSource, "r1"); got != "p.result._.r1" {
		t.Errorf("Result without a source = %q", got)
	}
	if got := streams.SubmissionID("alice", "r1"); got != "alice.r1" {
		t.Errorf("SubmissionID = %q", got)
	}
}

func TestResultSource(t *testing.T) {
	for in, want := range map[string]string{"": streams.NoSource, "alice": "alice", "echo-1": "echo-1", "A_b-9": "A_b-9"} {
		if got, err := streams.ResultSource(in); err != nil || got != want {
			t.Errorf("ResultSource(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// NoSource itself, and anything that is not one name token, is refused:
	// no caller can name itself "_" and read the results of tasks without
	// a source, or put a wildcard or a dot in its results' subject.
	for _, in := range []string{"_", "-a", "a.b", "*", ">", "a b", "alice.>", strings.Repeat("a", streams.MaxNameLength+1), "é"} {
		if got, err := streams.ResultSource(in); !errors.Is(err, streams.ErrInvalidName) {
			t.Errorf("ResultSource(%q) = %q, %v; want ErrInvalidName", in, got, err)
		}
	}
}
