package connectors

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/agentkit/connect"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// python returns a Python with fastmcp 4.1.6: $AGENTREACH_PYTHON (set by
// `make test`; then a missing fastmcp fails), else the repository's .venv,
// else the test is skipped.
func python(t *testing.T) string {
	t.Helper()
	py, required := os.Getenv("AGENTREACH_PYTHON"), true
	if py == "" {
		root, _ := filepath.Abs(filepath.Join("..", ".."))
		py, required = filepath.Join(root, ".venv", "bin", "python"), false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", "import fastmcp; print(fastmcp.__version__)").CombinedOutput()
	if v := strings.TrimSpace(string(out)); err != nil || v != "4.1.6" {
		if required {
			t.Fatalf("%s has no fastmcp 4.1.6: %v: %s", py, err, v)
		}
		t.Skipf("%s has no fastmcp 4.1.6 (make pytest builds ./.venv with it)", py)
	}
	return py
}

// TestTheExampleRuns follows README.md: the weather MCP server and the pet
// store joined by the two connectors, called through a dispatcher.
func TestTheExampleRuns(t *testing.T) {
	py := python(t)
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Heartbeat: time.Second, Memory: true})
	log := zerolog.Nop()
	d, err := dispatcher.New(natstest.Connect(t, s), config.Config{}, dispatcher.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Start(sctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	ctx, stop := context.WithCancel(context.Background())
	// agentreach connect mcp --name weather -- python weather.py
	weather, err := connect.NewMCP(natstest.Connect(t, s), connect.MCPConfig{Name: "weather", Command: []string{py, "weather.py"}, Log: &log,
		Agent: agentkit.Config{DrainTimeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	mcpDone := make(chan error, 1)
	go func() { mcpDone <- weather.Run(ctx) }()
	// go run ./petstore; agentreach connect openapi --name pets --spec petstore.yaml --base-url …
	api := httptest.NewServer(PetStore())
	pets, err := connect.NewOpenAPI(natstest.Connect(t, s), connect.OpenAPIConfig{Name: "pets", SpecFile: "petstore.yaml", BaseURL: api.URL, Log: &log,
		Agent: agentkit.Config{DrainTimeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	apiDone := make(chan error, 1)
	go func() { apiDone <- pets.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := errors.Join(<-mcpDone, <-apiDone); err != nil {
			t.Error(err)
		}
		api.Close()
	})

	client, err := agentkit.NewClient(natstest.Connect(t, s), agentkit.WithJSON())
	if err != nil {
		t.Fatal(err)
	}
	call := func(capability, payload string) (string, error) {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := client.Call(cctx, capability, json.RawMessage(payload), agentkit.WithTimeout(15*time.Second))
		if err != nil {
			return "", err
		}
		return string(res.Data), nil
	}
	// Routable (and declared) once each connector has registered.
	for _, c := range []string{"weather.forecast", "pets.get_pet"} {
		natstest.WaitFor(t, 90*time.Second, func() error {
			if d.Table().Candidates(c).Len() == 0 {
				return errors.New(c + " is not routable yet")
			}
			typ, _, _ := strings.Cut(c, ".")
			if _, ok := d.Catalog().Lookup(typ); !ok {
				return errors.New(typ + " is not declared yet")
			}
			return nil
		})
	}
	for _, c := range []struct{ capability, payload, want string }{
		{"weather.forecast", `{"city":"Oslo","days":2}`, `{"city":"Oslo","days":[{"day":1,"sky":"snow","celsius":-3},{"day":2,"sky":"snow","celsius":-2}]}`},
		{"weather.alerts", `{"region":"Nordland"}`, `{"result":"no alerts for Nordland"}`},
		{"pets.add_pet", `{"body":{"name":"Tom","species":"cat"}}`, `{"id":2,"name":"Tom","species":"cat"}`},
		{"pets.get_pet", `{"id":2}`, `{"id":2,"name":"Tom","species":"cat"}`},
		{"pets.list_pets", `{"limit":1}`, `[{"id":1,"name":"Rex","species":"dog"}]`},
	} {
		got, err := call(c.capability, c.payload)
		if err != nil || compact(t, got) != compact(t, c.want) {
			t.Errorf("%s %s: %s, %v; want %s", c.capability, c.payload, got, err, c.want)
		}
	}
	for _, c := range []struct {
		capability, payload string
		want                error
		text                string
	}{
		{"pets.get_pet", `{"id":0}`, streams.ErrBadRequest, "id"},
		{"pets.get_pet", `{"id":9}`, streams.ErrBizReject, "no pet 9"},
		{"pets.add_pet", `{"body":{"name":"Nemo","species":"whale"}}`, streams.ErrBadRequest, "species"},
		{"weather.forecast", `{"city":"Oslo","days":9}`, streams.ErrBizReject, "days must be 1 to 7"},
	} {
		if _, err := call(c.capability, c.payload); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s %s: %v, want %v naming %q", c.capability, c.payload, err, c.want, c.text)
		}
	}
}

func compact(t *testing.T, s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}
