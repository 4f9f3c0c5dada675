package document

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/registry/taxonomy"
	"github.com/agent-reach/agentreach/streams"
)

const capsAbout = `
Manages the capability declarations in REACH_CAPS: per agent type, what its
instances can do (capabilities with input schemas, timeouts and costs),
their labels, limits and permissions, and what they refuse. Dispatchers
route a task only to instances whose declaration satisfies its requirements.
A FILE is YAML or JSON ("-" reads stdin); docs/declarations.md describes it.

Sub-commands:
  put FILE         validate FILE and store it under its type; an invalid
                   declaration is refused with the field named, and nothing
                   is written; warns (without refusing) of a capability
                   whose type is outside the taxonomy in REACH_POLICY, or
                   named almost like another in the catalog
  validate FILE    check FILE without connecting to NATS; warns of
                   capabilities named almost alike, and with --taxonomy of
                   those outside it
  ls               one row per type, invalid stored values marked (--json:
                   an array)
  show TYPE        the declaration of TYPE in YAML (--json: in JSON)
  rm TYPE          delete the declaration of TYPE

Example:
  agentreach caps validate orders-reader.yaml
  agentreach caps put orders-reader.yaml
  agentreach caps show orders-reader`

// CapsEntryJSON is one row of `caps ls --json`.
type CapsEntryJSON struct {
	Type        string               `json:"type"`
	Revision    uint64               `json:"revision"`
	Updated     time.Time            `json:"updated"`
	Declaration *declare.Declaration `json:"declaration,omitempty"`
	// Error says why the stored value is invalid: dispatchers ignore it
	// and keep the last good one.
	Error string `json:"error,omitempty"`
}

func RunCaps(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn         cli.ConnFlags
		asJSON       bool
		taxonomyFile string
	)
	cl := cli.NewCmdline("caps", "agentreach caps [flags] put FILE | validate FILE | ls | show TYPE | rm TYPE", capsAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		cl.JSONFlag(fs, &asJSON, `print JSON: put {"type", "revision"}, validate {"valid", "type"}, ls an array,`+"\n"+
			`show the declaration, rm {"removed"}; a failure as {"error": …}; warnings as "warnings"`)
		fs.StringVar(&taxonomyFile, "taxonomy", "", "validate: a taxonomy FILE (the value of the taxonomy key of REACH_POLICY)\n"+
			"to warn of capabilities outside it")
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "bound on connecting and on each read or write")
	})
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	sub, argName, arg, code, ok := cl.Subcommand(stderr, pos, []cli.SubCommand{{Name: "put", Arg: "FILE"}, {Name: "validate", Arg: "FILE"}, {Name: "ls", Arg: ""}, {Name: "show", Arg: "TYPE"}, {Name: "rm", Arg: "TYPE"}})
	switch {
	case !ok:
		return code
	case argName == "TYPE" && !validType(arg):
		return cl.UsageError(stderr, "%s: %q is not an agent type: want dotted lowercase tokens such as orders-reader", sub, arg)
	}

	var decl *declare.Declaration
	var name string
	if argName == "FILE" {
		data, from, err := ReadDocument(arg, declare.MaxDeclarationSize)
		if err != nil {
			return cl.UsageError(stderr, "%v", err)
		}
		name = from
		if decl, err = declare.ParseDeclaration(data); err != nil {
			return cl.Fail(stderr, InvalidDocument(from, err))
		}
	}
	if sub == "validate" {
		var tx *taxonomy.Taxonomy
		if taxonomyFile != "" {
			data, from, err := ReadDocument(taxonomyFile, policy.MaxSize)
			if err != nil {
				return cl.UsageError(stderr, "--taxonomy: %v", err)
			}
			if tx, err = taxonomy.Parse(data); err != nil {
				return cl.Fail(stderr, InvalidDocument(from, err))
			}
		}
		warnings := CapsWarnings(tx, decl, nil)
		if asJSON {
			cli.WriteJSONLine(stdout, map[string]any{"valid": true, "type": decl.Type, "warnings": warnings})
		} else {
			fmt.Fprintf(stdout, "%s: a valid declaration of %s (%s)\n", name, decl.Type, cli.Count(len(decl.Capabilities), "capability", "capabilities"))
			printWarnings(stderr, warnings)
		}
		return cli.ExitOK
	}

	conn.Log = conn.Logger(stderr)
	nc, kv, err := openBucket(ctx, &conn, "agentreach-caps", streams.BucketCaps)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer nc.Close()
	ctx, cancel := conn.Bounded(ctx)
	defer cancel()
	switch sub {
	case "put":
		warnings := putWarnings(ctx, nc, kv, decl, stderr)
		rev, err := registry.PutDeclaration(ctx, kv, decl)
		if err != nil {
			return cl.Fail(stderr, err)
		}
		if asJSON {
			cli.WriteJSONLine(stdout, map[string]any{"type": decl.Type, "revision": rev, "warnings": warnings})
		} else {
			fmt.Fprintf(stdout, "put %s (revision %d)\n", decl.Type, rev)
			printWarnings(stderr, warnings)
		}
	case "ls":
		list, err := registry.ListDeclarations(ctx, kv)
		if err != nil {
			return cl.Fail(stderr, err)
		}
		if asJSON {
			err = printCapsJSON(stdout, list)
		} else {
			err = printCapsTable(stdout, list, time.Now())
		}
		if err != nil {
			return cl.Fail(stderr, err)
		}
	case "show":
		e, err := registry.GetDeclaration(ctx, kv, arg)
		switch {
		case errors.Is(err, registry.ErrNoDeclaration):
			return cl.Fail(stderr, cli.WithCode(cli.CodeNotFound, fmt.Errorf("%s holds no declaration for type %q", streams.BucketCaps, arg)))
		case err != nil:
			return cl.Fail(stderr, err)
		case e.Err != nil:
			return cl.Fail(stderr, storedInvalid(streams.BucketCaps, e.Type, e.Revision, e.Err))
		}
		if err := printDocument(stdout, e.Declaration, asJSON); err != nil {
			return cl.Fail(stderr, err)
		}
	case "rm":
		if _, err := registry.GetDeclaration(ctx, kv, arg); errors.Is(err, registry.ErrNoDeclaration) {
			return cl.Fail(stderr, cli.WithCode(cli.CodeNotFound, fmt.Errorf("%s holds no declaration for type %q", streams.BucketCaps, arg)))
		}
		if err := registry.DeleteDeclaration(ctx, kv, arg); err != nil {
			return cl.Fail(stderr, err)
		}
		if asJSON {
			cli.WriteJSONLine(stdout, map[string]string{"removed": arg})
		} else {
			fmt.Fprintf(stdout, "removed %s\n", arg)
		}
	}
	return cli.ExitOK
}

