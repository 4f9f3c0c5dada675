package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// allowed are the only imports outside the standard library the raw agent
// may have: it is written from docs/protocol.md with a plain NATS client.
var allowed = []string{
	"github.com/nats-io/nats.go",
	"github.com/nats-io/nats.go/jetstream",
	"github.com/vmihailenco/msgpack/v5",
}

// foreignImports returns the imports of the non-test Go files in dir that
// are neither in the standard library nor allowed.
func foreignImports(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") && !slices.Contains(allowed, path) {
				bad = append(bad, filepath.Base(name)+": "+path)
			}
		}
	}
	return bad
}

// TestImports keeps the raw agent free of this module (and of any helper
// but nats.go and msgpack), so that passing the conformance suite shows the
// protocol page is enough.
func TestImports(t *testing.T) {
	if bad := foreignImports(t, "."); len(bad) > 0 {
		t.Fatalf("the raw agent must use only the standard library, nats.go and msgpack, but imports %v", bad)
	}
	t.Run("an import of this module is caught", func(t *testing.T) {
		dir := t.TempDir()
		src := "package main\n\nimport _ \"github.com/agent-reach/agentreach/streams\"\n"
		if err := os.WriteFile(filepath.Join(dir, "agent.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if bad := foreignImports(t, dir); len(bad) != 1 {
			t.Fatalf("foreignImports found %v, want the streams import", bad)
		}
	})
}
