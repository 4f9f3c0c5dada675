package agenttest

import (
	"slices"
	"strings"
	"testing"
)

func TestGoRunIsBuiltFirst(t *testing.T) {
	for _, c := range []struct {
		name        string
		args        []string
		build, rest []string
		ok          bool
	}{
		{"go", []string{"run", "./examples/rawagent"}, []string{"./examples/rawagent"}, []string{}, true},
		{"/usr/local/go/bin/go", []string{"run", "-race", "./x", "-flag", "v"}, []string{"-race", "./x"}, []string{"-flag", "v"}, true},
		{"go", []string{"build", "./x"}, nil, nil, false},
		{"python", []string{"run", "x"}, nil, nil, false},
		{"go", []string{"run", "-race"}, nil, nil, false},
	} {
		build, rest, ok := goRun(c.name, c.args)
		if ok != c.ok || !slices.Equal(build, c.build) || !slices.Equal(rest, c.rest) {
			t.Errorf("goRun(%s %v) = %v, %v, %v", c.name, c.args, build, rest, ok)
		}
	}
}

// The agent gets AGENTREACH_CREDS only with auth, and never the one of
// whoever runs the suite.
func TestEnvironCreds(t *testing.T) {
	t.Setenv(EnvCreds, "/home/someone/.creds/admin.creds")
	creds := func(e Env) []string {
		return slices.DeleteFunc(append(inherited(), e.Environ()...), func(kv string) bool { return !strings.HasPrefix(kv, EnvCreds+"=") })
	}
	plain := Env{ServerURL: "nats://127.0.0.1:4222", AgentID: "conformance-x"}
	if got := creds(plain); len(got) != 0 {
		t.Errorf("without auth the agent's environment has %v, want no %s", got, EnvCreds)
	}
	withAuth := plain
	withAuth.CredsFile = "/tmp/x/creds/conformance-x.creds"
	if got, want := creds(withAuth), []string{EnvCreds + "=" + withAuth.CredsFile}; !slices.Equal(got, want) {
		t.Errorf("with auth the agent's environment has %v, want %v", got, want)
	}
}
