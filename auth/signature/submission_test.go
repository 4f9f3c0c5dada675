package signature

import "testing"

// The same keys make the same submission id in every SDK: the Python
// client's test (agentkit/python/tests/test_auth.py) expects these values.
func TestSubmissionIDKnownAnswer(t *testing.T) {
	const (
		seed     = "SUANSZYV4ZOJE7BIYVZQL7ZUTTA45BCPWCJ3M72VMYWJOPXZ5QSUACKKWU"
		verifier = "XBLWJHGXHGVEOGOKKGF6JDLX6P5E6HTSHSA4ZVMPJ6WE44QKSUHR26QB"
	)
	s, err := NewSigner("alice", []byte(seed), verifier)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.SubmissionID("r1"), "alice.r1.MrGbpXdm25uVjZUbaSfZ-Q"; got != want {
		t.Fatalf("SubmissionID = %q, want %q", got, want)
	}
}
