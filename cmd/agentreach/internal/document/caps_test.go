package document

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/registry/declare"
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

func TestCapsCommands(t *testing.T) {
	s, srv := clitest.Provisioned(t)
	caps := func(args ...string) clitest.Result {
		return clitest.RunCmd(t, RunCaps, append(append([]string{}, srv...), args...)...)
	}
	dir := clitest.WriteFiles(t, map[string]string{
		"orders-reader.yaml": ordersReaderYAML,
		"bad.yaml":           "type: orders-reader\ncapabilities:\n  - name: orders.query\n    mode: delete\n",
	})
	good, bad := filepath.Join(dir, "orders-reader.yaml"), filepath.Join(dir, "bad.yaml")

	t.Run("validate", func(t *testing.T) {
		clitest.Expect(t, clitest.RunCmd(t, RunCaps, "validate", good), cli.ExitOK, "out:"+good+": a valid declaration of orders-reader (1 capability)")
		r := clitest.RunCmd(t, RunCaps, "validate", bad)
		clitest.Expect(t, r, cli.ExitFail, "error: "+bad+`: invalid capability declaration: capabilities[0].mode: want "read", "write" or nothing, got "delete"`)
		r = clitest.RunCmd(t, RunCaps, "validate", "--json", bad)
		if code := clitest.FailureCode(t, r.Stdout); code != "BAD_REQUEST" {
			t.Fatalf("code %s, want BAD_REQUEST", code)
		}
		clitest.Expect(t, clitest.RunCmd(t, RunCaps, "validate", filepath.Join(dir, "missing.yaml")), cli.ExitUsage, "missing.yaml: no such file")
	})

	t.Run("put refuses an invalid declaration", func(t *testing.T) {
		clitest.Expect(t, caps("put", bad), cli.ExitFail, "capabilities[0].mode")
		clitest.Expect(t, caps("show", "orders-reader"), cli.ExitFail, `REACH_CAPS holds no declaration for type "orders-reader"`)
	})

	t.Run("put, show, ls", func(t *testing.T) {
		clitest.Expect(t, caps("put", good), cli.ExitOK, "out:put orders-reader (revision ")
		clitest.SetPayloadInput(t, `{"type": "billing", "capabilities": [{"name": "billing.pay", "mode": "write"}]}`)
		r := caps("put", "--json", "-")
		var put struct {
			Type     string `json:"type"`
			Revision uint64 `json:"revision"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &put); err != nil || put.Type != "billing" || put.Revision == 0 {
			t.Fatalf("put --json: %q (%v)", r.Stdout, err)
		}

		// show prints YAML that reads back as the same declaration.
		r = caps("show", "orders-reader")
		clitest.Expect(t, r, cli.ExitOK, "out:type: orders-reader", `out:- "no"`)
		fromFile, _ := declare.ParseDeclaration([]byte(ordersReaderYAML))
		shown, err := declare.ParseDeclaration([]byte(r.Stdout))
		if err != nil {
			t.Fatalf("show's YAML does not read back: %v\n%s", err, r.Stdout)
		}
		a, _ := json.Marshal(fromFile)
		b, _ := json.Marshal(shown)
		if string(a) != string(b) {
			t.Fatalf("show changed the declaration:\n%s\n%s", a, b)
		}
		r = caps("show", "--json", "billing")
		var d declare.Declaration
		if err := json.Unmarshal([]byte(r.Stdout), &d); err != nil || d.Capabilities[0].Mode != "write" {
			t.Fatalf("show --json: %q (%v)", r.Stdout, err)
		}

		// A value put by hand that does not validate is listed as such.
		if _, err := clitest.Bucket(t, s, streams.BucketCaps).Put(context.Background(), "junk", []byte(`{"type": "junk"}`)); err != nil {
			t.Fatal(err)
		}
		r = caps("ls")
		clitest.Expect(t, r, cli.ExitOK, "out:TYPE", "out:orders-reader", "out:orders.query", "out:1.2.0",
			"out:ignored: invalid capability declaration: capabilities: at least one is required")
		var list []CapsEntryJSON
		if err := json.Unmarshal([]byte(caps("ls", "--json").Stdout), &list); err != nil {
			t.Fatal(err)
		}
		if len(list) != 3 || list[0].Type != "billing" || list[1].Type != "junk" || list[1].Error == "" || list[1].Declaration != nil ||
			list[2].Declaration.Version != "1.2.0" {
			t.Fatalf("ls --json: %+v", list)
		}
		r = caps("show", "junk")
		clitest.Expect(t, r, cli.ExitFail, "REACH_CAPS holds an invalid value under junk", "which dispatchers ignore")
	})

	t.Run("rm", func(t *testing.T) {
		clitest.Expect(t, caps("rm", "billing"), cli.ExitOK, "out:removed billing")
		r := caps("rm", "--json", "billing")
		clitest.Expect(t, r, cli.ExitFail, `no declaration for type "billing"`)
		if code := clitest.FailureCode(t, r.Stdout); code != string(cli.CodeNotFound) {
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
			clitest.Expect(t, caps(tc.args...), cli.ExitUsage, tc.want)
		})
	}
}

func TestJSONToYAML(t *testing.T) {
	got, err := JSONToYAML([]byte(`{"b":"yes","a":[1,2.5,"1.0",true,null],"e":{},"l":[],"s":"a: b"}`))
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

// TestCapsWarnsOfTheTaxonomy: `caps validate` and `caps put` warn — and
// still accept — a capability whose type is outside the taxonomy in
// REACH_POLICY, or named almost like another in the catalog; a declaration
// that keeps to both gets no warning (the control).
func TestCapsWarnsOfTheTaxonomy(t *testing.T) {
	_, srv := clitest.Provisioned(t)
	run := func(cmd func(context.Context, []string, io.Writer, io.Writer) int, args ...string) clitest.Result {
		return clitest.RunCmd(t, cmd, append(append([]string{}, srv...), args...)...)
	}
	dir := clitest.WriteFiles(t, map[string]string{
		"taxonomy.yaml": "types:\n  - name: query\n    description: reads data\n  - name: math\n",
		"reader.yaml":   "type: reader\ncapabilities:\n  - name: query.orders\n",
		"near.yaml":     "type: near\ncapabilities:\n  - name: query.order\n  - name: lookup.users\n",
		"fine.yaml":     "type: fine\ncapabilities:\n  - name: math.add\n",
	})
	file := func(name string) string { return filepath.Join(dir, name) }

	// Offline: only the file's own names, and the taxonomy given.
	r := clitest.RunCmd(t, RunCaps, "validate", "--taxonomy", file("taxonomy.yaml"), file("near.yaml"))
	clitest.Expect(t, r, cli.ExitOK, "out:a valid declaration of near", `warning: lookup.users: its type "lookup" is not in the taxonomy (query, math)`)
	if strings.Contains(r.Stderr, "almost like") {
		t.Errorf("validate compares with a catalog it does not read:\n%s", r.Stderr)
	}

	clitest.Expect(t, run(RunPolicy, "set", "taxonomy", file("taxonomy.yaml")), cli.ExitOK, "out:set taxonomy")
	clitest.Expect(t, run(RunPolicy, "validate", "taxonomy", file("reader.yaml")), cli.ExitFail, "capabilities: unknown key")
	r = run(RunCaps, "put", file("reader.yaml"))
	clitest.Expect(t, r, cli.ExitOK, "out:put reader")
	if strings.Contains(r.Stderr, "warning") {
		t.Errorf("a declaration within the taxonomy is warned of:\n%s", r.Stderr)
	}
	r = run(RunCaps, "put", "--json", file("near.yaml"))
	var put struct {
		Revision uint64 `json:"revision"`
		Warnings []struct {
			Capability, Kind, Other string
		} `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &put); err != nil || put.Revision == 0 || len(put.Warnings) != 2 ||
		put.Warnings[0].Capability != "lookup.users" || put.Warnings[0].Kind != "outside_taxonomy" ||
		put.Warnings[1].Capability != "query.order" || put.Warnings[1].Other != "query.orders" {
		t.Errorf("put --json of a declaration outside the taxonomy and near another: %s %+v (%v)", r.Stdout, put, err)
	}
	clitest.Expect(t, run(RunCaps, "show", "near"), cli.ExitOK, "out:query.order") // warned, still stored
	r = run(RunCaps, "put", file("fine.yaml"))
	if r.Code != cli.ExitOK || strings.Contains(r.Stderr, "warning") {
		t.Errorf("put of a declaration that keeps to the taxonomy: %d %s", r.Code, r.Stderr)
	}
}
