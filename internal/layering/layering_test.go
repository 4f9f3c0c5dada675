package layering

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agent-reach/agentreach/"

// layers orders the module's packages from the bottom up (docs/architecture.md,
// "Packages"): a package may import those of a lower layer or its own, never
// one above. A package takes the layer of the longest prefix that matches its
// path (relative to the module); one that matches none fails the test, so a
// new package is placed here on purpose.
var layers = [][]string{
	{"streams"},
	{"internal/"}, // private helpers shared by two packages
	// The registry's documents, declarations and policy values need no
	// connection; the registry stores and watches them.
	{"registry/document"},
	{"registry/declare"},
	{"registry/policy"},
	{"registry"},
	{"auth/signature"}, // Reach-Signature: no file, no directory
	{"auth"},
	{"auth/authserver"},
	// The dispatcher's lower tier: selection needs no NATS, events and
	// durable only the stream contract. The SDK sits beside them: it never
	// depends on the dispatcher (below).
	{"dispatcher/selection", "dispatcher/events", "dispatcher/durable", "dispatcher/relay", "dispatcher/tracing", "dispatcher/feedback", "dispatcher/breakers", "dispatcher/inbox", "dispatcher/config", "dispatcher/names", "agentkit"},
	// The task engine: a task's path through the stages, on the lower
	// tier; the Dispatcher is the lifecycle and the entries around it.
	{"dispatcher/engine"},
	{"dispatcher"},
	// Beside a dispatcher, built on its Call and records. The conformance
	// suite runs a real dispatcher, so it sits above it.
	{"dispatcher/fanout", "dispatcher/metrics", "dispatcher/eventstats", "agentkit/agenttest"},
	// Workflow definitions, conditions and references: no connection of
	// their own, built on fan-out's completion modes.
	{"dispatcher/workflow/spec"},
	{"dispatcher/workflow"},
	{"dispatcher/gateway"}, // and its edges, gateway/mcp and gateway/a2a
	{"integration"},        // end-to-end tests and the benchmark suite, which the binary runs
	{"cmd", "examples", "deploy"},
}

// connectionFree packages decide without a connection: they import no NATS
// client package themselves (what they import from registry is values), so
// their tests need no server.
var connectionFree = []string{"registry/document", "registry/declare", "registry/policy", "registry/taxonomy", "dispatcher/selection", "dispatcher/workflow/spec"}

// maxLines is the most lines of non-test Go a package may hold.
const maxLines = 2500

// oversize lists the packages over maxLines when this check came in, each
// with its size then as its ceiling: they may shrink, never grow. Lower a
// ceiling when a package shrinks; remove the entry once it is under maxLines.
var oversize = map[string]int{}

type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

// layerOf returns the layer of a module-relative path, -1 when none matches.
func layerOf(rel string) int {
	best, bestLen := -1, -1
	for i, layer := range layers {
		for _, prefix := range layer {
			match := rel == prefix || strings.HasPrefix(rel, strings.TrimSuffix(prefix, "/")+"/")
			if match && len(prefix) > bestLen {
				best, bestLen = i, len(prefix)
			}
		}
	}
	return best
}

func TestImportsPointDown(t *testing.T) {
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(p.ImportPath, module)
		from := layerOf(rel)
		if from < 0 {
			t.Errorf("%s is in no layer: place it in layers", rel)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := strings.TrimPrefix(imp, module)
			if l := layerOf(to); l > from {
				t.Errorf("%s (layer %d) imports %s (layer %d), which is above it", rel, from, to, l)
			}
		}
		if slices.Contains(connectionFree, rel) {
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, "github.com/nats-io/") {
					t.Errorf("%s imports %s: it decides without a connection", rel, imp)
				}
			}
		}
		if rel == "agentkit" || strings.HasPrefix(rel, "agentkit/") && rel != "agentkit/agenttest" {
			for _, dep := range p.Deps {
				if dep == module+"dispatcher" || strings.HasPrefix(dep, module+"dispatcher/") {
					t.Errorf("%s depends on %s: agentkit never depends on the dispatcher", rel, strings.TrimPrefix(dep, module))
				}
			}
		}
	}
}

func TestLayerOf(t *testing.T) {
	for _, c := range []struct {
		path string
		want int
	}{
		{"streams", 0}, {"internal/natstest", 1}, {"registry/document", 2}, {"registry/policy", 4},
		{"registry", 5}, {"registry/other", 5}, {"auth/signature", 6}, {"auth", 7}, {"auth/devtls", 7},
		{"dispatcher", 11}, {"dispatcher/engine", 10}, {"dispatcher/selection", 9}, {"dispatcher/gateway/mcp", 15},
		{"dispatcher/workflow", 14}, {"dispatcher/workflow/spec", 13}, {"agentkit/connect", 9}, {"agentkit/agenttest", 12},
		{"cmd/agentreach", 17}, {"authz", -1}, {"dispatchers", -1},
	} {
		if got := layerOf(c.path); got != c.want {
			t.Errorf("layerOf(%q) = %d, want %d", c.path, got, c.want)
		}
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

func TestPackagesStaySmall(t *testing.T) {
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(p.ImportPath, module)
		n := 0
		for _, f := range append(p.GoFiles, p.CgoFiles...) {
			n += countLines(t, filepath.Join(p.Dir, f))
		}
		ceiling, listed := oversize[rel]
		switch {
		case listed && n > ceiling:
			t.Errorf("%s has %d lines of non-test Go, over its ceiling of %d (and the limit of %d): split it", rel, n, ceiling, maxLines)
		case listed && n <= maxLines:
			t.Errorf("%s has %d lines, under the limit of %d: remove it from oversize", rel, n, maxLines)
		case !listed && n > maxLines:
			t.Errorf("%s has %d lines of non-test Go, over the limit of %d: split it", rel, n, maxLines)
		}
	}
}
