package console

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

func TestDecodeEdit(t *testing.T) {
	e, err := DecodeEdit([]byte(`{"value": "retries: 2", "revision": 7}`))
	if err != nil || e.Value != "retries: 2" || e.Revision == nil || *e.Revision != 7 {
		t.Fatalf("DecodeEdit = %+v, %v", e, err)
	}
	if e, err := DecodeEdit([]byte(`{"value": "{}"}`)); err != nil || e.Revision != nil {
		t.Fatalf("without a revision: %+v, %v", e, err)
	}
	for _, c := range []struct{ body, want string }{
		{`{"value": 3}`, "value: want a string"},
		{`{"value": "  "}`, "value: required"},
		{`{}`, "value: required"},
		{`{"value": "x", "revision": -1}`, "revision: want"},
		{`{"value": "x", "revision": 1.5}`, "revision: want"},
		{`{"value": "x", "revison": 1}`, "revison: unknown key"},
		{`{"value": "x", "value": "y"}`, "value"},
		{`["x"]`, "want an object"},
		{`{"value": "x"} trailing`, "body: "},
	} {
		_, err := DecodeEdit([]byte(c.body))
		if err == nil || err.Code != streams.CodeBadRequest || !strings.Contains(err.Message, c.want) {
			t.Errorf("DecodeEdit(%s) = %+v, want BAD_REQUEST naming %q", c.body, err, c.want)
		}
	}
}

func TestWriteFailure(t *testing.T) {
	zero, three := uint64(0), uint64(3)
	for _, c := range []struct {
		err      error
		revision *uint64
		want     streams.Code
	}{
		{policy.ErrInvalid, nil, streams.CodeBadRequest},
		{jetstream.ErrKeyExists, &zero, CodeConflict},
		{jetstream.ErrKeyExists, &three, CodeConflict},
		{errors.New("no responders"), &three, streams.CodeInternal},
	} {
		if got := writeFailure(streams.BucketPolicy, "acl", c.revision, c.err); got.Code != c.want {
			t.Errorf("writeFailure(%v) = %s, want %s", c.err, got.Code, c.want)
		}
	}
}

func TestMayWrite(t *testing.T) {
	off := New(Config{})
	if ok, why := off.mayWrite(nil); ok || !strings.Contains(why, "--http-admin") {
		t.Errorf("auth off, no --http-admin: %v %q, want refused naming the flag", ok, why)
	}
	if ok, _ := New(Config{Admin: true}).mayWrite(nil); !ok {
		t.Error("--http-admin without auth: refused")
	}
	on := &Console{cfg: Config{Auth: stubAuthority{}}}
	if ok, why := on.mayWrite(&Identity{Name: "echo-1"}); ok || !strings.Contains(why, "only an operator identity") {
		t.Errorf("an agent's identity: %v %q, want refused", ok, why)
	}
	if ok, _ := on.mayWrite(&Identity{Name: "dispatcher", Operator: true}); !ok {
		t.Error("the operator: refused")
	}
	if !hidden("identity.echo-1") || hidden("acl") {
		t.Error("the identity directory is the one hidden family")
	}
}

// stubAuthority stands for auth being on; mayWrite asks it nothing.
type stubAuthority struct{}

func (stubAuthority) Identify(*http.Request) (Identity, *streams.Error) { return Identity{}, nil }
func (stubAuthority) MayCall(string, string) bool                       { return false }
