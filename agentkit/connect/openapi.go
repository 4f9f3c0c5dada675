package connect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// Defaults of OpenAPIConfig.
const (
	DefaultMaxRetryAfter = 5 * time.Second
	DefaultRetries       = 2
	// maxResponse bounds the body read from the API.
	maxResponse = 8 << 20
)

// OpenAPIConfig describes an OpenAPI connector.
type OpenAPIConfig struct {
	// Name is the agent type and the prefix of every capability: the
	// operation "listPets" is served as "<Name>.list_pets".
	Name string
	// Spec is the OpenAPI document (3.0 or 3.1, JSON or YAML); or
	Spec []byte
	// SpecFile is a file holding it.
	SpecFile string
	// BaseURL is where the API is served; the operations' paths are
	// appended to it (required).
	BaseURL string
	// Header is sent with every request (e.g. Authorization).
	Header http.Header
	// HTTPClient makes the requests; nil means one with no timeout of its
	// own (each call is bounded by its task's deadline).
	HTTPClient *http.Client
	// MaxRetryAfter is the longest Retry-After a call waits out before
	// trying again (within the task's deadline); a longer one ends the
	// call TARGET_BUSY at once, for the dispatcher to retry elsewhere.
	// Default 5 s.
	MaxRetryAfter time.Duration
	// Retries is how many times a 429 or 503 with a Retry-After is tried
	// again by the connector itself; default 2, negative for none.
	Retries int
	// Agent configures the agent; its Type is Name, its Declaration is
	// made from the spec.
	Agent        agentkit.Config
	AgentOptions []agentkit.Option
	// Log is the connector's logger; nil writes info and above to
	// standard error.
	Log *zerolog.Logger
}

// OpenAPI is an HTTP API described by OpenAPI, served as an agent: each
// operation with an operationId is the capability <Name>.<operationId
// mapped>, its parameters and request body its input schema.
//
// A call's payload is a JSON object: each parameter (path, query, header)
// by its name, and the request body under "body". The result is the
// response body (JSON as it is, other content as {"text": …}, none as
// null). Status codes: 2xx is the result; 400, 413, 414, 415 and 422 are
// BAD_REQUEST, 408 TIMEOUT, 429 and 503 TARGET_BUSY (waited out and
// tried again when a Retry-After allows, see MaxRetryAfter), another 4xx
// BIZ_REJECT, another 5xx TIMEOUT, as is a request that gets no answer.
type OpenAPI struct {
	nc      *nats.Conn
	cfg     OpenAPIConfig
	log     zerolog.Logger
	base    *url.URL
	client  *http.Client
	ops     map[string]*operation
	decl    *declare.Declaration
	skipped []Skipped
	agent   *agentkit.Agent
}

// operation is one served operation.
type operation struct {
	capability string
	id         string
	method     string
	path       string
	params     []param
	hasBody    bool
}

type param struct {
	name, in string
	explode  bool
}

// NewOpenAPI parses the spec and returns the connector; a spec that does
// not parse is an error naming its line.
func NewOpenAPI(nc *nats.Conn, cfg OpenAPIConfig) (*OpenAPI, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrConfig)
	}
	o, err := newOpenAPI(cfg)
	if err != nil {
		return nil, err
	}
	o.nc = nc
	return o, nil
}

// CheckOpenAPI reports what NewOpenAPI would refuse in cfg (a spec that
// does not parse, naming its line; a bad name or base URL) without
// connecting anything.
func CheckOpenAPI(cfg OpenAPIConfig) error {
	_, err := newOpenAPI(cfg)
	return err
}