// CapsWarnings returns the catalog governance's warnings for decl
// (registry/taxonomy): a capability whose type tx lacks, and one named
// almost like another of decl or of the catalog's other types. Never nil.
func CapsWarnings(tx *taxonomy.Taxonomy, decl *declare.Declaration, catalog []registry.DeclarationEntry) []taxonomy.Warning {
	names := make([]string, len(decl.Capabilities))
	for i, c := range decl.Capabilities {
		names[i] = c.Name
	}
	var others []string
	for _, e := range catalog {
		if e.Declaration == nil || e.Type == decl.Type {
			continue
		}
		for _, c := range e.Declaration.Capabilities {
			others = append(others, c.Name)
		}
	}
	out := taxonomy.Check(tx, names, others)
	if out == nil {
		out = []taxonomy.Warning{}
	}
	return out
}

// putWarnings reads the taxonomy from REACH_POLICY and the catalog and
// returns decl's warnings; what it cannot read it says on stderr, and
// warns without.
func putWarnings(ctx context.Context, nc *nats.Conn, caps jetstream.KeyValue, decl *declare.Declaration, stderr io.Writer) []taxonomy.Warning {
	var tx *taxonomy.Taxonomy
	js, err := jetstream.New(nc)
	var kv jetstream.KeyValue
	if err == nil {
		kv, err = js.KeyValue(ctx, streams.BucketPolicy)
	}
	var e registry.PolicyEntry
	if err == nil {
		e, err = registry.GetPolicy(ctx, kv, taxonomy.PolicyKey)
	}
	switch {
	case errors.Is(err, registry.ErrNoPolicy):
	case err != nil:
		fmt.Fprintf(stderr, "warning: the taxonomy in %s was not read (%v): capabilities not checked against it\n", streams.BucketPolicy, err)
	case e.Err != nil:
		fmt.Fprintf(stderr, "warning: the taxonomy in %s does not validate (%v): capabilities not checked against it\n", streams.BucketPolicy, e.Err)
	default:
		tx, _ = e.Value.Decoded.(*taxonomy.Taxonomy)
	}
	catalog, err := registry.ListDeclarations(ctx, caps)
	if err != nil {
		fmt.Fprintf(stderr, "warning: the catalog was not read (%v): names not compared with it\n", err)
	}
	return CapsWarnings(tx, decl, catalog)
}

// printWarnings writes each warning on a line of its own.
func printWarnings(w io.Writer, warnings []taxonomy.Warning) {
	for _, x := range warnings {
		fmt.Fprintf(w, "warning: %s\n", x.Message)
	}
}

// validType reports whether s can name an agent type (a REACH_CAPS key).
func validType(s string) bool { return streams.ValidateCapability(s) == nil }

