package registry_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running.
//
// Two of nats-server's own goroutines are let go: a clustered node that
// restarts (TestTheRegistrySaysNoLeaderDuringAnOutage) creates its streams'
// file stores from the meta group's assignments, and on a loaded machine it
// can still be re-creating one when the test stops it; nats-server's
// Shutdown then leaves that store's state flusher, and the access-time
// ticker it registered, running. Neither is a goroutine of ours, and every
// other goroutine of a server left running (accept loops, routes, Raft)
// still fails the package.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}