func newOpenAPI(cfg OpenAPIConfig) (*OpenAPI, error) {
	if err := streams.ValidateCapability(cfg.Name); err != nil {
		return nil, fmt.Errorf("%w: name: %v", ErrConfig, err)
	}
	base, err := url.Parse(cfg.BaseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("%w: base URL %q: want an http or https URL", ErrConfig, cfg.BaseURL)
	}
	spec, where := cfg.Spec, "spec"
	switch {
	case cfg.SpecFile != "" && cfg.Spec != nil:
		return nil, fmt.Errorf("%w: give the spec or its file, not both", ErrConfig)
	case cfg.SpecFile != "":
		if spec, err = os.ReadFile(cfg.SpecFile); err != nil {
			return nil, fmt.Errorf("%w: spec: %v", ErrConfig, err)
		}
		where = cfg.SpecFile
	case len(cfg.Spec) == 0:
		return nil, fmt.Errorf("%w: no spec", ErrConfig)
	}
	ops, decl, skipped, err := parseOpenAPI(cfg.Name, spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %s%v", ErrConfig, where, err)
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if cfg.Retries == 0 {
		cfg.Retries = DefaultRetries
	}
	cfg.Agent.Type = cfg.Name
	cfg.Agent.Declaration, cfg.Agent.DeclarationFile = decl, ""
	o := &OpenAPI{cfg: cfg, base: base, client: cfg.HTTPClient, ops: ops, decl: decl, skipped: skipped}
	if o.client == nil {
		o.client = &http.Client{}
	}
	if cfg.Log != nil {
		o.log = *cfg.Log
	} else {
		o.log = zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	}
	o.log = o.log.With().Str("connector", cfg.Name).Logger()
	return o, nil
}

// Declaration returns the declaration made from the spec.
func (o *OpenAPI) Declaration() *declare.Declaration { return o.decl }

// Skipped returns the operations left out, with the reasons.
func (o *OpenAPI) Skipped() []Skipped { return slices.Clone(o.skipped) }

// Handlers returns the handler of every capability.
func (o *OpenAPI) Handlers() map[string]agentkit.Handler {
	hs := make(map[string]agentkit.Handler, len(o.ops))
	for c, op := range o.ops {
		hs[c] = o.call(op)
	}
	return hs
}

// Start registers the agent; it is routable once Start returns.
func (o *OpenAPI) Start(ctx context.Context) error {
	for _, s := range o.skipped {
		o.log.Warn().Str("operation", s.Name).Str("reason", s.Reason).Msg("operation skipped")
	}
	opts := append([]agentkit.Option{agentkit.WithLogger(o.log), agentkit.WithoutSignals()}, o.cfg.AgentOptions...)
	a, err := agentkit.New(o.nc, o.cfg.Agent, opts...)
	if err != nil {
		return err
	}
	for c, h := range o.Handlers() {
		if err := a.Handle(c, h); err != nil {
			return err
		}
	}
	if err := a.Start(ctx); err != nil {
		return err
	}
	o.agent = a
	return nil
}

// Drain drains the agent.
func (o *OpenAPI) Drain(ctx context.Context) error {
	if o.agent == nil {
		return agentkit.ErrNotStarted
	}
	return o.agent.Drain(ctx)
}

// Run starts the agent, serves until ctx ends, then drains.
func (o *OpenAPI) Run(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, agentkit.DefaultStartTimeout)
	err := o.Start(sctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	<-ctx.Done()
	timeout := o.cfg.Agent.DrainTimeout
	if timeout <= 0 {
		timeout = agentkit.DefaultDrainTimeout
	}
	dctx, dcancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer dcancel()
	return o.Drain(dctx)
}

// OpenAPIDeclaration reads an OpenAPI document and returns the declaration
// of type name serving its operations, and the operations left out; see
// parseOpenAPI.
func OpenAPIDeclaration(name string, spec []byte) (*declare.Declaration, []Skipped, error) {
	_, d, s, err := parseOpenAPI(name, spec)
	return d, s, err
}

// parseOpenAPI reads an OpenAPI document and returns its operations by
// capability, the declaration of type name serving them, and the
// operations left out (no operationId, a name that maps to no capability
// or onto another's, a schema that does not compile). An error means the
// document does not parse or has no operation to serve; it starts with
// ":<line>: " when the line is known.
func parseOpenAPI(name string, spec []byte) (map[string]*operation, *declare.Declaration, []Skipped, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(spec)
	if err != nil {
		return nil, nil, nil, specError(spec, err)
	}
	if doc.Paths == nil || doc.Paths.Len() == 0 {
		return nil, nil, nil, errors.New(": the spec has no paths")
	}
	var entries []entry
	found := map[string]*operation{}
	var skipped []Skipped
	paths := doc.Paths.Map()
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		item := paths[p]
		if item == nil {
			continue
		}
		opsByMethod := item.Operations()
		for _, method := range slices.Sorted(maps.Keys(opsByMethod)) {
			op := opsByMethod[method]
			if op == nil {
				continue
			}
			if op.OperationID == "" {
				skipped = append(skipped, Skipped{method + " " + p, "it has no operationId"})
				continue
			}
			o, dc, err := operationCapability(name, doc, p, method, item, op)
			if err == nil {
				found[op.OperationID] = o
			}
			entries = append(entries, entry{name: op.OperationID, cap: dc, err: err})
		}
	}
	served, more := resolve(entries)
	skipped = append(skipped, more...)
	if len(served) == 0 {
		return nil, nil, skipped, fmt.Errorf(": no operation can be served (%s)", describeSkipped(skipped))
	}
	ops := make(map[string]*operation, len(served))
	for _, e := range served {
		ops[e.cap.Name] = found[e.name]
	}
	desc := "HTTP API"
	if doc.Info != nil && doc.Info.Title != "" {
		desc = doc.Info.Title
	}
	return ops, declaration(name, "", desc+" (agentreach connect openapi)", served), skipped, nil
}

