package readme

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	// The README's program imports agentkit: importing it here makes
	// `go test` fetch its modules before this test builds the program with
	// the module proxy turned off.
	_ "github.com/agent-reach/agentreach/agentkit"
)

const modulePath = "github.com/agent-reach/agentreach"

// program returns the README's one Go block that is a whole program (it
// starts with a comment and "package main").
func program(t *testing.T, readme string) string {
	t.Helper()
	var found []string
	rest := readme
	for {
		_, after, ok := strings.Cut(rest, "\n```go\n")
		if !ok {
			break
		}
		block, tail, ok := strings.Cut(after, "\n```\n")
		if !ok {
			t.Fatal("README.md: a ```go block is not closed")
		}
		if strings.Contains(block, "\npackage main\n") || strings.HasPrefix(block, "package main\n") {
			found = append(found, block+"\n")
		}
		rest = tail
	}
	if len(found) != 1 {
		t.Fatalf("README.md has %d Go blocks with package main, want 1", len(found))
	}
	return found[0]
}

// TestTheReadmeProgramBuildsInAModuleOfItsOwn follows the README's steps in
// a temporary directory, offline: go mod init, go mod edit -replace to this
// clone, then go build and go vet. The repository's go.sum stands in for
// the checksums `go mod tidy` would fetch, and -mod=mod lets go build add
// the requirements tidy would.
func TestTheReadmeProgramBuildsInAModuleOfItsOwn(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program(t, string(readme))), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	run := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
	run("mod", "init", "example.com/inventory")
	run("mod", "edit", "-replace", modulePath+"="+root)
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sums, 0o644); err != nil {
		t.Fatal(err)
	}
	run("build", "-o", filepath.Join(dir, "inventory"), ".")
	run("vet", ".")
}
