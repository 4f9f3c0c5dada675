package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/streams"
)

const callAbout = `
Calls a capability through the dispatchers with a JSON payload (default {})
and prints the result: the body on stdout (indented when it is JSON) and the
metadata (status, node, attempt, request id, orchestration id, cost) on stderr.
With --json, stdout gets one object {"result": …, "meta": {…}} instead.

On failure it prints "error: <CODE>: <message>" to stderr (with --json also
{"error": {"code", "message"}, "meta": …} on stdout) and exits with status 1;
usage errors, such as a payload that is not JSON, exit with status 2.

Example:
  agentreach call echo '{"text":"hi"}'
  agentreach call --agent echo-x1Yz2 --header traceparent=00-… echo '{}'`

// callMeta is the metadata of a call's outcome.
type callMeta struct {
	Status          string  `json:"status"`
	Node            string  `json:"node,omitempty"`
	Attempt         int     `json:"attempt"`
	RequestID       string  `json:"request_id"`
	OrchestrationID string  `json:"orchestration_id,omitempty"`
	Cost            float64 `json:"cost"`
}

type callOutput struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *streams.Error  `json:"error,omitempty"`
	Meta   *callMeta       `json:"meta,omitempty"`
}

func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn     connFlags
		agent    string
		affinity string
		headers  pairList
		asJSON   bool
	)
	cl := newCmdline("call", "agentreach call [flags] <capability> [<json>]", callAbout)
	cl.group("Flags", func(fs *flag.FlagSet) {
		fs.StringVar(&agent, "agent", "", "send the task to this instance `id` only (unicast)")
		fs.StringVar(&affinity, "affinity-key", "", "Reach-Affinity-Key: with the hash strategy, equal `key`s go to the same instance")
		registerHeaders(fs, &headers)
		fs.BoolVar(&asJSON, "json", false, `print one JSON object {"result": …, "meta": {…}} on stdout`)
	})
	cl.group("Connection flags", func(fs *flag.FlagSet) {
		conn.register(fs, 30*time.Second, "how long to wait for the result: the call's overall deadline (Reach-Deadline)")
	})
	pos, code, ok := cl.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	capability, payload, code, ok := taskArgs(cl, pos, stderr)
	if !ok {
		return code
	}
	if agent != "" {
		if err := streams.ValidateInstanceID(agent); err != nil {
			return cl.usageError(stderr, "--agent: %v", err)
		}
	}
	requestID := streams.NewRequestID()
	opts := append(headerOptions(headers), agentkit.WithRequestID(requestID))
	if agent != "" {
		opts = append(opts, agentkit.ToAgent(agent))
	}
	if affinity != "" {
		opts = append(opts, agentkit.WithAffinityKey(affinity))
	}

	cctx, client, done, ok := openClient(ctx, &conn, "agentreach-call", stderr)
	if !ok {
		return exitFail
	}
	defer done()
	res, err := client.Call(cctx, capability, payload, opts...)
	return printResult(stdout, stderr, res, err, requestID, asJSON)
}

// taskArgs checks the positional arguments of a command that sends a task,
// <capability> [<json>], and returns the capability and the payload (default
// {}): the JSON bytes as given, sent as they are. On a usage error ok is
// false and code is the exit code.
func taskArgs(cl *cmdline, pos []string, stderr io.Writer) (capability string, payload []byte, code int, ok bool) {
	if len(pos) < 1 || len(pos) > 2 {
		return "", nil, cl.usageError(stderr, "want <capability> and optionally a JSON payload, got %d arguments", len(pos)), false
	}
	capability, payload = pos[0], []byte("{}")
	if len(pos) == 2 {
		payload = []byte(pos[1])
	}
	if err := streams.ValidateCapability(capability); err != nil {
		return "", nil, cl.usageError(stderr, "%v", err), false
	}
	var probe any
	if err := json.Unmarshal(payload, &probe); err != nil {
		return "", nil, cl.usageError(stderr, "payload is not valid JSON: %v", err), false
	}
	return capability, payload, exitOK, true
}

// registerHeaders defines --header, which call and submit share.
func registerHeaders(fs *flag.FlagSet, headers *pairList) {
	fs.Var(headers, "header", "extra header as `key=value` (repeatable)")
}