func describeSkipped(s []Skipped) string {
	if len(s) == 0 {
		return "it has no operation"
	}
	parts := make([]string, 0, min(len(s), 5))
	for _, x := range s[:min(len(s), 5)] {
		parts = append(parts, x.Name+": "+x.Reason)
	}
	return strings.Join(parts, "; ")
}

// operationCapability makes the capability of one operation.
func operationCapability(prefix string, doc *openapi3.T, path, method string, item *openapi3.PathItem, op *openapi3.Operation) (*operation, declare.DeclaredCapability, error) {
	var dc declare.DeclaredCapability
	cname, err := CapabilityName(prefix, op.OperationID)
	if err != nil {
		return nil, dc, err
	}
	o := &operation{capability: cname, id: op.OperationID, method: method, path: path}
	props := map[string]any{}
	var required []string
	// Path-level parameters, then the operation's (which override them).
	all := map[string]*openapi3.Parameter{}
	var order []string
	for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, pr := range list {
			if pr == nil || pr.Value == nil {
				continue
			}
			key := pr.Value.In + ":" + pr.Value.Name
			if _, ok := all[key]; !ok {
				order = append(order, key)
			}
			all[key] = pr.Value
		}
	}
	for _, key := range order {
		p := all[key]
		switch p.In {
		case openapi3.ParameterInPath, openapi3.ParameterInQuery, openapi3.ParameterInHeader:
		default:
			return nil, dc, fmt.Errorf("parameter %q is in %s, which is not supported", p.Name, p.In)
		}
		if p.Name == "body" {
			return nil, dc, errors.New(`a parameter is called "body", the name of the request body`)
		}
		if _, dup := props[p.Name]; dup {
			return nil, dc, fmt.Errorf("parameter %q is given in two places", p.Name)
		}
		var sch any = map[string]any{}
		if p.Schema != nil {
			sch = p.Schema
		}
		props[p.Name] = sch
		if p.Required || p.In == openapi3.ParameterInPath {
			required = append(required, p.Name)
		}
		explode := p.In == openapi3.ParameterInQuery
		if p.Explode != nil {
			explode = *p.Explode
		}
		o.params = append(o.params, param{name: p.Name, in: p.In, explode: explode})
	}
	if rb := op.RequestBody; rb != nil && rb.Value != nil {
		mt := rb.Value.Content.Get("application/json")
		if mt == nil {
			return nil, dc, fmt.Errorf("its request body is not JSON (%s)", strings.Join(slices.Sorted(maps.Keys(rb.Value.Content)), ", "))
		}
		var sch any = map[string]any{}
		if mt.Schema != nil {
			sch = mt.Schema
		}
		props["body"] = sch
		o.hasBody = true
		if rb.Value.Required {
			required = append(required, "body")
		}
	}
	in := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		slices.Sort(required)
		in["required"] = required
	}
	inRaw, err := selfContained(doc, in)
	if err != nil {
		return nil, dc, fmt.Errorf("input schema: %v", err)
	}
	dc = declare.DeclaredCapability{Name: cname, Description: op.Summary, InputSchema: inRaw}
	if dc.Description == "" {
		dc.Description = op.Description
	}
	if out := successSchema(op); out != nil {
		if dc.OutputSchema, err = selfContained(doc, out); err != nil {
			return nil, dc, fmt.Errorf("output schema: %v", err)
		}
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		dc.Mode, dc.Idempotent = declare.ModeRead, true
	case http.MethodPut, http.MethodDelete:
		dc.Mode, dc.Idempotent = declare.ModeWrite, true
	default:
		dc.Mode = declare.ModeWrite
	}
	if err := checkCapability(prefix, dc); err != nil {
		return nil, dc, err
	}
	return o, dc, nil
}

