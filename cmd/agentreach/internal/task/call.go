package task

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/streams"
)

const callAbout = `
Calls a capability through the dispatchers with a JSON payload (default {})
and prints the result: the body on stdout (indented when it is JSON) and the
metadata (status, node, attempt, request id, orchestration id, cost) on stderr.
With --json, stdout gets one object {"result": …, "meta": {…}} instead.

The payload is the argument itself ('{"text":"hi"}'), @<file> for the
contents of a file, or - for stdin: the way to send a payload too big for a
command line. It must be JSON, and fit the server's max_payload with the
task's headers (else PAYLOAD_TOO_LARGE, naming both sizes).

On failure it prints "error: <CODE>: <message>" to stderr (with --json also
{"error": {"code", "message"}, "meta": …} on stdout) and exits with status 1;
usage errors, such as a payload that is not JSON, exit with status 2.

Example:
  agentreach call echo '{"text":"hi"}'
  agentreach call echo @order.json
  generate-order | agentreach call echo -
  agentreach call --agent echo-x1Yz2 --header traceparent=00-… echo '{}'
  agentreach call --stream story '{"words": 20}'

With --stream the agent's chunks are printed as they come (a JSON string's
text as it is, other values a line each; with --json one {"seq", "chunk"}
line each), then the metadata; an agent that does not stream prints its
result as without it.`

type CallOutput struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *streams.Error  `json:"error,omitempty"`
	Meta   *cli.CallMeta   `json:"meta,omitempty"`
}

func RunCall(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn     cli.ConnFlags
		agent    string
		affinity string
		headers  cli.PairList
		asJSON   bool
		stream   bool
	)
	cl := cli.NewCmdline("call", "agentreach call [flags] <capability> ['<json>' | @<file> | -]", callAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		fs.StringVar(&agent, "agent", "", "send the task to this instance `id` only (unicast)")
		fs.StringVar(&affinity, "affinity-key", "", "Reach-Affinity-Key: with the hash strategy, equal `key`s go to the same instance")
		registerHeaders(fs, &headers)
		fs.BoolVar(&stream, "stream", false, "ask for the result as a stream (Reach-Stream: 1) and print its chunks as they come")
		cl.JSONFlag(fs, &asJSON, `print one JSON object {"result": …, "meta": {…}} on stdout, or {"error": …} on failure`)
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 30*time.Second, "how long to wait for the result: the call's overall deadline (Reach-Deadline)")
		conn.RegisterJSDomain(fs)
	})
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	capability, p, code, ok := taskArgs(cl, pos, stderr)
	if !ok {
		return code
	}
	if agent != "" {
		if err := streams.ValidateInstanceID(agent); err != nil {
			return cl.UsageError(stderr, "--agent: %v", err)
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

	s, err := openClient(ctx, &conn, "agentreach-call", stderr)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer s.close()
	if stream {
		return streamCall(s.ctx, s.client, capability, p.Data, opts, stdout, stderr, requestID, asJSON,
			func(err error) error { return s.explain(err, p) })
	}
	res, err := s.client.Call(s.ctx, capability, p.Data, opts...)
	return printResult(stdout, stderr, res, s.explain(err, p), requestID, asJSON)
}

// taskArgs checks the positional arguments of a command that sends a task,
// <capability> [<payload>], and returns the capability and the payload
// (default {}; see readPayload), sent as it is. On a usage error, or a
// payload over maxPayloadRead, ok is false and code is the exit code.
func taskArgs(cl *cli.Cmdline, pos []string, stderr io.Writer) (capability string, p cli.Payload, code int, ok bool) {
	if len(pos) < 1 || len(pos) > 2 {
		return "", p, cl.UsageError(stderr, "want <capability> and optionally a payload ('<json>', @<file> or - for stdin), got %d arguments", len(pos)), false
	}
	capability, p = pos[0], cli.Payload{Data: []byte("{}")}
	if err := streams.ValidateCapability(capability); err != nil {
		return "", p, cl.UsageError(stderr, "%v", err), false
	}
	if len(pos) == 2 {
		var err error
		if p, err = cli.ReadPayload(pos[1]); err != nil {
			var we *streams.Error
			if errors.As(err, &we) {
				return "", p, cl.Fail(stderr, err), false
			}
			return "", p, cl.UsageError(stderr, "%v", err), false
		}
	}
	if len(bytes.TrimSpace(p.Data)) == 0 {
		return "", p, cl.UsageError(stderr, "%s is empty: want a JSON value", p.What()), false
	}
	if !json.Valid(p.Data) {
		return "", p, cl.UsageError(stderr, "%s is not valid JSON: %v", p.What(), jsonProblem(p.Data)), false
	}
	return capability, p, cli.ExitOK, true
}

// jsonProblem says what is wrong with data that is not JSON, and where.
func jsonProblem(data []byte) error {
	var probe any
	err := json.Unmarshal(data, &probe)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%w (at byte %d)", err, se.Offset)
	}
	return err
}

// registerHeaders defines --header, which call and submit share.
func registerHeaders(fs *flag.FlagSet, headers *cli.PairList) {
	fs.Var(headers, "header", "extra header as `key=value` (repeatable)")
}

// headerOptions turns --header pairs into call options.
func headerOptions(headers cli.PairList) []agentkit.CallOption {
	var opts []agentkit.CallOption
	for _, h := range headers.Pairs {
		opts = append(opts, agentkit.WithHeader(h.Key, h.Value))
	}
	return opts
}

