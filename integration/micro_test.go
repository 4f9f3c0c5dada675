package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/streams"
)

// The stock nats CLI lists agents as NATS micro services: each agent type
// a service, each instance one of its instances, each capability an
// endpoint ('.' as '_') on the instance's delivery subject, with the
// agent's counters.
func TestMicroWithNatsCLI(t *testing.T) {
	cli := natsCLI(t)
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	// echo-2's version is no semantic version, which the CLI would refuse:
	// it answers 0.0.0 with its own in the metadata.
	for id, version := range map[string]string{"echo-1": "1.0.0", "echo-2": "dev"} {
		st.Agent(agentkit.Config{Type: "echo", ID: id, Version: version}, map[string]agentkit.Handler{"echo": echoHandler()})
	}
	st.Agent(agentkit.Config{Type: "math.tools", ID: "math-1", Version: "2.0.0"}, map[string]agentkit.Handler{
		"math.add": echoHandler(),
		"math.fail": func(context.Context, *agentkit.Request) (any, error) {
			return nil, agentkit.Reject("no")
		},
	})
	WaitRoutable(t, "echo", 2, d)
	WaitRoutable(t, "math.add", 1, d)
	for range 3 {
		if e := streams.ErrorFromMessage(d.Call(context.Background(), "math.add", &nats.Msg{Data: []byte(`{"text":"x"}`)})); e != nil {
			t.Fatal(e)
		}
	}
	if e := streams.ErrorFromMessage(d.Call(context.Background(), "math.fail", &nats.Msg{Data: []byte(`{}`)})); e == nil || e.Code != streams.CodeBizReject {
		t.Fatalf("math.fail: %v", e)
	}
	url := st.Server.ClientURL()

	out := runNats(t, cli, url, "micro", "ls", "--json")
	var list []micro.Info
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("nats micro ls --json: %q: %v", out, err)
	}
	seen := map[string]int{}
	for _, s := range list {
		seen[s.Name+"/"+s.ID]++
		if s.ID == "echo-2" && (s.Version != "0.0.0" || s.Metadata["version"] != "dev") {
			t.Errorf("echo-2 listed with version %q, metadata %v", s.Version, s.Metadata)
		}
	}
	for _, want := range []string{"echo/echo-1", "echo/echo-2", "math_tools/math-1"} {
		if seen[want] != 1 {
			t.Errorf("nats micro ls lists %v, want %s once", seen, want)
		}
	}
	if out := runNats(t, cli, url, "micro", "ls"); !strings.Contains(out, "math_tools") || !strings.Contains(out, "echo") {
		t.Errorf("nats micro ls:\n%s", out)
	}

	out = runNats(t, cli, url, "micro", "info", "math_tools", "--json")
	var both struct {
		Info  micro.Info  `json:"info"`
		Stats micro.Stats `json:"stats"`
	}
	if err := json.Unmarshal([]byte(out), &both); err != nil {
		t.Fatalf("nats micro info: %q: %v", out, err)
	}
	info := both.Info
	if info.ID != "math-1" || info.Version != "2.0.0" || len(info.Endpoints) != 2 || info.Endpoints[0].Name != "math_add" ||
		info.Endpoints[0].Subject != "reach.agent.math-1" || info.Endpoints[0].Metadata["capability"] != "math.add" ||
		info.Endpoints[1].Metadata["capability"] != "math.fail" {
		t.Fatalf("nats micro info math_tools: %s", out)
	}

	out = runNats(t, cli, url, "micro", "stats", "math_tools", "--json")
	var stats []micro.Stats
	if err := json.Unmarshal([]byte(out), &stats); err != nil || len(stats) != 1 {
		t.Fatalf("nats micro stats: %q: %v", out, err)
	}
	eps := map[string]*micro.EndpointStats{}
	for _, e := range stats[0].Endpoints {
		eps[e.Name] = e
	}
	if add, fail := eps["math_add"], eps["math_fail"]; add == nil || fail == nil || add.NumRequests != 3 || add.NumErrors != 0 ||
		add.AverageProcessingTime <= 0 || fail.NumRequests != 1 || fail.NumErrors != 1 || !strings.Contains(fail.LastError, "BIZ_REJECT") {
		t.Fatalf("nats micro stats math_tools: %s", out)
	}
	if out := runNats(t, cli, url, "micro", "stats", "math_tools"); !strings.Contains(out, "math_add") {
		t.Errorf("nats micro stats:\n%s", out)
	}
}

// With auth on, the operator's identity asks and agents answer; an agent
// cannot take the micro requests of another type (which it could answer
// in that type's name), the control being its own type's.
func TestMicroWithAuth(t *testing.T) {
	st := NewSecureStack(t, time.Second, "")
	st.Agent(agentkit.Config{Type: "echo", ID: "echo-1"}, map[string]agentkit.Handler{"echo": echoHandler()})
	st.Agent(agentkit.Config{Type: "math", ID: "math-1"}, map[string]agentkit.Handler{"math.add": echoHandler()})
	admin := st.ConnAs(SecureAdmin)
	var info micro.Info
	natstest := func() error {
		m, err := admin.Request("$SRV.INFO.echo", nil, 5*time.Second)
		if err != nil {
			return err
		}
		return json.Unmarshal(m.Data, &info)
	}
	if err := natstest(); err != nil || info.ID != "echo-1" || info.Endpoints[0].Metadata["capability"] != "echo" {
		t.Fatalf("$SRV.INFO.echo as the operator: %+v %v", info, err)
	}
	// math-1 subscribes, beside its own type's requests, to subject; the
	// operator sends a request of echo's, then one of math's: when the
	// second arrives, the first would have (one connection, in order).
	for _, subject := range []string{"$SRV.INFO.echo", "$SRV.*.echo", "$SRV.INFO.echo.echo-1", "$SRV.>", "$SRV.*.*", "$SRV.*.>", "$SRV.INFO.>"} {
		nc := st.ConnAs("math-1", nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		stolen, err := nc.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		own, err := nc.SubscribeSync("$SRV.INFO.math")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := admin.Publish("$SRV.INFO.echo", nil); err != nil {
			t.Fatal(err)
		}
		if err := admin.Publish("$SRV.INFO.math", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := own.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("the control: math-1 does not get its own type's request: %v", err)
		}
		if n, _, _ := stolen.Pending(); n != 0 {
			t.Errorf("agent math-1 subscribed to %s received echo's micro request", subject)
		}
		nc.Close()
	}
}
