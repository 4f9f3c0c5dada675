package fanout

import (
	"strconv"
	"testing"
)

// FuzzBranchIndex: a reply subject on a broadcast's inbox never panics the
// reader, and names a branch only when it is exactly that branch's
// <inbox>.<index>.<token>.
func FuzzBranchIndex(f *testing.F) {
	const inbox = "_INBOX.d1.abc"
	tokens := []string{"00112233445566778899aabb", "ffeeddccbbaa998877665544", "0123456789abcdef01234567"}
	token := func(i int) (string, bool) {
		if i < 0 || i >= len(tokens) {
			return "", false
		}
		return tokens[i], true
	}
	f.Add(inbox + ".1." + tokens[1])
	f.Add(inbox + ".01." + tokens[1])
	f.Add(inbox + ".2." + tokens[1])
	f.Add(inbox + ".-0." + tokens[0])
	f.Add(inbox + ".3.x")
	f.Add(inbox + "." + tokens[0])
	f.Add("_INBOX.d1.abcd.0." + tokens[0])
	f.Add(inbox + ".99999999999999999999." + tokens[0])
	f.Fuzz(func(t *testing.T, subject string) {
		i, ok := branchIndex(inbox, subject, token)
		if !ok {
			return
		}
		if want := inbox + "." + strconv.Itoa(i) + "." + tokens[i]; subject != want {
			t.Fatalf("%q read as branch %d, whose reply subject is %q", subject, i, want)
		}
	})
}
