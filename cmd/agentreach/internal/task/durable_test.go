package task

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/durable"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// park publishes a parked task straight to subject (reach.dlq.<cap> or
// reach.review.<cap>), as a dispatcher would, and returns its sequence.
func park(t *testing.T, url, subject, requestID, reason, body string, extra ...string) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(subject)
	m.Data = []byte(body)
	m.Header.Set(streams.HeaderRequestID, requestID)
	m.Header.Set(streams.HeaderDLQReason, reason)
	m.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
	for i := 0; i+1 < len(extra); i += 2 {
		m.Header.Set(extra[i], extra[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// listParked runs `<cmd> ls --json` and decodes the entries.
func listParked(t *testing.T, run cli.RunFunc, srv []string) []cli.ParkedJSON {
	t.Helper()
	r := clitest.RunCmd(t, run, append(append([]string{}, srv...), "ls", "--json")...)
	if r.Code != cli.ExitOK {
		t.Fatalf("ls: exit %d: %s", r.Code, r.Stderr)
	}
	var out []cli.ParkedJSON
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("ls --json: %q: %v", r.Stdout, err)
	}
	return out
}

func TestDurableCommands(t *testing.T) {
	url := startStack(t)
	srv := []string{"--server", url, "--timeout", "10s"}
	with := func(args ...string) []string { return append(append([]string{}, srv...), args...) }

	t.Run("submit then result", func(t *testing.T) {
		r := clitest.RunCmd(t, RunSubmit, with("echo", `{"text":"durable"}`)...)
		if r.Code != cli.ExitOK {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		id := strings.TrimSpace(r.Stdout)
		if _, err := uuid.Parse(id); err != nil {
			t.Fatalf("stdout %q is not a request id: %v", r.Stdout, err)
		}
		r = clitest.RunCmd(t, RunResult, with("--wait", id)...)
		if want := "{\n  \"text\": \"durable\"\n}\n"; r.Code != cli.ExitOK || r.Stdout != want {
			t.Fatalf("result --wait: exit %d, stdout %q (want %q), stderr %q", r.Code, r.Stdout, want, r.Stderr)
		}
		for _, want := range []string{"status=FINISHED", "node=echo-", "attempt=1", "request_id=" + id} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr %q lacks %q", r.Stderr, want)
			}
		}
		// Recorded: without --wait too, and as JSON.
		r = clitest.RunCmd(t, RunResult, with("--json", id)...)
		var out struct {
			Result map[string]any `json:"result"`
			Meta   cli.CallMeta   `json:"meta"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || r.Code != cli.ExitOK {
			t.Fatalf("result --json: exit %d, stdout %q (%v)", r.Code, r.Stdout, err)
		}
		if out.Result["text"] != "durable" || out.Meta.Status != "FINISHED" || out.Meta.RequestID != id {
			t.Fatalf("result --json: %+v", out)
		}
	})

	t.Run("submit --wait", func(t *testing.T) {
		id := "cli-" + uuid.NewString()
		r := clitest.RunCmd(t, RunSubmit, with("--wait", "--request-id", id, "--header", "traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			"echo", `{"n":[1,2]}`)...)
		if r.Code != cli.ExitOK || strings.Join(strings.Fields(r.Stdout), "") != `{"n":[1,2]}` {
			t.Fatalf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		if !strings.Contains(r.Stderr, "status=FINISHED") || !strings.Contains(r.Stderr, "request_id="+id) {
			t.Fatalf("stderr %q", r.Stderr)
		}
		r = clitest.RunCmd(t, RunSubmit, with("--json", "--wait", "math.add", `{"a":1,"b":2}`)...)
		var out CallOutput
		if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || r.Code != cli.ExitOK ||
			strings.Join(strings.Fields(string(out.Result)), "") != `{"sum":3}` || out.Meta == nil || out.Meta.RequestID == "" {
			t.Fatalf("--json --wait: exit %d, stdout %q (%v), stderr %q", r.Code, r.Stdout, err, r.Stderr)
		}
		r = clitest.RunCmd(t, RunSubmit, with("--json", "echo")...)
		var sub SubmitOutput
		if err := json.Unmarshal([]byte(r.Stdout), &sub); err != nil || r.Code != cli.ExitOK || sub.RequestID == "" {
			t.Fatalf("--json: exit %d, stdout %q (%v)", r.Code, r.Stdout, err)
		}
	})

	t.Run("business rejection is an outcome", func(t *testing.T) {
		r := clitest.RunCmd(t, RunSubmit, with("--wait", "math.add", `{"a":1}`)...)
		if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "error: BIZ_REJECT: ") {
			t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
		}
	})

	t.Run("no capable agent: the task waits", func(t *testing.T) {
		r := clitest.RunCmd(t, RunSubmit, with("nobody.home", `{}`)...)
		if r.Code != cli.ExitOK {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		id := strings.TrimSpace(r.Stdout)
		r = clitest.RunCmd(t, RunResult, with(id)...)
		if r.Code != cli.ExitFail || r.Stdout != "" || !strings.Contains(r.Stderr, "error: no outcome recorded for "+id+
			": no result, dead letter or review entry; the task may still wait or run, or was never submitted\n") {
			t.Fatalf("result: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		r = clitest.RunCmd(t, RunResult, with("--json", id)...)
		if e := clitest.DecodeFailure(t, r); r.Code != cli.ExitFail || e.Error.Code != cli.CodeNotFound || !strings.Contains(e.Error.Message, id) {
			t.Fatalf("result --json: exit %d, stdout %q", r.Code, r.Stdout)
		}
		r = clitest.RunCmd(t, RunResult, with("--wait", "--timeout", "300ms", id)...)
		if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "error: DEADLINE_EXCEEDED: ") ||
			!strings.Contains(r.Stderr, "or was never submitted") || !strings.Contains(r.Stderr, "'agentreach result "+id+"'") {
			t.Fatalf("result --wait: exit %d, stderr %q", r.Code, r.Stderr)
		}
		// It waits in REACH_TASKS, not in a queue for people.
		for _, e := range append(listParked(t, RunDLQ, srv), listParked(t, RunReview, srv)...) {
			if e.RequestID == id {
				t.Fatalf("waiting task parked: %+v", e)
			}
		}
	})

	t.Run("poison dead letter: ls, show, purge", func(t *testing.T) {
		r := clitest.RunCmd(t, RunSubmit, with("math.add", `{"a":"x","b":1}`)...)
		if r.Code != cli.ExitOK {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		id := strings.TrimSpace(r.Stdout)
		var dead cli.ParkedJSON
		natstest.WaitFor(t, 20*time.Second, func() error {
			for _, e := range listParked(t, RunDLQ, srv) {
				if e.RequestID == id {
					dead = e
					return nil
				}
			}
			return fmt.Errorf("no dead letter for %s yet", id)
		})
		if dead.Reason != durable.ReasonPoison || dead.Code != string(streams.CodeBadRequest) || dead.Capability != "math.add" ||
			dead.Seq == 0 || dead.Attempts != 1 || dead.Stream != streams.StreamDLQ ||
			strings.Join(strings.Fields(string(dead.Data)), "") != `{"a":"x","b":1}` {
			t.Fatalf("dead letter %+v, data %s", dead, dead.Data)
		}
		seq := strconv.FormatUint(dead.Seq, 10)

		r = clitest.RunCmd(t, RunDLQ, with("ls")...)
		lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
		if r.Code != cli.ExitOK || len(lines) != 2 {
			t.Fatalf("ls: exit %d, stdout:\n%s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
		}
		for _, col := range []string{"SEQ", "CAPABILITY", "REQUEST ID", "REASON", "CODE", "ATTEMPTS", "COUNT", "AGE", "LAST ERROR"} {
			if !strings.Contains(lines[0], col) {
				t.Errorf("header %q lacks %s", lines[0], col)
			}
		}
		if f := strings.Fields(lines[1]); len(f) < 9 || f[0] != seq || f[1] != "math.add" || f[2] != id || f[3] != "poison" || f[4] != "BAD_REQUEST" {
			t.Errorf("row %q", lines[1])
		}

		r = clitest.RunCmd(t, RunDLQ, with("show", seq)...)
		for _, want := range []string{"Stream:     REACH_DLQ\n", "Seq:        " + seq + "\n", "Reason:     poison\n", "Code:       BAD_REQUEST\n",
			"Request ID: " + id + "\n", "Headers:\n", "  Reach-Request-Id: " + id + "\n", "  Reach-DLQ-Reason: poison\n",
			"Payload:\n{\n  \"a\": \"x\",\n  \"b\": 1\n}\n"} {
			if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, want) {
				t.Errorf("show: exit %d, stdout lacks %q:\n%s", r.Code, want, r.Stdout)
			}
		}
		r = clitest.RunCmd(t, RunDLQ, with("show", "--json", seq)...)
		var shown cli.ParkedJSON
		if err := json.Unmarshal([]byte(r.Stdout), &shown); err != nil || shown.RequestID != id || shown.Header.Get(streams.HeaderRequestID) != id {
			t.Fatalf("show --json: exit %d, stdout %q (%v)", r.Code, r.Stdout, err)
		}

		// result says where the task is, with --wait or without.
		for _, wait := range [][]string{nil, {"--wait"}} {
			r := clitest.RunCmd(t, RunResult, with(append(wait, id)...)...)
			if want := "error: parked in REACH_DLQ (seq " + seq + ", reason poison): BAD_REQUEST: "; r.Code != cli.ExitFail ||
				!strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "'agentreach dlq replay "+seq+"'") || r.Stdout != "" {
				t.Fatalf("result %v: exit %d, stdout %q, stderr %q; want %q", wait, r.Code, r.Stdout, r.Stderr, want)
			}
			r = clitest.RunCmd(t, RunResult, with(append(wait, "--json", id)...)...)
			e := clitest.DecodeFailure(t, r)
			if r.Code != cli.ExitFail || e.Error.Code != streams.CodeBadRequest || e.Parked == nil || e.Parked.Seq != dead.Seq ||
				e.Parked.Stream != streams.StreamDLQ || e.Parked.Reason != durable.ReasonPoison || e.Meta == nil || e.Meta.RequestID != id {
				t.Fatalf("result %v --json: exit %d, stdout %q", wait, r.Code, r.Stdout)
			}
		}

		clitest.SetConfirmInput(t, "", false)
		r = clitest.RunCmd(t, RunDLQ, with("purge")...)
		if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, "pass --yes") {
			t.Fatalf("purge without a terminal: exit %d, stderr %q", r.Code, r.Stderr)
		}
		clitest.SetConfirmInput(t, "n\n", true)
		r = clitest.RunCmd(t, RunDLQ, with("purge")...)
		if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "Purge 1 dead letter? [y/N] ") || !strings.Contains(r.Stderr, "nothing purged") {
			t.Fatalf("purge declined: exit %d, stderr %q", r.Code, r.Stderr)
		}
		if n := len(listParked(t, RunDLQ, srv)); n != 1 {
			t.Fatalf("%d dead letters after a declined purge, want 1", n)
		}
		r = clitest.RunCmd(t, RunDLQ, with("purge", "--yes")...)
		if r.Code != cli.ExitOK || r.Stdout != "purged 1 dead letter\n" {
			t.Fatalf("purge --yes: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		if left := listParked(t, RunDLQ, srv); len(left) != 0 {
			t.Fatalf("left after purge: %+v", left)
		}
		r = clitest.RunCmd(t, RunDLQ, with("show", seq)...)
		if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "no dead letter with seq "+seq) {
			t.Fatalf("show purged: exit %d, stderr %q", r.Code, r.Stderr)
		}
	})

	t.Run("purge one, confirmed", func(t *testing.T) {
		keep := park(t, url, "reach.dlq.echo", "keep-"+uuid.NewString(), durable.ReasonFailed, `{}`)
		gone := park(t, url, "reach.dlq.echo", "gone-"+uuid.NewString(), durable.ReasonFailed, `{}`)
		clitest.SetConfirmInput(t, "y\n", true)
		r := clitest.RunCmd(t, RunDLQ, with("purge", strconv.FormatUint(gone, 10))...)
		if r.Code != cli.ExitOK || r.Stdout != "purged 1 dead letter\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		left := listParked(t, RunDLQ, srv)
		if len(left) != 1 || left[0].Seq != keep {
			t.Fatalf("left %+v, want only seq %d", left, keep)
		}
		clitest.SetConfirmInput(t, "yes\n", true)
		if r := clitest.RunCmd(t, RunDLQ, with("purge", "--json")...); r.Code != cli.ExitOK || r.Stdout != `{"purged":1}`+"\n" {
			t.Fatalf("purge all: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		if r := clitest.RunCmd(t, RunDLQ, with("purge", "--yes")...); r.Code != cli.ExitOK || r.Stdout != "purged 0 dead letters\n" {
			t.Fatalf("purge empty: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
	})

	t.Run("dlq replay --all", func(t *testing.T) {
		ids := []string{"replay-" + uuid.NewString(), "replay-" + uuid.NewString()}
		for i, id := range ids {
			park(t, url, "reach.dlq.echo", id, durable.ReasonFailed, fmt.Sprintf(`{"replayed":%d}`, i))
		}
		r := clitest.RunCmd(t, RunDLQ, with("replay", "--all")...)
		if r.Code != cli.ExitOK || r.Stdout != "resubmitted 2 dead letters\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		for i, id := range ids {
			r := clitest.RunCmd(t, RunResult, with("--wait", id)...)
			if want := fmt.Sprintf("{\n  \"replayed\": %d\n}\n", i); r.Code != cli.ExitOK || r.Stdout != want {
				t.Fatalf("result %s: exit %d, stdout %q, stderr %q", id, r.Code, r.Stdout, r.Stderr)
			}
		}
		if left := listParked(t, RunDLQ, srv); len(left) != 0 {
			t.Fatalf("left after replay: %+v", left)
		}
	})

	t.Run("review: ls, show, replay with a new deadline, resolve", func(t *testing.T) {
		past := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)
		id := "late-" + uuid.NewString()
		seq := park(t, url, "reach.review.echo", id, durable.ReasonDeadline, `{"late":true}`,
			streams.HeaderDeadline, past, streams.HeaderError, string(streams.CodeDeadlineExceeded))
		list := listParked(t, RunReview, srv)
		if len(list) != 1 || list[0].Seq != seq || list[0].RequestID != id || list[0].Reason != "deadline" ||
			list[0].Capability != "echo" || list[0].Stream != streams.StreamReview {
			t.Fatalf("review ls: %+v", list)
		}
		r := clitest.RunCmd(t, RunReview, with("ls")...)
		if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, id) || !strings.Contains(r.Stdout, "DEADLINE_EXCEEDED") {
			t.Fatalf("review ls: exit %d, stdout %q", r.Code, r.Stdout)
		}
		r = clitest.RunCmd(t, RunReview, with("show", strconv.FormatUint(seq, 10))...)
		if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, "Stream:     REACH_REVIEW\n") || !strings.Contains(r.Stdout, "\"late\": true") {
			t.Fatalf("review show: exit %d, stdout %q", r.Code, r.Stdout)
		}
		// Its deadline has passed: replayed as it is, it would only come
		// back; --new-deadline gives it a new one.
		r = clitest.RunCmd(t, RunReview, with("replay", "--new-deadline", "1h", strconv.FormatUint(seq, 10))...)
		if r.Code != cli.ExitOK || r.Stdout != "resubmitted 1 review entry\n" {
			t.Fatalf("review replay: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		r = clitest.RunCmd(t, RunResult, with("--wait", id)...)
		if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, "\"late\": true") {
			t.Fatalf("result: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}

		seq = park(t, url, "reach.review.echo", "handled-"+uuid.NewString(), durable.ReasonDeadline, `{}`)
		s := strconv.FormatUint(seq, 10)
		r = clitest.RunCmd(t, RunReview, with("resolve", "--drop", s)...)
		if r.Code != cli.ExitOK || r.Stdout != "dropped 1 review entry\n" {
			t.Fatalf("resolve: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		if left := listParked(t, RunReview, srv); len(left) != 0 {
			t.Fatalf("left after resolve: %+v", left)
		}
		r = clitest.RunCmd(t, RunReview, with("resolve", "--drop", s)...)
		if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "no review entry with seq "+s) {
			t.Fatalf("resolve again: exit %d, stderr %q", r.Code, r.Stderr)
		}
	})
}

// TestReplayDeadline checks what a replay with --new-deadline resubmits: no
// dispatcher runs, so the task stays in REACH_TASKS to be read.
func TestReplayDeadline(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true})
	url := s.ClientURL()
	past := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)
	seq := park(t, url, "reach.review.echo", "late-1", durable.ReasonDeadline, `{}`, streams.HeaderDeadline, past)

	before := time.Now().Truncate(time.Millisecond) // Reach-Deadline has millisecond precision
	r := clitest.RunCmd(t, RunReview, "--server", url, "replay", "--new-deadline", "1h", "--json", strconv.FormatUint(seq, 10))
	if r.Code != cli.ExitOK || r.Stdout != `{"resubmitted":1}`+"\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tasks, err := js.Stream(ctx, streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tasks.GetLastMsgForSubject(ctx, "reach.submit.echo")
	if err != nil {
		t.Fatal(err)
	}
	dl := time.UnixMilli(streams.IntHeader(m.Header, streams.HeaderDeadline))
	if dl.Before(before.Add(time.Hour)) || dl.After(time.Now().Add(time.Hour)) {
		t.Errorf("Reach-Deadline %v, want an hour from the replay", dl)
	}
	if m.Header.Get(streams.HeaderRequestID) != "late-1" || m.Header.Get(streams.HeaderDLQCount) != "1" || m.Header.Get(streams.HeaderDLQReason) != "" {
		t.Errorf("resubmitted headers %v", m.Header)
	}
	if r := clitest.RunCmd(t, RunReview, "--server", url, "ls", "--json"); r.Code != cli.ExitOK || strings.TrimSpace(r.Stdout) != "[]" {
		t.Errorf("review ls after replay: exit %d, stdout %q", r.Code, r.Stdout)
	}
}

// TestSubmitBufferFull checks that a submission beyond the capability's
// buffer bound is refused with OVERLOADED.
func TestSubmitBufferFull(t *testing.T) {
	s := natstest.RunServer(t)
	natstest.Provision(t, natstest.Connect(t, s), streams.Topology{Memory: true, PendingPerCapability: 2})
	srv := []string{"--server", s.ClientURL()}
	for range 2 { // nobody consumes: both wait in REACH_TASKS
		if r := clitest.RunCmd(t, RunSubmit, append(srv, "echo", `{}`)...); r.Code != cli.ExitOK {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
	}
	r := clitest.RunCmd(t, RunSubmit, append(srv, "echo", `{}`)...)
	if r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "error: OVERLOADED: ") || r.Stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	r = clitest.RunCmd(t, RunSubmit, append(srv, "--json", "echo", `{}`)...)
	var out CallOutput
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || r.Code != cli.ExitFail || out.Error == nil || out.Error.Code != streams.CodeOverloaded {
		t.Fatalf("--json: exit %d, stdout %q (%v)", r.Code, r.Stdout, err)
	}
}

func TestParkedUsage(t *testing.T) {
	clitest.SetConfirmInput(t, "", false)
	tests := []struct {
		run    cli.RunFunc
		args   []string
		stderr string
	}{
		{RunDLQ, nil, "want a sub-command: ls, show, replay or purge"},
		{RunDLQ, []string{"frob"}, `unknown sub-command "frob"`},
		{RunDLQ, []string{"resolve", "1"}, `unknown sub-command "resolve"`},
		{RunReview, []string{"purge"}, `unknown sub-command "purge" (want ls, show, replay or resolve)`},
		{RunDLQ, []string{"ls", "1"}, "unexpected argument"},
		{RunDLQ, []string{"show"}, "show: want a <seq>"},
		{RunDLQ, []string{"show", "x"}, "<seq> must be a positive"},
		{RunDLQ, []string{"show", "0"}, "<seq> must be a positive"},
		{RunDLQ, []string{"replay"}, "replay: want a <seq> or --all"},
		{RunDLQ, []string{"replay", "--all", "3"}, "not both"},
		{RunDLQ, []string{"replay", "1", "2"}, "at most one <seq>"},
		{RunDLQ, []string{"purge"}, "pass --yes"},
		{RunDLQ, []string{"purge", "4"}, "pass --yes"},
		{RunReview, []string{"resolve", "--drop"}, "resolve: want a <seq>"},
		{RunReview, []string{"resolve", "1"}, "resolve: want --rerun (run the task again) or --drop"},
		{RunReview, []string{"resolve", "--rerun", "--drop", "1"}, "give --rerun or --drop, not both"},
		{RunReview, []string{"resolve", "--drop", "--by", " ", "1"}, "--by is empty"},
		{RunReview, []string{"replay", "--rerun", "1"}, "--rerun and --drop go with resolve, not replay"},
		{RunSubmit, []string{"echo", "@"}, `payload "@" names no file`},
		{RunSubmit, []string{"echo", "@/nonexistent/task.json"}, "/nonexistent/task.json"},
		{RunReview, []string{"replay", "--new-deadline", "-1h", "1"}, "--new-deadline must not be negative"},
		{RunSubmit, nil, "want <capability>"},
		{RunSubmit, []string{"echo", "{nope"}, "payload is not valid JSON"},
		{RunSubmit, []string{"--request-id", "a.b", "echo"}, "--request-id"},
		{RunResult, nil, "want one <request-id>"},
		{RunResult, []string{"a>b"}, "request id"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := clitest.RunCmd(t, tt.run, append([]string{"--server", "nats://127.0.0.1:1"}, tt.args...)...)
			if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, tt.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", r.Code, r.Stderr, cli.ExitUsage, tt.stderr)
			}
		})
	}
}

// TestReviewResolve checks both resolutions of an in-doubt review entry:
// --rerun removes the dead instance's claim and runs the task again,
// --drop removes the entry and runs nothing; each leaves a record.
func TestReviewResolve(t *testing.T) {
	url := startStack(t)
	srv := []string{"--server", url, "--timeout", "10s"}
	with := func(args ...string) []string { return append(append([]string{}, srv...), args...) }
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	// inDoubt parks a task the way the dispatcher does when an instance
	// died holding its idempotency claim, which stays behind pending.
	inDoubt := func(t *testing.T, id string) (seq, claim string) {
		t.Helper()
		key := "key-" + uuid.NewString()
		claim = streams.IdempotencyKey("echo", "", key)
		b, err := msgpack.Marshal(map[string]string{"state": "pending", "owner": "ghost-1", "request_id": id})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Create(ctx, claim, b); err != nil {
			t.Fatal(err)
		}
		n := park(t, url, "reach.review.echo", id, durable.ReasonInDoubt, `{"in_doubt":true}`, streams.HeaderIdempotencyKey, key,
			streams.HeaderError, string(streams.CodeInternal), streams.HeaderInDoubt, "true")
		return strconv.FormatUint(n, 10), claim
	}
	// records returns the REACH_EVENTS records of request id.
	records := func(t *testing.T, id string) []events.Event {
		t.Helper()
		list, err := durable.ListParked(ctx, js, streams.Subjects{}, streams.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		var out []events.Event
		for _, m := range list {
			evs, err := events.DecodeEvents(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.RequestID == id {
					out = append(out, ev)
				}
			}
		}
		return out
	}
	recorded := func(t *testing.T, id, outcome string) {
		t.Helper()
		for _, ev := range records(t, id) {
			if ev.Outcome == outcome {
				if ev.By != "tester" || ev.Capability != "echo" || ev.Code != string(streams.CodeInternal) {
					t.Errorf("record %+v", ev)
				}
				return
			}
		}
		t.Errorf("no %s record for %s in REACH_EVENTS: %+v", outcome, id, records(t, id))
	}
	gone := func(t *testing.T, id string) {
		t.Helper()
		for _, e := range listParked(t, RunReview, srv) {
			if e.RequestID == id {
				t.Errorf("entry still in review: %+v", e)
			}
		}
	}

	t.Run("rerun", func(t *testing.T) {
		id := "doubt-" + uuid.NewString()
		seq, claim := inDoubt(t, id)
		r := clitest.RunCmd(t, RunReview, with("resolve", "--rerun", "--by", "tester", seq)...)
		if r.Code != cli.ExitOK || r.Stdout != "resubmitted 1 review entry\n" {
			t.Fatalf("resolve --rerun: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		// It ran again: a result, and the claim is the new execution's.
		r = clitest.RunCmd(t, RunResult, with("--wait", id)...)
		if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, `"in_doubt": true`) {
			t.Fatalf("result: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		e, err := kv.Get(ctx, claim)
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		if err := msgpack.Unmarshal(e.Value(), &rec); err != nil || rec["state"] != "done" || rec["owner"] == "ghost-1" {
			t.Fatalf("claim after the rerun: %v (%v)", rec, err)
		}
		gone(t, id)
		recorded(t, id, events.OutcomeReviewRerun)
	})

	t.Run("drop", func(t *testing.T) {
		id := "doubt-" + uuid.NewString()
		seq, claim := inDoubt(t, id)
		before, err := kv.Get(ctx, claim)
		if err != nil {
			t.Fatal(err)
		}
		r := clitest.RunCmd(t, RunReview, with("resolve", "--drop", "--json", "--by", "tester", seq)...)
		if r.Code != cli.ExitOK || r.Stdout != `{"dropped":1}`+"\n" {
			t.Fatalf("resolve --drop: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		gone(t, id)
		recorded(t, id, events.OutcomeReviewDrop)
		// Nothing ran: no outcome, and the claim is as it was.
		if r := clitest.RunCmd(t, RunResult, with(id)...); r.Code != cli.ExitFail || !strings.Contains(r.Stderr, "no outcome recorded for "+id) {
			t.Fatalf("result: exit %d, stderr %q", r.Code, r.Stderr)
		}
		after, err := kv.Get(ctx, claim)
		if err != nil || after.Revision() != before.Revision() {
			t.Fatalf("claim changed: revision %d, was %d (%v)", after.Revision(), before.Revision(), err)
		}
	})
}
