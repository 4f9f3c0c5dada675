package agenttest

import (
	"slices"
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
