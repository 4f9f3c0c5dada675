package deploy

// What deploy/setup.sh makes is secret or machine-specific, so git holds
// none of it (deploy/.gitignore). These tests make it again in a temporary
// directory, replaying the script's `auth` lines through package auth, and
// check the stack against that.

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/devtls"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

const (
	setupScript = "setup.sh"
	aclFile     = "acl.yaml"
	// authConf is the operator-mode configuration setup.sh writes, relative
	// to deploy/.
	authConf = "nats/auth.conf"
	// leafAuthConf is the leaf node server's (auth server-config --leaf).
	leafAuthConf = "nats/leaf-auth.conf"
)

// generatedDirs are what setup.sh makes, relative to deploy/ (as
// .gitignore lists them).
var generatedDirs = []string{"auth", "certs", authConf, leafAuthConf}

// generated is what setup.sh makes, made again in dir: dir/certs,
// dir/auth and dir/nats/auth.conf.
type generated struct {
	dir   string
	store *auth.Store
	acl   *policy.ACL // acl.yaml, which auth-sync seeds
}

var authLine = regexp.MustCompile(`^\$AR auth ([a-z-]+)(.*)$`)

// flagsOf reads the --name value pairs of an auth line's rest; a --name
// followed by another flag or nothing is a boolean, "true".
func flagsOf(t *testing.T, line, rest string) (pos []string, flags map[string]string) {
	t.Helper()
	flags = map[string]string{}
	f := strings.Fields(rest)
	for i := 0; i < len(f); i++ {
		if name, ok := strings.CutPrefix(f[i], "--"); ok {
			if i+1 >= len(f) || strings.HasPrefix(f[i+1], "--") {
				flags[name] = "true"
				continue
			}
			flags[name] = f[i+1]
			i++
			continue
		}
		pos = append(pos, f[i])
	}
	return pos, flags
}

// setup replays setup.sh in a temporary directory.
func setup(t *testing.T) *generated {
	t.Helper()
	g := &generated{dir: t.TempDir()}
	var err error
	at := func(rel string) string { return filepath.Join(g.dir, rel) }
	for _, line := range strings.Split(readFile(t, setupScript), "\n") {
		m := authLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		pos, flags := flagsOf(t, line, m[2])
		switch sub := m[1]; sub {
		case "tls":
			if _, err = devtls.EnsureTLS(at(flags["out"]), strings.Split(flags["hosts"], ",")); err != nil {
				t.Fatalf("%s: %q: %v", setupScript, line, err)
			}
		case "init":
			if g.store, err = auth.Init(at(flags["dir"])); err != nil {
				t.Fatalf("%s: %q: %v", setupScript, line, err)
			}
		case "agent", "caller", "dispatcher":
			if g.store == nil || len(pos) != 1 {
				t.Fatalf("%s: %q: want auth init first and one NAME", setupScript, line)
			}
			if _, err := g.store.Add(auth.Identity{Name: pos[0], Role: auth.Role(sub), Type: flags["type"]}); err != nil {
				t.Fatalf("%s: %q: %v", setupScript, line, err)
			}
		case "leaf":
			if g.store == nil || len(pos) != 1 || flags["carries"] == "" {
				t.Fatalf("%s: %q: want auth init first, one NAME and --carries", setupScript, line)
			}
			if _, err := g.store.Add(auth.Identity{Name: pos[0], Role: auth.RoleLeaf, Carries: strings.Split(flags["carries"], ",")}); err != nil {
				t.Fatalf("%s: %q: %v", setupScript, line, err)
			}
		case "server-config":
			config := g.store.ServerConfig
			if flags["leaf"] == "true" {
				config = g.store.LeafServerConfig
			}
			text, err := config(flags["resolver-dir"], nil, streams.Subjects{})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(at(flags["out"])), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(at(flags["out"]), []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: %q: auth %s is not one of the sub-commands the stack needs", setupScript, line, sub)
		}
	}
	for _, rel := range generatedDirs {
		if _, err := os.Stat(at(rel)); err != nil {
			t.Fatalf("%s does not make %s: %v", setupScript, rel, err)
		}
	}
	b, err := os.ReadFile(aclFile)
	if err != nil {
		t.Fatal(err)
	}
	if g.acl, err = policy.ParseACL(b); err != nil {
		t.Fatalf("%s: %v", aclFile, err)
	}
	return g
}

// identity returns the identity the credentials file at host path file
// belongs to, by its place in the generated store.
func (g *generated) identity(t *testing.T, file string) (auth.Identity, bool) {
	t.Helper()
	name, ok := strings.CutSuffix(filepath.Base(file), ".creds")
	id, found := g.store.Identity(name)
	if !ok || !found || filepath.Clean(file) != filepath.Clean(g.store.CredsFile(name)) {
		return auth.Identity{}, false
	}
	return id, true
}

// source maps a bind-mount source of docker-compose.yml (relative to
// deploy/) to the file behind it: the repository's, or, for what setup.sh
// makes, the generated one.
func (g *generated) source(src string) string {
	rel := filepath.Clean(src)
	for _, d := range generatedDirs {
		if rel == d || strings.HasPrefix(rel, d+string(filepath.Separator)) {
			return filepath.Join(g.dir, rel)
		}
	}
	return rel
}

func TestSetupScript(t *testing.T) {
	text := readFile(t, setupScript)
	if st, err := os.Stat(setupScript); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable (%v)", setupScript, err)
	}
	for _, want := range []string{"#!/bin/sh", "set -eu", `cd "$(dirname "$0")"`, "AR=${AGENTREACH:-go run ../cmd/agentreach}", "chown -R 65532:65532 auth"} {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q", setupScript, want)
		}
	}
	ignored := strings.Fields(readFile(t, ".gitignore"))
	for _, d := range generatedDirs {
		want := d
		if !strings.HasSuffix(d, ".conf") {
			want += "/"
		}
		if !slices.Contains(ignored, want) {
			t.Errorf(".gitignore does not keep %s (made by %s, secret) out of git", want, setupScript)
		}
	}
	g := setup(t)
	names := map[auth.Role][]string{}
	for _, id := range g.store.Identities() {
		names[id.Role] = append(names[id.Role], id.Name)
	}
	if len(names[auth.RoleDispatcher]) != 1 || len(names[auth.RoleCaller]) != 1 || len(names[auth.RoleAgent]) != 4 {
		t.Errorf("%s makes %v: want one dispatcher, one caller, and the four demo agents", setupScript, names)
	}
	// The ACL lets the stack's caller call the demo capabilities.
	for _, c := range []string{"echo", "slow", "math.add"} {
		if !g.acl.Allows(names[auth.RoleCaller][0], c) {
			t.Errorf("%s does not let %s call %s", aclFile, names[auth.RoleCaller][0], c)
		}
	}
}

