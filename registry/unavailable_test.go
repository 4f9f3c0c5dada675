package registry_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// cluster starts a 3-node JetStream cluster on loopback (as
// natstest.RunCluster) and returns its nodes and their options, with
// which a stopped node starts again on its port and store.
func cluster(t *testing.T) ([]*server.Server, []*server.Options) {
	ports := make([]int, 3)
	for i := range ports {
		for ports[i] == 0 || (i > 0 && ports[i] == ports[0]) || (i > 1 && ports[i] == ports[1]) {
			ports[i] = natstest.FreePort(t)
		}
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	servers, opts := make([]*server.Server, 3), make([]*server.Options, 3)
	for i := range 3 {
		o := natstest.Options(t.TempDir())
		o.ServerName = fmt.Sprintf("n%d", i+1)
		o.Port = natstest.FreePort(t)
		o.Cluster = server.ClusterOpts{Name: "reach-test", Host: "127.0.0.1", Port: ports[i]}
		o.Routes = routes
		opts[i] = o.Clone()
		servers[i] = natstest.RunServerWith(t, o)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, s := range servers {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == 3 {
				return nil
			}
		}
		return errors.New("no JetStream meta leader seeing 3 peers yet")
	})
	return servers, opts
}

// A 3-node cluster loses two nodes: the REACH_AGENTS bucket (R3) has no
// leader. Opening the registry fails, past its deadline, saying JetStream
// is unavailable — not "run provisioning first" — while a direct listing
// (what `agentreach agents` tries first) is answered by the surviving
// replica. With the nodes back,
// opening and listing retry within their deadline while the cluster elects
// its leaders, and find the record stored before.
func TestTheRegistrySaysNoLeaderDuringAnOutage(t *testing.T) {
	servers, opts := cluster(t)
	nc := natstest.Connect(t, servers[2], nats.MaxReconnects(-1))
	topo := streams.Topology{Replicas: 3, Heartbeat: time.Minute} // the record outlives the outage
	natstest.Provision(t, nc, topo)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	reg, err := registry.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Put(ctx, registry.Record{ID: "a-1", Type: "a", Capabilities: []string{"a.b"}, MaxConcurrent: 1, HeartbeatMS: 60000}); err != nil {
		t.Fatal(err)
	}
	natstest.Stop(servers[0])
	natstest.Stop(servers[1])
	// Until the last node notices it lost its quorum, it still answers.
	natstest.WaitFor(t, 60*time.Second, func() error {
		if servers[2].JetStreamIsLeader() || servers[2].JetStreamIsStreamLeader("$G", "KV_"+streams.BucketAgents) {
			return errors.New("n3 still leads")
		}
		return nil
	})

	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	if reg, err = registry.Open(short, js); err == nil { // the node may answer a stream info by itself
		// Then the listing is a direct get, which the replica answers.
		var list []registry.Entry
		if list, err = reg.List(short); err == nil && (len(list) != 1 || list[0].ID != "a-1") {
			t.Fatalf("the registry's listing without a leader: %v", list)
		}
	} else if !errors.Is(err, streams.ErrUnavailable) || strings.Contains(err.Error(), "provisioning") {
		t.Fatalf("the registry without a leader: %v, want JetStream unavailable and no provisioning hint", err)
	}
	cancelShort()
	t.Log(err)
	// A direct listing needs no leader: the surviving replica answers with
	// what it holds.
	short, cancelShort = context.WithTimeout(ctx, 3*time.Second)
	list, err := registry.ListDirect(short, js)
	cancelShort()
	if err != nil || len(list) != 1 || list[0].ID != "a-1" {
		t.Fatalf("the direct listing without a leader: %v, %v", list, err)
	}

	back := []*server.Server{servers[2]}
	for _, o := range opts[:2] {
		s, err := natstest.Start(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { natstest.Stop(s) })
		back = append(back, s)
	}
	// A node back from a stop creates its streams from the meta group's
	// assignments after it takes connections; stopped while still at it,
	// nats-server leaves the streams it creates afterwards running. So the
	// test ends only once every node holds every stream.
	defer waitForStreams(t, back, len(topo.KeyValueConfigs())+len(topo.StreamConfigs()))
	reg, err = registry.Open(ctx, js)
	if err != nil {
		t.Fatalf("open once the nodes are back: %v", err)
	}
	list, err = reg.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "a-1" {
		t.Fatalf("listing once the nodes are back: %v, %v", list, err)
	}
}

// waitForStreams waits until every node holds n streams.
func waitForStreams(t *testing.T, nodes []*server.Server, n int) {
	natstest.WaitFor(t, 60*time.Second, func() error {
		for _, s := range nodes {
			info, err := s.Jsz(nil)
			if err != nil {
				return err
			}
			if info.Streams < n {
				return fmt.Errorf("%s holds %d of %d streams", s.Name(), info.Streams, n)
			}
		}
		return nil
	})
}
