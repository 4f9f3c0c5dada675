package cli

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribeBuild(t *testing.T) {
	stamped := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/agent-reach/agentreach", Version: "v0.3.1-0.20261201120000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-12-01T12:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	platform := runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"stamped", stamped, "agentreach v0.3.1-0.20261201120000-0123456789ab+dirty (commit 0123456789abcdef0123456789abcdef01234567+modified, " +
			"2026-12-01T12:00:00Z; module github.com/agent-reach/agentreach v0.3.1-0.20261201120000-0123456789ab+dirty; " + platform + ")"},
		{"go run", &debug.BuildInfo{Main: debug.Module{Path: "github.com/agent-reach/agentreach", Version: "(devel)"}},
			"agentreach dev (commit unknown; module github.com/agent-reach/agentreach (devel); " + platform + ")"},
		{"no build info", nil, "agentreach dev (commit unknown; module unknown module; " + platform + ")"},
	} {
		if got := describeBuild(c.bi); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}

	// -X main.version wins over the module version.
	version = "v9.9.9"
	t.Cleanup(func() { version = "" })
	if got := describeBuild(stamped); !strings.HasPrefix(got, "agentreach v9.9.9 (commit 0123456789abcdef") {
		t.Errorf("with -X main.version: %s", got)
	}
	// A clean tree says nothing of modification.
	clean := *stamped
	clean.Settings = stamped.Settings[:3]
	if got := describeBuild(&clean); strings.Contains(got, "+modified") {
		t.Errorf("clean tree: %s", got)
	}
}
