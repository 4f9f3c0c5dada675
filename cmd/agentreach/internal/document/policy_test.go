package document

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

const echoPolicy = `strategy: round_robin
retries: 1
ack_timeout: 500ms
breaker: {consecutive_failures: 3}
require: {labels: {engine: postgres}}
`

func TestPolicyCommands(t *testing.T) {
	s, srv := clitest.Provisioned(t)
	policyCmd := func(args ...string) clitest.Result {
		return clitest.RunCmd(t, RunPolicy, append(append([]string{}, srv...), args...)...)
	}
	dir := clitest.WriteFiles(t, map[string]string{
		"echo.yaml": echoPolicy,
		"bad.yaml":  "strategy: fastest\nretries: -2\n",
	})
	good, bad := filepath.Join(dir, "echo.yaml"), filepath.Join(dir, "bad.yaml")

	t.Run("validate", func(t *testing.T) {
		clitest.Expect(t, clitest.RunCmd(t, RunPolicy, "validate", "capability.echo", good), cli.ExitOK, "out:"+good+": a valid value for capability.echo")
		clitest.Expect(t, clitest.RunCmd(t, RunPolicy, "validate", "capability.echo", bad), cli.ExitFail,
			"error: "+bad+`: invalid policy: capability.echo: strategy: unknown strategy "fastest"`, "retries: must be -1 (none) or more, got -2")
		clitest.Expect(t, clitest.RunCmd(t, RunPolicy, "validate", "capabilities.echo", good), cli.ExitUsage, `unknown key "capabilities.echo"`)
	})

	t.Run("set and get", func(t *testing.T) {
		clitest.Expect(t, policyCmd("set", "capability.echo", good), cli.ExitOK, "out:set capability.echo (revision ")
		clitest.Expect(t, policyCmd("set", "capability.echo", bad), cli.ExitFail, "strategy: unknown strategy")
		r := policyCmd("get", "capability.echo")
		want := `strategy: round_robin
retries: 1
ack_timeout: 500ms
breaker:
  consecutive_failures: 3
require:
  labels:
    engine: postgres
`
		if r.Code != cli.ExitOK || r.Stdout != want {
			t.Fatalf("get: exit %d\n%s\nwant\n%s\nstderr: %s", r.Code, r.Stdout, want, r.Stderr)
		}
		var v policy.CapabilityPolicy
		if err := json.Unmarshal([]byte(policyCmd("get", "--json", "capability.echo").Stdout), &v); err != nil || *v.Retries != 1 {
			t.Fatalf("get --json: %+v (%v)", v, err)
		}
		clitest.SetPayloadInput(t, `{"rules": [{"caller": "billing-*", "may_call": ["payment.*"]}]}`)
		clitest.Expect(t, policyCmd("set", "--json", "acl", "-"), cli.ExitOK, `out:{"changed":true,"key":"acl","revision":`)
		clitest.Expect(t, policyCmd("get", "defaults"), cli.ExitFail, `REACH_POLICY holds nothing under "defaults"`)
	})

	t.Run("ls", func(t *testing.T) {
		if _, err := clitest.Bucket(t, s, streams.BucketPolicy).Put(context.Background(), "defaults", []byte(`{"retries": "two"}`)); err != nil {
			t.Fatal(err)
		}
		clitest.Expect(t, policyCmd("ls"), cli.ExitOK, "out:KEY", "out:acl", `out:{"strategy":"round_robin"`,
			"out:ignored: invalid policy: defaults: retries: want an integer, got a string")
		var list []PolicyEntryJSON
		if err := json.Unmarshal([]byte(policyCmd("ls", "--json").Stdout), &list); err != nil {
			t.Fatal(err)
		}
		if len(list) != 3 || list[0].Key != "acl" || list[1].Key != "capability.echo" || list[2].Key != "defaults" ||
			list[2].Error == "" || list[2].Value != nil {
			t.Fatalf("ls --json: %+v", list)
		}
		clitest.Expect(t, policyCmd("get", "defaults"), cli.ExitFail, "REACH_POLICY holds an invalid value under defaults",
			"fix it with 'agentreach policy edit defaults'")
	})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "want a sub-command"},
		{[]string{"show", "defaults"}, `unknown sub-command "show"`},
		{[]string{"set", "defaults"}, "set: want KEY and FILE, got 1 arguments"},
		{[]string{"get", "capability.Echo"}, `capability "Echo"`},
		{[]string{"set", "defaults", filepath.Join(dir, "missing.yaml")}, "missing.yaml: no such file"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			clitest.Expect(t, policyCmd(tc.args...), cli.ExitUsage, tc.want)
		})
	}
}

