package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/document"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

const ordersReaderYAML = `# the declaration of docs/declarations.md
type: orders-reader
version: 1.2.0
capabilities:
  - name: orders.query
    mode: read
    idempotent: true
    input_schema: {type: object, required: [sku]}
    timeout_ms: 2000
    cost: 0.002
labels: {engine: [postgres], region: [eu-west]}
limits: {history_days: 30}
permissions: [read]
refuses: [write, delete]
tags: ["no"]
`

// provisioned runs a server with the topology and returns it with the
// connection flags that reach it.
func provisioned(t *testing.T) (*server.Server, []string) {
	t.Helper()
	s := natstest.RunServer(t)
	natstest.Provision(t, natstest.Connect(t, s), streams.Topology{Memory: true})
	return s, []string{"--server", s.ClientURL(), "--timeout", "5s"}
}

// bucket returns a bucket of s, for putting values by hand.
func bucket(t *testing.T, s *server.Server, name string) jetstream.KeyValue {
	t.Helper()
	js, _ := jetstream.New(natstest.Connect(t, s))
	kv, err := js.KeyValue(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// writeFiles writes name → content into a new directory and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// expect checks a command's exit code and that its output holds each want
// ("out:" prefix: stdout, else stderr).
func expect(t *testing.T, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, w := range want {
		if s, ok := strings.CutPrefix(w, "out:"); ok {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
			}
		} else if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
}

// failureCode returns the code of the one JSON failure object on stdout.
func failureCode(t *testing.T, stdout string) string {
	t.Helper()
	var out cli.FailureOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.Error == nil {
		t.Fatalf("stdout is not one failure object: %q (%v)", stdout, err)
	}
	return string(out.Error.Code)
}

func TestCapsCommands(t *testing.T) {
	s, srv := provisioned(t)
	caps := func(args ...string) result {
		return runCmd(t, document.RunCaps, append(append([]string{}, srv...), args...)...)
	}
	dir := writeFiles(t, map[string]string{
		"orders-reader.yaml": ordersReaderYAML,
		"bad.yaml":           "type: orders-reader\ncapabilities:\n  - name: orders.query\n    mode: delete\n",
	})
	good, bad := filepath.Join(dir, "orders-reader.yaml"), filepath.Join(dir, "bad.yaml")

	t.Run("validate", func(t *testing.T) {
		expect(t, runCmd(t, document.RunCaps, "validate", good), cli.ExitOK, "out:"+good+": a valid declaration of orders-reader (1 capability)")
		r := runCmd(t, document.RunCaps, "validate", bad)
		expect(t, r, cli.ExitFail, "error: "+bad+`: invalid capability declaration: capabilities[0].mode: want "read", "write" or nothing, got "delete"`)
		r = runCmd(t, document.RunCaps, "validate", "--json", bad)
		if code := failureCode(t, r.stdout); code != "BAD_REQUEST" {
			t.Fatalf("code %s, want BAD_REQUEST", code)
		}
		expect(t, runCmd(t, document.RunCaps, "validate", filepath.Join(dir, "missing.yaml")), cli.ExitUsage, "missing.yaml: no such file")
	})

	t.Run("put refuses an invalid declaration", func(t *testing.T) {
		expect(t, caps("put", bad), cli.ExitFail, "capabilities[0].mode")
		expect(t, caps("show", "orders-reader"), cli.ExitFail, `REACH_CAPS holds no declaration for type "orders-reader"`)
	})

	t.Run("put, show, ls", func(t *testing.T) {
		expect(t, caps("put", good), cli.ExitOK, "out:put orders-reader (revision ")
		setPayloadInput(t, `{"type": "billing", "capabilities": [{"name": "billing.pay", "mode": "write"}]}`)
		r := caps("put", "--json", "-")
		var put struct {
			Type     string `json:"type"`
			Revision uint64 `json:"revision"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &put); err != nil || put.Type != "billing" || put.Revision == 0 {
			t.Fatalf("put --json: %q (%v)", r.stdout, err)
		}

		// show prints YAML that reads back as the same declaration.
		r = caps("show", "orders-reader")
		expect(t, r, cli.ExitOK, "out:type: orders-reader", `out:- "no"`)
		fromFile, _ := registry.ParseDeclaration([]byte(ordersReaderYAML))
		shown, err := registry.ParseDeclaration([]byte(r.stdout))
		if err != nil {
			t.Fatalf("show's YAML does not read back: %v\n%s", err, r.stdout)
		}
		a, _ := json.Marshal(fromFile)
		b, _ := json.Marshal(shown)
		if string(a) != string(b) {
			t.Fatalf("show changed the declaration:\n%s\n%s", a, b)
		}
		r = caps("show", "--json", "billing")
		var d registry.Declaration
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.Capabilities[0].Mode != "write" {
			t.Fatalf("show --json: %q (%v)", r.stdout, err)
		}

		// A value put by hand that does not validate is listed as such.
		if _, err := bucket(t, s, streams.BucketCaps).Put(context.Background(), "junk", []byte(`{"type": "junk"}`)); err != nil {
			t.Fatal(err)
		}
		r = caps("ls")
		expect(t, r, cli.ExitOK, "out:TYPE", "out:orders-reader", "out:orders.query", "out:1.2.0",
			"out:ignored: invalid capability declaration: capabilities: at least one is required")
		var list []document.CapsEntryJSON
		if err := json.Unmarshal([]byte(caps("ls", "--json").stdout), &list); err != nil {
			t.Fatal(err)
		}
		if len(list) != 3 || list[0].Type != "billing" || list[1].Type != "junk" || list[1].Error == "" || list[1].Declaration != nil ||
			list[2].Declaration.Version != "1.2.0" {
			t.Fatalf("ls --json: %+v", list)
		}
		r = caps("show", "junk")
		expect(t, r, cli.ExitFail, "REACH_CAPS holds an invalid value under junk", "which dispatchers ignore")
	})

	t.Run("rm", func(t *testing.T) {
		expect(t, caps("rm", "billing"), cli.ExitOK, "out:removed billing")
		r := caps("rm", "--json", "billing")
		expect(t, r, cli.ExitFail, `no declaration for type "billing"`)
		if code := failureCode(t, r.stdout); code != string(cli.CodeNotFound) {
			t.Fatalf("code %s, want %s", code, cli.CodeNotFound)
		}
	})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "want a sub-command"},
		{[]string{"list"}, `unknown sub-command "list"`},
		{[]string{"put"}, "put: want one FILE, got 0 arguments"},
		{[]string{"ls", "x"}, `ls: unexpected argument "x"`},
		{[]string{"show", "Orders Reader"}, `show: "Orders Reader" is not an agent type`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			expect(t, caps(tc.args...), cli.ExitUsage, tc.want)
		})
	}
}

func TestJSONToYAML(t *testing.T) {
	got, err := document.JSONToYAML([]byte(`{"b":"yes","a":[1,2.5,"1.0",true,null],"e":{},"l":[],"s":"a: b"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `b: "yes"
a:
  - 1
  - 2.5
  - "1.0"
  - true
  - null
e: {}
l: []
s: 'a: b'
`
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
