package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/streams"
)

// TestSecurityAStarGrantHearsOneTokenOfDeadLetters: the server checks a
// subscription's subject against the allow list token by token, so the
// dead-letter subscription a grant "math.*" allows, reach.dlq.math.*,
// also admits reach.dlq.math.> — which would hear the dead letters of
// math.vault.open, a capability "math.*" does not grant. The caller's
// deny below its grant (auth.Permissions) keeps the wider subscription
// to what the grant covers; the control: the dead letters of math.add
// reach it on either subscription, and the same deeper subscription
// hears math.vault.open's for an identity granted "math.>".
func TestSecurityAStarGrantHearsOneTokenOfDeadLetters(t *testing.T) {
	st := NewSecureStack(t, time.Second, fmt.Sprintf(`{"rules": [
  {"caller": %q, "may_call": ["math.*"]},
  {"caller": "bob", "may_call": ["math.>"]}]}`, SecureCaller))
	st.Identity(auth.Identity{Name: "bob", Role: auth.RoleCaller})
	subj := streams.Subjects{}
	js, err := jetstream.New(st.admin)
	if err != nil {
		t.Fatal(err)
	}
	hear := func(who, subject string) *nats.Subscription {
		nc := st.ConnAs(who)
		sub, err := nc.SubscribeSync(subject)
		if err != nil {
			t.Fatalf("%s subscribing to %s: %v", who, subject, err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	wide := hear(SecureCaller, subj.DeadLetter("math")+".>")
	narrow := hear(SecureCaller, subj.DeadLetter("math.*"))
	granted := hear("bob", subj.DeadLetter("math")+".>")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []string{"math.vault.open", "math.add"} {
		if _, err := js.Publish(ctx, subj.DeadLetter(c), []byte(`{"capability":"`+c+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	// Each subscription's first message says what it heard first; math.add
	// was published last, so a subscription that heard math.vault.open
	// hears it before math.add.
	next := func(name string, sub *nats.Subscription) string {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m.Subject
	}
	if got := next("math.* on reach.dlq.math.>", wide); got != subj.DeadLetter("math.add") {
		t.Errorf("a caller granted math.* heard %s on reach.dlq.math.>", got)
	}
	if got := next("math.* on reach.dlq.math.*", narrow); got != subj.DeadLetter("math.add") {
		t.Errorf("control: a caller granted math.* heard %s on reach.dlq.math.*, want math.add's", got)
	}
	if got := next("math.> on reach.dlq.math.>", granted); got != subj.DeadLetter("math.vault.open") {
		t.Errorf("control: a caller granted math.> heard %s first, want math.vault.open's", got)
	}
}
