package agentkit_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/streams"
)

type greeting struct {
	Name string `json:"name"`
}

// An agent serving "greet", a dispatcher, and a client calling it by
// capability, all against an embedded NATS server.
func Example() {
	// An embedded NATS server with JetStream, as `agentreach up` runs one.
	dir, _ := os.MkdirTemp("", "agentkit-example")
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
	if err := streams.Provision(ctx, js, streams.Topology{}); err != nil {
		panic(err)
	}

	d, _ := dispatcher.New(nc, config.Config{})
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	defer d.Close()

	agent, _ := agentkit.New(nc, agentkit.Config{Type: "greeter", ID: "greeter-1"}, agentkit.WithoutSignals())
	_ = agent.Handle("greet", agentkit.Typed(func(_ context.Context, _ *agentkit.Request, in greeting) (string, error) {
		if in.Name == "" {
			return "", agentkit.Reject("name is required")
		}
		return "hello, " + in.Name, nil
	}))
	if err := agent.Start(ctx); err != nil {
		panic(err)
	}
	defer agent.Drain(ctx)
	for { // the registry watch delivers the new agent within milliseconds
		changed := d.Table().Changed()
		if d.Table().Candidates("greet").Len() > 0 {
			break
		}
		<-changed
	}

	client, _ := agentkit.NewClient(nc)
	res, err := client.Call(ctx, "greet", greeting{Name: "Ada"})
	if err != nil {
		panic(err)
	}
	var out string
	_ = res.Decode(&out)
	fmt.Println(out, "from", res.Node)

	_, err = client.Call(ctx, "greet", greeting{})
	fmt.Println(streams.CodeOf(err))
	// Output:
	// hello, Ada from greeter-1
	// BIZ_REJECT
}