func printCapsJSON(w io.Writer, list []registry.DeclarationEntry) error {
	out := make([]CapsEntryJSON, len(list))
	for i, e := range list {
		out[i] = CapsEntryJSON{Type: e.Type, Revision: e.Revision, Updated: e.Updated, Declaration: e.Declaration}
		if e.Err != nil {
			out[i].Error = e.Err.Error()
		}
	}
	return cli.WriteJSON(w, out)
}

func printCapsTable(w io.Writer, list []registry.DeclarationEntry, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tREVISION\tAGE\tVERSION\tCAPABILITIES\tSTATUS")
	for _, e := range list {
		version, caps, status := "-", "-", "ok"
		if d := e.Declaration; d != nil {
			names := make([]string, len(d.Capabilities))
			for i, c := range d.Capabilities {
				names[i] = c.Name
			}
			version, caps = cli.OrDash(d.Version), strings.Join(names, ",")
		} else {
			status = invalidStatus(e.Err)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", e.Type, e.Revision, cli.HeartbeatAge(now.Sub(e.Updated)), version, caps, status)
	}
	return tw.Flush()
}

// openBucket connects and binds bucket; a missing bucket is a
// NOT_PROVISIONED error saying what creates it.
func openBucket(ctx context.Context, conn *cli.ConnFlags, name, bucket string) (*nats.Conn, jetstream.KeyValue, error) {
	nc, err := conn.Connect(name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	ctx, cancel := conn.Bounded(ctx)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		nc.Close()
		return nil, nil, conn.NotProvisioned(err, "bucket "+bucket)
	}
	return nc, kv, nil
}

// ReadDocument reads a declaration or policy FILE, "-" for stdin, of at
// most max bytes, and returns it with the name messages give it. A missing
// or unreadable file is an error naming it.
func ReadDocument(arg string, max int) (data []byte, name string, err error) {
	var r io.Reader
	switch arg {
	case "":
		return nil, "", errors.New("the FILE argument is empty")
	case "-":
		r, name = cli.PayloadInput(), "stdin"
	default:
		f, err := os.Open(arg)
		if err != nil {
			return nil, "", err // *PathError names the file
		}
		defer f.Close()
		r, name = f, arg
	}
	data, err = io.ReadAll(io.LimitReader(r, int64(max)+1))
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("read %s: %w", name, err)
	case len(data) > max:
		return nil, "", fmt.Errorf("%s is more than %d bytes, the most a value may hold", name, max)
	}
	return data, name, nil
}

// InvalidDocument is the failure of a FILE that does not validate: a
// BAD_REQUEST naming the file before the field.
func InvalidDocument(name string, err error) error {
	return cli.WithCode(streams.CodeBadRequest, fmt.Errorf("%s: %w", name, err))
}

// storedInvalid is the failure of reading a stored value that does not
// validate.
func storedInvalid(bucket, key string, revision uint64, err error) error {
	return cli.WithCode(streams.CodeBadRequest, fmt.Errorf("%s holds an invalid value under %s (revision %d), which dispatchers ignore, keeping the last good one: %w",
		bucket, key, revision, err))
}

// printDocument prints v as YAML, or with asJSON as indented JSON.
func printDocument(w io.Writer, v any, asJSON bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if asJSON {
		return cli.WriteJSON(w, json.RawMessage(b))
	}
	y, err := JSONToYAML(b)
	if err != nil {
		return err
	}
	_, err = w.Write(y)
	return err
}

// jsonToYAML writes a JSON document as block YAML, keys in their order.
// Strings YAML would read as something else ("no", "1.0") come out quoted.
func JSONToYAML(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	node, err := yamlNode(dec)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(node); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// yamlNode reads the next JSON value from dec as a YAML node.
func yamlNode(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if t == '{' {
			n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		}
		for dec.More() {
			if n.Kind == yaml.MappingNode {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k.(string)})
			}
			v, err := yamlNode(dec)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		if len(n.Content) == 0 {
			n.Style = yaml.FlowStyle // {} and []
		}
		return n, nil
	case string:
		n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t}
		if yaml11Bools[t] {
			n.Style = yaml.DoubleQuotedStyle // YAML 1.1 readers take these for booleans
		}
		return n, nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(t.String(), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: t.String()}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(t)}, nil
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
}

// invalidStatus is the last column of `ls` for a stored value that does
// not validate: uncut, so it names the field.
func invalidStatus(err error) string { return "ignored: " + cli.OneLine(err.Error()) }

// yaml11Bools are the strings YAML 1.1 reads as booleans; YAML 1.2 (and
// so this CLI) reads them as strings, but other tools may not.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "n": true, "N": true, "no": true, "No": true, "NO": true,
	"on": true, "On": true, "ON": true, "off": true, "Off": true, "OFF": true,
}
