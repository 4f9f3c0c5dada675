package connect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// petStore is the REST API testdata/petstore.yaml describes.
type petStore struct {
	mu      sync.Mutex
	pets    map[int]map[string]any
	next    int
	flaky   map[string]bool // request ids of flaky calls already refused once
	headers []http.Header
}

func newPetStore() *petStore {
	return &petStore{pets: map[int]map[string]any{1: {"id": 1, "name": "Rex", "tag": "dog"}}, next: 2, flaky: map[string]bool{}}
}

func (p *petStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.headers = append(p.headers, r.Header.Clone())
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/pets" && r.Method == http.MethodGet:
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		out := []map[string]any{}
		for id := 1; id < p.next && (limit == 0 || len(out) < limit); id++ {
			if pet, ok := p.pets[id]; ok {
				out = append(out, pet)
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	case r.URL.Path == "/pets" && r.Method == http.MethodPost:
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in["name"] == nil {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"error":"name is required"}`)
			return
		}
		in["id"] = p.next
		p.pets[p.next] = in
		p.next++
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(in)
	case strings.HasPrefix(r.URL.Path, "/pets/"):
		id, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/pets/"))
		pet, ok := p.pets[id]
		switch {
		case !ok:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":"no pet %d"}`, id)
		case r.Method == http.MethodDelete:
			delete(p.pets, id)
			w.WriteHeader(http.StatusNoContent)
		default:
			_ = json.NewEncoder(w).Encode(pet)
		}
	case strings.HasPrefix(r.URL.Path, "/status/"):
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
		if ra := r.URL.Query().Get("retry_after"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"status":%d}`, code)
	case r.URL.Path == "/flaky":
		key := r.Header.Get("X-Flaky-Key")
		if !p.flaky[key] {
			p.flaky[key] = true
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, `{"ok":true}`)
	case r.URL.Path == "/text":
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "plain words")
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func loadPetStore(t *testing.T, base string, tune ...func(*OpenAPIConfig)) *OpenAPI {
	t.Helper()
	cfg := OpenAPIConfig{Name: "pets", SpecFile: "testdata/petstore.yaml", BaseURL: base}
	for _, f := range tune {
		f(&cfg)
	}
	o, err := newOpenAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func callJSON(t *testing.T, h agentkit.Handler, payload string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := h(ctx, &agentkit.Request{ContentType: streams.ContentTypeJSON, Data: []byte(payload)})
	if err != nil {
		return "", err
	}
	b, ok := out.([]byte)
	if !ok {
		t.Fatalf("a JSON call returned %T, want the raw JSON", out)
	}
	return string(b), nil
}

func TestOpenAPIDeclarationFromTheSpec(t *testing.T) {
	o := loadPetStore(t, "http://127.0.0.1:1")
	d := o.Declaration()
	var names []string
	for _, c := range d.Capabilities {
		names = append(names, c.Name)
	}
	want := []string{"pets.create_pet", "pets.delete_pet", "pets.flaky", "pets.get_pet", "pets.list_pets", "pets.plain_text", "pets.status"}
	if !slices.Equal(names, want) {
		t.Fatalf("capabilities %v, want %v", names, want)
	}
	var skipped []string
	for _, s := range o.Skipped() {
		skipped = append(skipped, s.Name+": "+s.Reason)
	}
	if len(skipped) != 2 || !strings.Contains(skipped[0], "/legacy") || !strings.Contains(skipped[1], "submitForm") {
		t.Errorf("skipped %q, want GET /legacy (no operationId) and submitForm (not JSON)", skipped)
	}
	caps := map[string]declare.DeclaredCapability{}
	for _, c := range d.Capabilities {
		caps[c.Name] = c
	}
	if c := caps["pets.list_pets"]; c.Mode != declare.ModeRead || !c.Idempotent || c.Description == "" {
		t.Errorf("list_pets: mode %q idempotent %v description %q, want read, idempotent, the summary", c.Mode, c.Idempotent, c.Description)
	}
	if c := caps["pets.create_pet"]; c.Mode != declare.ModeWrite || c.Idempotent {
		t.Errorf("create_pet: mode %q idempotent %v, want write, not idempotent", c.Mode, c.Idempotent)
	}
	if c := caps["pets.delete_pet"]; c.Mode != declare.ModeWrite || !c.Idempotent {
		t.Errorf("delete_pet: mode %q idempotent %v, want write, idempotent", c.Mode, c.Idempotent)
	}
	// The schemas are self-contained and enforced: the dispatcher's check
	// (declare.Compile) refuses a body without name, naming the field,
	// and an id that OpenAPI 3.0's exclusiveMinimum: true rules out.
	cd, err := declare.Compile(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ capability, payload, field string }{
		{"pets.create_pet", `{"body":{"tag":"cat"}}`, "name"},
		{"pets.create_pet", `{}`, "body"},
		{"pets.get_pet", `{"id":0}`, "id"},
		{"pets.list_pets", `{"limit":0}`, "limit"},
	} {
		err := cd.ValidateInput(c.capability, streams.ContentTypeJSON, []byte(c.payload))
		if err == nil || !strings.Contains(err.Error(), `"`+c.field+`"`) && !strings.Contains(err.Error(), "."+c.field) {
			t.Errorf("%s %s: %v, want refused naming %s", c.capability, c.payload, err, c.field)
		}
	}
	for _, c := range []struct{ capability, payload string }{
		{"pets.create_pet", `{"body":{"name":"Tom","tag":null}}`},
		{"pets.get_pet", `{"id":1}`},
		{"pets.list_pets", `{"limit":5,"tag":["a","b"]}`},
	} {
		if err := cd.ValidateInput(c.capability, streams.ContentTypeJSON, []byte(c.payload)); err != nil {
			t.Errorf("%s %s: %v, want accepted", c.capability, c.payload, err)
		}
	}
	if !strings.Contains(string(caps["pets.get_pet"].OutputSchema), `"#/$defs/Pet"`) {
		t.Errorf("get_pet's output schema %s does not refer to its own $defs", caps["pets.get_pet"].OutputSchema)
	}
}

func TestOpenAPICallsAndStatusMapping(t *testing.T) {
	api := newPetStore()
	srv := httptest.NewServer(api)
	defer srv.Close()
	o := loadPetStore(t, srv.URL+"/", func(c *OpenAPIConfig) {
		c.Header = http.Header{"Authorization": {"Bearer s3cret"}}
	})
	h := o.Handlers()

	got, err := callJSON(t, h["pets.get_pet"], `{"id":1,"X-Trace":"t-1"}`)
	if err != nil || got != `{"id":1,"name":"Rex","tag":"dog"}` {
		t.Errorf("get_pet 1: %s, %v", got, err)
	}
	api.mu.Lock()
	last := api.headers[len(api.headers)-1]
	api.mu.Unlock()
	if last.Get("X-Trace") != "t-1" || last.Get("Authorization") != "Bearer s3cret" {
		t.Errorf("the request's headers %v lack the header parameter or the configured header", last)
	}
	if got, err = callJSON(t, h["pets.create_pet"], `{"body":{"name":"Tom"}}`); err != nil || got != `{"id":2,"name":"Tom"}` {
		t.Errorf("create_pet: %s, %v", got, err)
	}
	if got, err = callJSON(t, h["pets.list_pets"], `{"limit":1}`); err != nil || got != `[{"id":1,"name":"Rex","tag":"dog"}]` {
		t.Errorf("list_pets limit 1: %s, %v", got, err)
	}
	if got, err = callJSON(t, h["pets.delete_pet"], `{"id":2}`); err != nil || got != `null` {
		t.Errorf("delete_pet (204): %s, %v, want null", got, err)
	}
	if got, err = callJSON(t, h["pets.plain_text"], `{}`); err != nil || got != `{"text":"plain words"}` {
		t.Errorf("plain_text: %s, %v", got, err)
	}
	// msgpack in, decoded values out.
	mp, _ := streams.Encode(streams.ContentTypeMsgpack, map[string]any{"id": 1})
	out, err := h["pets.get_pet"](context.Background(), &agentkit.Request{ContentType: streams.ContentTypeMsgpack, Data: mp})
	if m, ok := out.(map[string]any); err != nil || !ok || m["name"] != "Rex" {
		t.Errorf("get_pet in msgpack: %#v, %v", out, err)
	}

	for _, c := range []struct {
		payload string
		code    streams.Code
		text    string
	}{
		{`{"code":400}`, streams.CodeBadRequest, "400"},
		{`{"code":422}`, streams.CodeBadRequest, "422"},
		{`{"code":404}`, streams.CodeBizReject, "404"},
		{`{"code":409}`, streams.CodeBizReject, "409"},
		{`{"code":408}`, streams.CodeTimeout, "408"},
		{`{"code":500}`, streams.CodeTimeout, "500"},
		{`{"code":502}`, streams.CodeTimeout, "502"},
		{`{"code":503}`, streams.CodeTargetBusy, "503"},
		{`{"code":429,"retry_after":"3600"}`, streams.CodeTargetBusy, "Retry-After 1h0m0s"},
	} {
		_, err := callJSON(t, h["pets.status"], c.payload)
		var we *streams.Error
		if !errors.As(err, &we) || we.Code != c.code || !strings.Contains(we.Message, c.text) {
			t.Errorf("status %s: %v, want %s naming %q", c.payload, err, c.code, c.text)
		}
	}
	// Bad payloads never reach the API.
	for _, p := range []string{`[1]`, `{"id":`, `{}`} {
		if _, err := callJSON(t, h["pets.get_pet"], p); !errors.Is(err, streams.ErrBadRequest) {
			t.Errorf("get_pet %s: %v, want BAD_REQUEST", p, err)
		}
	}
}

func TestOpenAPIWaitsOutAShortRetryAfter(t *testing.T) {
	api := newPetStore()
	srv := httptest.NewServer(api)
	defer srv.Close()
	o := loadPetStore(t, srv.URL, func(c *OpenAPIConfig) { c.Header = http.Header{"X-Flaky-Key": {"a"}} })
	// 429 with Retry-After: 0, then 200: the connector tries again itself.
	if got, err := callJSON(t, o.Handlers()["pets.flaky"], `{}`); err != nil || got != `{"ok":true}` {
		t.Errorf("flaky: %s, %v, want the second answer", got, err)
	}
	// Control: with retries off, the first 429 is the answer.
	o = loadPetStore(t, srv.URL, func(c *OpenAPIConfig) { c.Header = http.Header{"X-Flaky-Key": {"b"}}; c.Retries = -1 })
	if _, err := callJSON(t, o.Handlers()["pets.flaky"], `{}`); !errors.Is(err, streams.ErrTargetBusy) {
		t.Errorf("flaky without retries: %v, want TARGET_BUSY", err)
	}
}

func TestOpenAPIUnreachableIsTimeout(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	srv.Close()
	o := loadPetStore(t, base)
	if _, err := callJSON(t, o.Handlers()["pets.get_pet"], `{"id":1}`); !errors.Is(err, streams.ErrTimeout) {
		t.Errorf("an API that is gone: %v, want TIMEOUT", err)
	}
}

func TestOpenAPISpecErrorsNameTheLine(t *testing.T) {
	good, err := os.ReadFile("testdata/petstore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, spec, want string }{
		{"YAML syntax", "openapi: 3.0.0\ninfo:\n  title: x\n  version: '1'\npaths:\n  /a:\n    get: [\n", "line 8"},
		{"JSON syntax", "{\"openapi\": \"3.0.0\",\n \"info\": {\"title\": \"x\", \"version\": \"1\"},\n \"paths\": {,}}", ":3:"},
		{"a wrong type", "openapi: 3.0.0\ninfo:\n  title: x\n  version: '1'\npaths:\n  /a:\n    get:\n      responses: 7\n", "line 8"},
		{"a dangling $ref", "openapi: 3.0.0\ninfo:\n  title: x\n  version: '1'\npaths:\n  /a:\n    get:\n      operationId: a\n      responses:\n        '200':\n          description: ok\n          content:\n            application/json:\n              schema:\n                $ref: '#/components/schemas/Nope'\n", ":15:"},
		{"no operation", "openapi: 3.0.0\ninfo:\n  title: x\n  version: '1'\npaths:\n  /a:\n    get:\n      responses:\n        '200': {description: ok}\n", "no operationId"},
	} {
		_, err := newOpenAPI(OpenAPIConfig{Name: "x", Spec: []byte(c.spec), BaseURL: "http://127.0.0.1:1"})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
	// Control: the good spec loads; bad settings are refused.
	if _, err := newOpenAPI(OpenAPIConfig{Name: "x", Spec: good, BaseURL: "http://127.0.0.1:1"}); err != nil {
		t.Errorf("the good spec: %v", err)
	}
	for _, cfg := range []OpenAPIConfig{
		{Name: "X Y", Spec: good, BaseURL: "http://h"},
		{Name: "x", Spec: good, BaseURL: "ftp://h"},
		{Name: "x", BaseURL: "http://h"},
		{Name: "x", Spec: good, SpecFile: "testdata/petstore.yaml", BaseURL: "http://h"},
	} {
		if _, err := newOpenAPI(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", cfg.Name+" "+cfg.BaseURL, err)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true}, {"7", 7 * time.Second, true}, {" 2 ", 2 * time.Second, true},
		{"Thu, 01 Jan 2026 00:00:30 GMT", 30 * time.Second, true},
		{"Wed, 31 Dec 2025 00:00:00 GMT", 0, true},
		{"", 0, false}, {"-1", 0, false}, {"soon", 0, false},
	} {
		got, ok := retryAfter(c.v, now)
		if got != c.want || ok != c.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", c.v, got, ok, c.want, c.ok)
		}
	}
}