// headerOptions turns --header pairs into call options.
func headerOptions(headers pairList) []agentkit.CallOption {
	var opts []agentkit.CallOption
	for _, h := range headers.pairs {
		opts = append(opts, agentkit.WithHeader(h.key, h.value))
	}
	return opts
}

// openClient sets up a command that talks to agents: the logger, a
// connection called name, a JSON client on the subjects of --prefix, and
// ctx bounded by --timeout. On failure it prints the error and ok is false;
// otherwise the caller runs done when finished.
func openClient(ctx context.Context, conn *connFlags, name string, stderr io.Writer) (
	cctx context.Context, client *agentkit.Client, done func(), ok bool) {
	conn.log = conn.logger(stderr)
	nc, err := conn.connect(name)
	if err == nil {
		client, err = agentkit.NewClient(nc, agentkit.WithJSON(), agentkit.WithSubjects(conn.subjects()))
		if err != nil {
			nc.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return nil, nil, nil, false
	}
	cctx, cancel := context.WithTimeout(ctx, conn.timeout)
	return cctx, client, func() { cancel(); nc.Close() }, true
}

// printResult prints the outcome of a call or a durable task and returns the
// exit code: the body on stdout and the metadata on stderr, or with asJSON
// one callOutput object on stdout; an error as "error: <CODE>: <message>" on
// stderr. requestID fills the metadata when the outcome has none.
func printResult(stdout, stderr io.Writer, res *agentkit.Result, callErr error, requestID string, asJSON bool) int {
	meta := &callMeta{RequestID: requestID}
	if res != nil {
		meta = &callMeta{Status: string(res.Status), Node: res.Node, Attempt: res.Attempt,
			RequestID: res.RequestID, OrchestrationID: res.OrchestrationID, Cost: res.Cost}
		if meta.RequestID == "" {
			meta.RequestID = requestID
		}
	}
	if callErr != nil {
		e := streams.AsError(callErr)
		if meta.Status == "" {
			meta.Status = string(streams.StatusFailed)
		}
		if asJSON {
			writeJSONLine(stdout, callOutput{Error: e, Meta: meta})
		} else {
			printMeta(stderr, meta)
		}
		fmt.Fprintf(stderr, "error: %s: %s\n", e.Code, e.Message)
		return exitFail
	}
	body := bodyJSON(res.ContentType, res.Data)
	if asJSON {
		writeJSONLine(stdout, callOutput{Result: body, Meta: meta})
		return exitOK
	}
	printBody(stdout, body)
	printMeta(stderr, meta)
	return exitOK
}

// printBody prints a JSON body indented, followed by a newline.
func printBody(w io.Writer, body json.RawMessage) {
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, body, "", "  "); err != nil {
		pretty.Reset()
		pretty.Write(body)
	}
	fmt.Fprintf(w, "%s\n", pretty.Bytes())
}

// bodyJSON returns a message body of contentType as JSON: JSON as is,
// msgpack decoded, anything else as a JSON string; an empty body is null.
func bodyJSON(contentType string, data []byte) json.RawMessage {
	if len(bytes.TrimSpace(data)) == 0 {
		return json.RawMessage("null")
	}
	if contentType == streams.ContentTypeJSON && json.Valid(data) {
		return data
	}
	if contentType == streams.ContentTypeMsgpack {
		var v any
		if streams.Decode(contentType, data, &v) == nil {
			if b, err := json.Marshal(v); err == nil {
				return b
			}
		}
	}
	b, _ := json.Marshal(string(data))
	return b
}

func printMeta(w io.Writer, m *callMeta) {
	fmt.Fprintf(w, "status=%s node=%s attempt=%d request_id=%s orchestration_id=%s cost=%g\n",
		orDash(m.Status), orDash(m.Node), m.Attempt, orDash(m.RequestID), orDash(m.OrchestrationID), m.Cost)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeJSONLine(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil { // every field marshals; keep the output well-formed regardless
		b = []byte(`{"error":{"code":"INTERNAL","message":"encode output"}}`)
	}
	fmt.Fprintf(w, "%s\n", b)
}