// TestSetupScriptRuns runs setup.sh itself, with a freshly built agentreach,
// in a copy of deploy/: it leaves every private key (nkey seed, credentials,
// TLS key) mode 0600 and the rest readable; run again it refuses, naming
// --force and changing nothing; with --force it starts over.
func TestSetupScriptRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds agentreach")
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "agentreach")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/agentreach").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := filepath.Join(tmp, "deploy")
	if err := os.MkdirAll(filepath.Join(dir, "nats"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, setupScript), []byte(readFile(t, setupScript)), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(dir, setupScript), args...)
		cmd.Env = append(os.Environ(), "AGENTREACH="+bin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(); err != nil {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	modes := func() map[string]fs.FileMode {
		m := map[string]fs.FileMode{}
		for _, top := range generatedDirs {
			err := filepath.WalkDir(filepath.Join(dir, top), func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				info, err := d.Info()
				if err == nil {
					rel, _ := filepath.Rel(dir, path)
					m[rel] = info.Mode().Perm()
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	before := modes()
	private := 0
	for rel, mode := range before {
		switch name := filepath.Base(rel); {
		case strings.HasSuffix(name, ".nk"), strings.HasSuffix(name, ".creds"), strings.HasSuffix(name, "-key.pem"):
			private++
			if mode != 0o600 {
				t.Errorf("%s is a private key of mode %o, want 600", rel, mode)
			}
		case mode&0o044 != 0o044:
			t.Errorf("%s (public) is mode %o: want it readable", rel, mode)
		}
	}
	if private < 9 || before["certs/ca-key.pem"] == 0 || before["auth/creds/cli.creds"] == 0 {
		t.Fatalf("%d private keys among %v", private, before)
	}

	ca := readFile(t, filepath.Join(dir, "certs", "ca.pem"))
	out, err := run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 ||
		strings.TrimSpace(out) != "setup.sh: deploy/certs exists: this stack is set up already; "+
			"'deploy/setup.sh --force' deletes certs auth nats/auth.conf nats/leaf-auth.conf and makes them anew" {
		t.Fatalf("second run: %v, output %q", err, out)
	}
	if readFile(t, filepath.Join(dir, "certs", "ca.pem")) != ca {
		t.Fatal("the refused second run changed the CA")
	}
	if out, err := run("--frobnicate"); err == nil || !strings.Contains(out, "usage: deploy/setup.sh [--force]") {
		t.Fatalf("unknown argument: %v, output %q", err, out)
	}
	if out, err := run("--force"); err != nil {
		t.Fatalf("--force: %v\n%s", err, out)
	}
	if readFile(t, filepath.Join(dir, "certs", "ca.pem")) == ca {
		t.Fatal("--force kept the old CA")
	}
	if after := modes(); len(after) != len(before) || after["auth/creds/cli.creds"] != 0o600 {
		t.Fatalf("--force made %v, the first run %v", after, before)
	}
}
