package registry_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// Any process can join by putting a record; a Table watching the bucket
// routes to it at once.
func ExampleTable() {
	dir, _ := os.MkdirTemp("", "registry-example")
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("nats-server did not start")
	}
	defer srv.WaitForShutdown()
	defer srv.Shutdown()
	nc, _ := nats.Connect(srv.ClientURL())
	defer nc.Close()
	ctx := context.Background()
	js, _ := jetstream.New(nc)
	_ = streams.Provision(ctx, js, streams.Topology{})
	reg, _ := registry.Open(ctx, js)

	table := registry.NewTable(reg)
	if err := table.Start(ctx); err != nil {
		panic(err)
	}
	defer table.Close()

	changed := table.Changed()
	_, err = reg.Put(ctx, registry.Record{ID: "inv-1", Type: "inventory", Capabilities: []string{"inventory.query"},
		MaxConcurrent: 8, HeartbeatMS: 5000})
	fmt.Println("put:", err)
	<-changed
	for _, inst := range table.Candidates("inventory.query").Instances {
		e := inst.Entry()
		fmt.Println(e.ID, e.Status, e.Weight)
	}

	_, err = reg.Put(ctx, registry.Record{ID: "bad", Type: "inventory", Capabilities: []string{"Inventory"}, MaxConcurrent: 1, HeartbeatMS: 5000})
	fmt.Println(err)
	// Output:
	// put: <nil>
	// inv-1 ready 100
	// invalid agent record "bad": capabilities: invalid name: capability "Inventory" must be dotted lowercase tokens of [a-z0-9_-] (e.g. "inventory.query")
}