// successSchema is the JSON schema of the first 2xx response that has one.
func successSchema(op *openapi3.Operation) *openapi3.SchemaRef {
	if op.Responses == nil {
		return nil
	}
	for _, code := range []int{200, 201, 202, 203, 206} {
		r := op.Responses.Status(code)
		if r == nil || r.Value == nil {
			continue
		}
		if mt := r.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
			return mt.Schema
		}
	}
	return nil
}

// selfContained marshals a schema built of kin-openapi schemas into one
// JSON Schema that needs no other document: every $ref to
// #/components/schemas/X becomes #/$defs/X, with the schemas referenced
// (transitively) under $defs; OpenAPI 3.0's boolean exclusiveMinimum /
// exclusiveMaximum and nullable are written as JSON Schema says them.
// Any other $ref is an error.
func selfContained(doc *openapi3.T, root any) (json.RawMessage, error) {
	b, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	defs := map[string]any{}
	var pending []string
	var fix func(any) error
	fix = func(x any) error {
		switch t := x.(type) {
		case map[string]any:
			if ref, ok := t["$ref"].(string); ok {
				name, ok := strings.CutPrefix(ref, "#/components/schemas/")
				if !ok || name == "" || strings.Contains(name, "/") {
					return fmt.Errorf("$ref %q: only #/components/schemas/<name> is supported", ref)
				}
				t["$ref"] = "#/$defs/" + name
				if _, seen := defs[name]; !seen {
					defs[name] = nil
					pending = append(pending, name)
				}
			}
			fixOpenAPI30(t)
			for _, k := range slices.Sorted(maps.Keys(t)) {
				if err := fix(t[k]); err != nil {
					return err
				}
			}
		case []any:
			for _, e := range t {
				if err := fix(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := fix(v); err != nil {
		return nil, err
	}
	for len(pending) > 0 {
		name := pending[0]
		pending = pending[1:]
		var sr *openapi3.SchemaRef
		if doc.Components != nil {
			sr = doc.Components.Schemas[name]
		}
		if sr == nil || sr.Value == nil {
			return nil, fmt.Errorf("$ref to %q, which components.schemas does not have", name)
		}
		b, err := json.Marshal(sr.Value)
		if err != nil {
			return nil, err
		}
		var d any
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, err
		}
		if err := fix(d); err != nil {
			return nil, err
		}
		defs[name] = d
	}
	if len(defs) > 0 {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errors.New("a schema with references must be an object")
		}
		m["$defs"] = defs
	}
	return json.Marshal(v)
}

// fixOpenAPI30 rewrites, in place, the keywords of an OpenAPI 3.0 schema
// object that JSON Schema 2020-12 reads differently.
func fixOpenAPI30(m map[string]any) {
	for _, k := range [][2]string{{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}} {
		b, ok := m[k[0]].(bool)
		if !ok {
			continue
		}
		delete(m, k[0])
		if n, ok := m[k[1]]; ok && b {
			m[k[0]] = n
			delete(m, k[1])
		}
	}
	if n, ok := m["nullable"].(bool); ok {
		delete(m, "nullable")
		if t, ok := m["type"].(string); ok && n {
			m["type"] = []any{t, "null"}
		}
	}
}

// specError is a load error with the line it is on, when it can be found:
// the YAML parser names it; a JSON syntax error has an offset, turned into
// a line; a reference that does not resolve is looked for in the text.
func specError(spec []byte, err error) error {
	msg := err.Error()
	if t := bytes.TrimSpace(spec); len(t) > 0 && t[0] == '{' {
		var v any
		var se *json.SyntaxError
		if jerr := json.Unmarshal(spec, &v); errors.As(jerr, &se) {
			return fmt.Errorf(":%d: %v", lineOf(spec, int(se.Offset)), se)
		}
		var te *json.UnmarshalTypeError
		if jerr := json.Unmarshal(spec, &v); errors.As(jerr, &te) {
			return fmt.Errorf(":%d: %v", lineOf(spec, int(te.Offset)), te)
		}
	}
	if strings.Contains(msg, "line ") {
		return fmt.Errorf(": %s", msg)
	}
	if i := strings.Index(msg, `"#/`); i >= 0 {
		if j := strings.IndexByte(msg[i+1:], '"'); j > 0 {
			ref := msg[i+1 : i+1+j]
			if k := bytes.Index(spec, []byte(ref)); k >= 0 {
				return fmt.Errorf(":%d: %s", lineOf(spec, k), msg)
			}
		}
	}
	return fmt.Errorf(": %s", msg)
}

func lineOf(b []byte, off int) int {
	off = min(max(off, 0), len(b))
	return bytes.Count(b[:off], []byte{'\n'}) + 1
}

// call is the handler of op.
func (o *OpenAPI) call(op *operation) agentkit.Handler {
	return func(ctx context.Context, req *agentkit.Request) (any, error) {
		var in map[string]json.RawMessage
		if err := decodeObject(req, &in); err != nil {
			return nil, err
		}
		target, header, body, err := o.request(op, in)
		if err != nil {
			return nil, err
		}
		for attempt := 0; ; attempt++ {
			out, wait, err := o.do(ctx, op, target, header, body)
			if wait < 0 || attempt >= max(o.cfg.Retries, 0) {
				return result(req, out, err)
			}
			// A Retry-After short enough to wait out here.
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
	}
}

// result encodes out for req, as the MCP connector does.
func result(req *agentkit.Request, out json.RawMessage, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	if req.ContentType == streams.ContentTypeJSON {
		return []byte(out), nil
	}
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, streams.NewError(streams.CodeInternal, "result: %v", err)
	}
	return v, nil
}

// decodeObject decodes a payload that must be an object (or empty).
func decodeObject(req *agentkit.Request, v *map[string]json.RawMessage) error {
	data := bytes.TrimSpace(req.Data)
	if len(data) == 0 || string(data) == "null" {
		return nil
	}
	if req.ContentType == streams.ContentTypeJSON {
		if data[0] != '{' {
			return agentkit.BadRequest("the payload must be a JSON object")
		}
		if err := json.Unmarshal(data, v); err != nil {
			return agentkit.BadRequestf("the payload: %v", err)
		}
		return nil
	}
	var m map[string]any
	if err := req.Decode(&m); err != nil {
		return err
	}
	*v = make(map[string]json.RawMessage, len(m))
	for k, x := range m {
		b, err := json.Marshal(x)
		if err != nil {
			return agentkit.BadRequestf("the payload's %q: %v", k, err)
		}
		(*v)[k] = b
	}
	return nil
}

// request builds the URL, headers and body of a call of op with input in.
func (o *OpenAPI) request(op *operation, in map[string]json.RawMessage) (string, http.Header, []byte, error) {
	path := op.path
	q := url.Values{}
	header := http.Header{}
	for _, p := range op.params {
		raw, ok := in[p.name]
		if !ok || string(raw) == "null" {
			if p.in == openapi3.ParameterInPath {
				return "", nil, nil, agentkit.BadRequestf("path parameter %q is missing", p.name)
			}
			continue
		}
		values, err := paramValues(raw)
		if err != nil {
			return "", nil, nil, agentkit.BadRequestf("parameter %q: %v", p.name, err)
		}
		switch p.in {
		case openapi3.ParameterInPath:
			path = strings.ReplaceAll(path, "{"+p.name+"}", url.PathEscape(strings.Join(values, ",")))
		case openapi3.ParameterInQuery:
			if p.explode {
				for _, v := range values {
					q.Add(p.name, v)
				}
			} else {
				q.Set(p.name, strings.Join(values, ","))
			}
		case openapi3.ParameterInHeader:
			header.Set(p.name, strings.Join(values, ","))
		}
	}
	u := *o.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = ""
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	var body []byte
	if op.hasBody {
		if raw, ok := in["body"]; ok {
			body = raw
		}
	}
	return u.String(), header, body, nil
}

// paramValues renders a parameter's JSON value as strings: a scalar is
// one, an array one per element, an object its JSON.
func paramValues(raw json.RawMessage) ([]string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	one := func(x any) string {
		switch t := x.(type) {
		case string:
			return t
		case float64, bool, nil:
			b, _ := json.Marshal(t)
			return string(b)
		}
		b, _ := json.Marshal(x)
		return string(b)
	}
	if arr, ok := v.([]any); ok {
		out := make([]string, len(arr))
		for i, x := range arr {
			out[i] = one(x)
		}
		return out, nil
	}
	if s, ok := v.(string); ok {
		return []string{s}, nil
	}
	// Numbers keep the caller's spelling (no float rounding).
	if _, ok := v.(float64); ok {
		return []string{string(bytes.TrimSpace(raw))}, nil
	}
	return []string{one(v)}, nil
}

// do sends one request. wait ≥ 0 asks the caller to try again after it
// (a 429 or 503 whose Retry-After is short enough); -1 means done.
func (o *OpenAPI) do(ctx context.Context, op *operation, target string, header http.Header, body []byte) (json.RawMessage, time.Duration, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, op.method, target, rd)
	if err != nil {
		return nil, -1, streams.NewError(streams.CodeInternal, "request: %v", err)
	}
	for k, vs := range o.cfg.Header {
		hreq.Header[k] = slices.Clone(vs)
	}
	for k, vs := range header {
		hreq.Header[k] = vs
	}
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	hreq.Header.Set("Accept", "application/json")
	resp, err := o.client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, -1, ctx.Err()
		}
		return nil, -1, streams.NewError(streams.CodeTimeout, "%s %s: %v", op.method, op.path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, -1, ctx.Err()
		}
		return nil, -1, streams.NewError(streams.CodeTimeout, "%s %s: reading the response: %v", op.method, op.path, err)
	}
	if len(data) > maxResponse {
		return nil, -1, streams.NewError(streams.CodeInternal, "%s %s: the response is larger than %d bytes", op.method, op.path, maxResponse)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return responseBody(data), -1, nil
	}
	code := statusCode(resp.StatusCode)
	msg := fmt.Sprintf("%s %s: %d %s", op.method, op.path, resp.StatusCode, http.StatusText(resp.StatusCode))
	if t := strings.TrimSpace(string(data)); t != "" {
		msg += ": " + truncate(t, 512)
	}
	if code == streams.CodeTargetBusy {
		if ra, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			msg += fmt.Sprintf(" (Retry-After %s)", ra.Round(time.Second))
			if ra <= o.cfg.MaxRetryAfter && fits(ctx, ra) {
				return nil, ra, &streams.Error{Code: code, Message: msg}
			}
		}
	}
	return nil, -1, &streams.Error{Code: code, Message: msg}
}

// fits reports whether waiting d leaves the task's deadline some room.
func fits(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > d+d/4+50*time.Millisecond
}

// statusCode maps an HTTP error status to a Reach code.
func statusCode(status int) streams.Code {
	switch {
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		return streams.CodeTargetBusy
	case status == http.StatusRequestTimeout:
		return streams.CodeTimeout
	case status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge ||
		status == http.StatusRequestURITooLong || status == http.StatusUnsupportedMediaType ||
		status == http.StatusUnprocessableEntity:
		return streams.CodeBadRequest
	case status >= 400 && status < 500:
		return streams.CodeBizReject
	case status >= 500:
		return streams.CodeTimeout
	}
	return streams.CodeInternal // 1xx, 3xx not followed
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, 1<<31)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// responseBody is a 2xx body as a result: JSON as it is, empty as null,
// anything else as {"text": …}.
func responseBody(data []byte) json.RawMessage {
	t := bytes.TrimSpace(data)
	switch {
	case len(t) == 0:
		return json.RawMessage("null")
	case json.Valid(t):
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(map[string]string{"text": string(data)})
	return b
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