// fakeEditor makes $EDITOR a script that, on its n-th run, keeps a copy of
// the file it was given as seen-<n>.yaml and replaces the file with
// edits[n-1] (leaving it as it is past the end of edits). It returns the
// directory of the copies.
func fakeEditor(t *testing.T, edits ...string) string {
	t.Helper()
	files := map[string]string{}
	for i, e := range edits {
		files[fmt.Sprintf("edit-%d.yaml", i+1)] = e
	}
	dir := clitest.WriteFiles(t, files)
	script := filepath.Join(dir, "editor.sh")
	body := fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/count 2>/dev/null || echo 0)
n=$((n+1))
echo $n > %[1]s/count
cp "$1" %[1]s/seen-$n.yaml
if [ -f %[1]s/edit-$n.yaml ]; then cp %[1]s/edit-$n.yaml "$1"; fi
`, dir)
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDITOR", script)
	return dir
}

func TestPolicyEdit(t *testing.T) {
	_, srv := clitest.Provisioned(t)
	policyCmd := func(args ...string) clitest.Result {
		return clitest.RunCmd(t, RunPolicy, append(append([]string{}, srv...), args...)...)
	}

	t.Run("a new key", func(t *testing.T) {
		dir := fakeEditor(t, "retries: 4\n")
		clitest.Expect(t, policyCmd("edit", "defaults"), cli.ExitOK, "out:set defaults (revision ")
		if got := clitest.Seen(t, dir, 1); !strings.Contains(got, "# REACH_POLICY defaults (revision 0)") || !strings.HasSuffix(got, "{}\n") {
			t.Fatalf("the editor was given:\n%s", got)
		}
		clitest.Expect(t, policyCmd("get", "defaults"), cli.ExitOK, "out:retries: 4")
	})

	t.Run("unchanged", func(t *testing.T) {
		fakeEditor(t)
		clitest.Expect(t, policyCmd("edit", "defaults"), cli.ExitOK, "out:no change to defaults")
	})

	t.Run("invalid, then fixed", func(t *testing.T) {
		clitest.SetConfirmInput(t, "\n", true) // the default answer: edit again
		dir := fakeEditor(t, "retries: many\n", "retries: 5\nstrategy: hash\n")
		r := policyCmd("edit", "defaults")
		clitest.Expect(t, r, cli.ExitOK, "out:set defaults", "error: invalid policy: defaults: retries: want an integer, got a string", "Edit again? [Y/n]")
		if got := clitest.Seen(t, dir, 1); !strings.Contains(got, "\nretries: 4\n") {
			t.Fatalf("the editor did not get the stored value in YAML:\n%s", got)
		}
		if got := clitest.Seen(t, dir, 2); !strings.HasPrefix(got, "# error: invalid policy: defaults: retries: want an integer") || !strings.Contains(got, "retries: many") {
			t.Fatalf("the editor was not given the error and the person's text again:\n%s", got)
		}
		clitest.Expect(t, policyCmd("get", "defaults"), cli.ExitOK, "out:strategy: hash")
	})

	t.Run("invalid, given up", func(t *testing.T) {
		clitest.SetConfirmInput(t, "n\n", true)
		fakeEditor(t, "retries: -3\n")
		clitest.Expect(t, policyCmd("edit", "defaults"), cli.ExitFail, "nothing stored: the edited value is invalid", "retries: must be -1 (none) or more")
		clitest.Expect(t, policyCmd("get", "defaults"), cli.ExitOK, "out:retries: 5")
	})

	t.Run("invalid, not on a terminal", func(t *testing.T) {
		clitest.SetConfirmInput(t, "y\n", false)
		dir := fakeEditor(t, "retries: -3\n", "retries: 1\n")
		clitest.Expect(t, policyCmd("edit", "defaults"), cli.ExitFail, "nothing stored")
		if clitest.Seen(t, dir, 2) != "" {
			t.Fatal("the editor was opened again without a terminal to ask on")
		}
	})

	t.Run("editor fails", func(t *testing.T) {
		t.Setenv("EDITOR", "false")
		clitest.Expect(t, policyCmd("edit", "defaults"), cli.ExitFail, "editor false: exit status 1; nothing stored")
	})
}

// A conditional write that lost to another writer is a conflict, whether
// the key was created or changed meanwhile; other failures are not.
func TestIsConflict(t *testing.T) {
	s, _ := clitest.Provisioned(t)
	kv := clitest.Bucket(t, s, streams.BucketPolicy)
	ctx := context.Background()
	rev, err := registry.UpdatePolicy(ctx, kv, "defaults", []byte(`{}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, created := registry.UpdatePolicy(ctx, kv, "defaults", []byte(`{}`), 0)
	_, changed := registry.UpdatePolicy(ctx, kv, "defaults", []byte(`{}`), rev+1)
	_, invalid := registry.UpdatePolicy(ctx, kv, "defaults", []byte(`{"retries":-5}`), rev)
	if !IsConflict(created) || !IsConflict(changed) || IsConflict(invalid) || IsConflict(nil) {
		t.Fatalf("isConflict: created %v, changed %v, invalid %v", created, changed, invalid)
	}
}