// session is the connection of a command that talks to agents: a JSON
// client on the subjects of --prefix and a context bounded by --timeout.
type session struct {
	ctx    context.Context
	nc     *nats.Conn
	js     jetstream.JetStream
	client *agentkit.Client
	conn   *cli.ConnFlags
	cancel context.CancelFunc
}

// openClient sets up the logger and a connection called name; the caller
// closes the session when finished.
func openClient(ctx context.Context, conn *cli.ConnFlags, name string, stderr io.Writer) (*session, error) {
	conn.Log = conn.Logger(stderr)
	nc, err := conn.Connect(name)
	if err != nil {
		return nil, err
	}
	s := &session{nc: nc, conn: conn}
	opts := []agentkit.ClientOption{agentkit.WithJSON(), agentkit.WithSubjects(conn.Subjects()), agentkit.WithJetStreamDomain(conn.JSDomain())}
	if conn.Signs() {
		opts = append(opts, agentkit.WithCredentials(conn.Creds))
	}
	s.client, err = agentkit.NewClient(nc, opts...)
	if err == nil {
		s.js, err = conn.JetStream(nc)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.ctx, s.cancel = conn.Bounded(ctx)
	return s, nil
}

// explain returns the error of sending payload p to capability ("" for a
// fan-out) as the user needs it: a refusal by the server as UNAUTHORIZED,
// PAYLOAD_TOO_LARGE with the sizes.
func (s *session) explain(err error, p cli.Payload) error {
	if denied := s.conn.PermissionDenied(err); denied != nil {
		return denied
	}
	// A NO_AGENT for a mistyped capability names the nearest one already:
	// the dispatcher suggests it (Dispatcher.Suggest).
	return s.tooLarge(err, p)
}

func (s *session) close() {
	s.cancel()
	s.nc.Close()
}

// tooLarge rewrites the client's PAYLOAD_TOO_LARGE refusal of p to name
// the payload, its size and the server's limit, and what to do; other
// errors pass unchanged.
func (s *session) tooLarge(err error, p cli.Payload) error {
	var we *streams.Error
	if !errors.As(err, &we) || we.Code != streams.CodePayloadTooLarge {
		return err
	}
	return streams.NewError(streams.CodePayloadTooLarge,
		"%s is %d bytes: with the task's headers that is more than the server's max_payload of %d bytes; "+
			"send less, or raise the server's max_payload (agentreach up --max-payload)", p.What(), len(p.Data), s.nc.MaxPayload())
}

// printResult prints the outcome of a call or a durable task and returns the
// exit code: the body on stdout and the metadata on stderr, or with asJSON
// one callOutput object on stdout; an error as "error: <CODE>: <message>" on
// stderr. requestID fills the metadata when the outcome has none.
func printResult(stdout, stderr io.Writer, res *agentkit.Result, callErr error, requestID string, asJSON bool) int {
	meta := &cli.CallMeta{RequestID: requestID}
	if res != nil {
		meta = &cli.CallMeta{Status: string(res.Status), Node: res.Node, Attempt: res.Attempt,
			RequestID: res.RequestID, OrchestrationID: res.OrchestrationID, Cost: res.Cost}
		if meta.RequestID == "" {
			meta.RequestID = requestID
		}
	}
	if callErr != nil {
		e := cli.ErrorObject(callErr)
		if meta.Status == "" {
			meta.Status = string(streams.StatusFailed)
		}
		if asJSON {
			cli.WriteJSONLine(stdout, CallOutput{Error: e, Meta: meta})
		} else {
			printMeta(stderr, meta)
		}
		printWireError(stderr, e)
		for _, x := range e.Excluded { // why each instance offering it was passed over
			fmt.Fprintf(stderr, "  excluded %s: %s\n", x.Node, x.Reason)
		}
		return cli.ExitFail
	}
	body := bodyJSON(res.ContentType, res.Data)
	if asJSON {
		cli.WriteJSONLine(stdout, CallOutput{Result: body, Meta: meta})
		return cli.ExitOK
	}
	printBody(stdout, body)
	printMeta(stderr, meta)
	return cli.ExitOK
}

// printWireError prints "error: <CODE>: <message>" on one line, whatever
// whitespace the message ends with.
func printWireError(w io.Writer, e *streams.Error) {
	fmt.Fprintf(w, "error: %s: %s\n", e.Code, strings.TrimRight(e.Message, " \t\r\n"))
}

// printBody prints a JSON body indented, followed by one newline: the
// whitespace an agent wrote after its JSON would print blank lines.
func printBody(w io.Writer, body json.RawMessage) {
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, body, "", "  "); err != nil {
		pretty.Reset()
		pretty.Write(body)
	}
	fmt.Fprintf(w, "%s\n", bytes.TrimRight(pretty.Bytes(), " \t\r\n"))
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

func printMeta(w io.Writer, m *cli.CallMeta) {
	fmt.Fprintf(w, "status=%s node=%s attempt=%d request_id=%s orchestration_id=%s cost=%g\n",
		cli.OrDash(m.Status), cli.OrDash(m.Node), m.Attempt, cli.OrDash(m.RequestID), cli.OrDash(m.OrchestrationID), m.Cost)
}
