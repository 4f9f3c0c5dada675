package micro

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
)

// The answers name the service and endpoints with '.' as '_', keep a
// version that is not semantic in the metadata, and count per capability.
func TestResponses(t *testing.T) {
	s := New(Config{Type: "math.tools", ID: "m-1", Version: "dev", Subject: "reach.agent.m-1", Capabilities: []string{"math.add", "math.sub"}})
	s.Count("math.add", 2*time.Millisecond, "")
	s.Count("math.add", 4*time.Millisecond, "BIZ_REJECT: no")
	s.Count("unknown", time.Second, "x") // not an endpoint: not counted
	ping, err := s.Response("PING")
	if p := ping.(micro.Ping); err != nil || p.Name != "math_tools" || p.Version != "0.0.0" || p.Metadata["version"] != "dev" ||
		p.Type != micro.PingResponseType {
		t.Fatalf("PING: %+v %v", ping, err)
	}
	info, _ := s.Response("INFO")
	if eps := info.(micro.Info).Endpoints; len(eps) != 2 || eps[0].Name != "math_add" || eps[0].Metadata["capability"] != "math.add" ||
		eps[1].Subject != "reach.agent.m-1" {
		t.Fatalf("INFO endpoints: %+v", eps)
	}
	stats, _ := s.Response("STATS")
	add := stats.(micro.Stats).Endpoints[0]
	if add.NumRequests != 2 || add.NumErrors != 1 || add.LastError != "BIZ_REJECT: no" || add.AverageProcessingTime != 3*time.Millisecond {
		t.Fatalf("STATS math_add: %+v", add)
	}
	if _, err := s.Response("KILL"); err == nil {
		t.Fatal("an unknown verb was answered")
	}
	var none *Service
	none.Count("x", time.Second, "") // a nil Service (discovery off) does nothing
	none.Stop()
}
