package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/gateway/a2a"
	"github.com/agent-reach/agentreach/streams"
)

// routes is the gateway's mux: each path with its method, the same path
// with any other method answering 405, and every other path 404, all in
// JSON.
func (g *Gateway) routes() http.Handler {
	mux := http.NewServeMux()
	for _, r := range []struct {
		method, path string
		h            http.HandlerFunc
	}{
		{http.MethodPost, "/v1/call/{capability}", g.call},
		{http.MethodPost, "/v1/stream/{capability}", g.stream},
		{http.MethodPost, "/route", g.route},
		{http.MethodPost, "/v1/submit/{capability}", g.submit},
		{http.MethodGet, "/v1/results/{id}", g.result},
		{http.MethodPost, "/v1/broadcast/{capability}", g.broadcast},
		{http.MethodPost, "/v1/fanout", g.fanout},
		{http.MethodGet, "/v1/agents", g.inspection(g.agents)},
		{http.MethodGet, "/v1/stats", g.inspection(g.statsPage)},
		{http.MethodGet, "/healthz", g.healthz},
		{http.MethodGet, "/metrics", g.inspection(g.serveMetrics)},
		{http.MethodGet, "/{$}", g.dashboard},
		{http.MethodGet, "/static/", g.assets},
	} {
		mux.HandleFunc(r.method+" "+r.path, r.h)
		allowed := r.method
		mux.HandleFunc(r.path, func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("Allow", allowed)
			writeError(w, req, streams.NewError(CodeMethodNotAllowed, "%s %s: use %s", req.Method, req.URL.Path, allowed))
		})
	}
	mux.Handle("/mcp", g.mcpHandler())
	for _, p := range a2a.Patterns {
		mux.Handle(p, g.a2a)
	}
	if g.console != nil {
		for _, r := range g.console.Routes() {
			mux.HandleFunc(r.Method+" "+r.Path, r.Handler)
		}
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		writeError(w, req, streams.NewError(CodeNotFound, "no route %s %s (see docs/operations.md)", req.Method, req.URL.Path))
	})
	return mux
}

// inspection serves h only to a request whose bearer token the Identifier
// accepts, when there is one (auth on): what runs where, its load and its
// failures are not for anyone who can reach the port. Without one (auth
// off) it serves h to all. /healthz stays open for probes; the dashboard's
// page and assets hold no data, its script sends the token it was given.
func (g *Gateway) inspection(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if f := g.identify(r, &nats.Msg{}); f != nil {
			g.answer(w, r, f)
			return
		}
		h(w, r)
	}
}

// answer writes a failure.
func (g *Gateway) answer(w http.ResponseWriter, r *http.Request, f *failure) {
	if f.status != 0 {
		if s := retryAfter(f.e.Code); s != "" {
			w.Header().Set("Retry-After", s)
		}
		writeJSON(w, f.status, f.e)
		return
	}
	writeError(w, r, f.e)
}

// identify asks the Identifier who the caller of r is.
func (g *Gateway) identify(r *http.Request, task *nats.Msg) *failure {
	if g.identifier == nil {
		return nil
	}
	if e := g.identifier.Identify(r, task); e != nil {
		return &failure{e: e}
	}
	return nil
}

// outbound readies m, complete and with its subject, for publishing over
// NATS: its caller identified (and m signed, with auth) and its size
// within the server's limit. It reports false once it has answered r with
// the failure.
func (g *Gateway) outbound(w http.ResponseWriter, r *http.Request, m *nats.Msg) bool {
	if f := g.identify(r, m); f != nil {
		g.answer(w, r, f)
		return false
	}
	if err := streams.CheckSize(m, g.nc.MaxPayload()); err != nil {
		g.answer(w, r, &failure{e: streams.AsError(err)})
		return false
	}
	return true
}

// callContext bounds a request's call by the server's write timeout.
func (g *Gateway) callContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), g.cfg.WriteTimeout-writeSlack)
}

// call is POST /v1/call/{capability}: the body is the payload, the result
// the response body.
func (g *Gateway) call(w http.ResponseWriter, r *http.Request) {
	if wantsEventStream(r) {
		g.stream(w, r) // sse.go
		return
	}
	capability := r.PathValue("capability")
	m, f := readTask(w, r, capability, g.cfg.MaxBody)
	if f != nil {
		g.answer(w, r, f)
		return
	}
	g.routeTask(w, r, capability, m)
}

// route is POST /route: {"capability", "payload"}; the answer's
// Reach-Orchestration-Id and Reach-Node also come as X-Orchestration-ID and
// X-Agent-Reachable-Node.
func (g *Gateway) route(w http.ResponseWriter, r *http.Request) {
	if ct, f := contentType(r.Header.Get("Content-Type")); f != nil || ct == streams.ContentTypeMsgpack {
		if f == nil {
			f = fail(http.StatusUnsupportedMediaType, streams.CodeBadRequest, "POST /route takes application/json")
		}
		g.answer(w, r, f)
		return
	}
	body, f := readBody(w, r, g.cfg.MaxBody)
	if f != nil {
		g.answer(w, r, f)
		return
	}
	req, e := DecodeRoute(body)
	if e != nil {
		g.answer(w, r, &failure{e: e})
		return
	}
	g.routeTask(seedNames{w}, r, req.Capability, taskMsg(r.Header, streams.ContentTypeJSON, req.Payload))
}

// The headers POST /route answers beside their Reach-* names: what the
// readers of the seeds' /route look for.
const (
	// HeaderSeedOrchestrationID is Reach-Orchestration-Id.
	HeaderSeedOrchestrationID = "X-Orchestration-ID"
	// HeaderSeedNode is Reach-Node: the instance that answered.
	HeaderSeedNode = "X-Agent-Reachable-Node"
)

// seedNames copies, as its answer's headers are written, the Reach-*
// headers that have a seed name to that name too.
type seedNames struct{ http.ResponseWriter }

func (s seedNames) WriteHeader(status int) {
	h := s.Header()
	for reach, seed := range map[string]string{streams.HeaderOrchestrationID: HeaderSeedOrchestrationID, streams.HeaderNode: HeaderSeedNode} {
		if v := h.Get(reach); v != "" {
			h.Set(seed, v)
		}
	}
	s.ResponseWriter.WriteHeader(status)
}

// Unwrap gives http.ResponseController the writer underneath.
func (s seedNames) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// routeTask routes m through the dispatcher and answers its reply.
func (g *Gateway) routeTask(w http.ResponseWriter, r *http.Request, capability string, m *nats.Msg) {
	if f := g.identify(r, m); f != nil {
		g.answer(w, r, f)
		return
	}
	ctx, cancel := g.callContext(r)
	defer cancel()
	writeReply(w, r, g.d.Call(ctx, capability, m))
}

// Submitted is the answer to POST /v1/submit/{capability}.
type Submitted struct {
	RequestID string `json:"request_id"`
	// Result is where the outcome will be: GET it.
	Result string `json:"result"`
}

// submit is POST /v1/submit/{capability}: the task goes to REACH_TASKS;
// 202 with its request id once JetStream has stored it.
func (g *Gateway) submit(w http.ResponseWriter, r *http.Request) {
	capability := r.PathValue("capability")
	m, f := readTask(w, r, capability, g.cfg.MaxBody)
	if f != nil {
		g.answer(w, r, f)
		return
	}
	id := m.Header.Get(streams.HeaderRequestID)
	if id == "" {
		id = streams.NewRequestID()
		m.Header.Set(streams.HeaderRequestID, id)
	}
	if err := streams.ValidateInstanceID(id); err != nil {
		g.answer(w, r, fail(0, streams.CodeBadRequest, "%s: %v", streams.HeaderRequestID, err))
		return
	}
	m.Subject = g.d.Config().Subjects.Submit(capability)
	m.Header.Set(streams.HeaderMsgID, id) // with auth on, Vouch makes it the identity's proof (signature.Signer.SubmissionID)
	if f := g.identify(r, m); f != nil {
		g.answer(w, r, f)
		return
	}
	// Deduplicated per caller and request id: without auth,
	// streams.SubmissionID of the request's Reach-Source.
	source, err := streams.ResultSource(m.Header.Get(streams.HeaderSource))
	if err != nil {
		g.answer(w, r, fail(0, streams.CodeBadRequest, "%v", err))
		return
	}
	if m.Header.Get(streams.HeaderMsgID) == id {
		m.Header.Set(streams.HeaderMsgID, streams.SubmissionID(source, id))
	}
	if err := streams.CheckSize(m, g.nc.MaxPayload()); err != nil {
		g.answer(w, r, &failure{e: streams.AsError(err)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	// Retried while REACH_TASKS has no leader (deduplicated by its
	// Nats-Msg-Id); "provision first" only when the stream does not exist.
	missing := false
	err = streams.RetryUnavailable(ctx, func(ctx context.Context) error {
		_, err := g.js.PublishMsg(ctx, m)
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			_, serr := g.js.Stream(ctx, streams.StreamTasks)
			if missing = errors.Is(serr, jetstream.ErrStreamNotFound); missing {
				return serr
			}
		}
		return err
	})
	switch {
	case streams.IsBufferFull(err):
		g.answer(w, r, fail(0, streams.CodeOverloaded, "the durable buffer of %s is full; try again later", capability))
		return
	case missing:
		g.answer(w, r, fail(http.StatusServiceUnavailable, streams.CodeInternal, "no JetStream stream captures %s (provision first): %v", m.Subject, err))
		return
	case err != nil:
		g.answer(w, r, fail(http.StatusServiceUnavailable, streams.CodeInternal, "submit %s: %v", capability, err))
		return
	}
	loc := "/v1/results/" + id
	w.Header().Set("Location", loc)
	w.Header().Set(streams.HeaderRequestID, id)
	writeJSON(w, http.StatusAccepted, Submitted{RequestID: id, Result: loc})
}

// result is GET /v1/results/{id}: a durable task's recorded result (or
// business rejection) as a call would answer it, or 404 while none is.
// It serves only the caller's own results: those of the bearer token's
// identity with auth on, else of the request's Reach-Source (or of tasks
// submitted without one): another caller's result under the same id is
// not found.
func (g *Gateway) result(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := streams.ValidateInstanceID(id); err != nil {
		g.answer(w, r, fail(0, streams.CodeBadRequest, "request id in the path: %v", err))
		return
	}
	caller := &nats.Msg{Header: nats.Header{}}
	if v := r.Header.Get(streams.HeaderSource); v != "" {
		caller.Header.Set(streams.HeaderSource, v)
	}
	if f := g.identify(r, caller); f != nil {
		g.answer(w, r, f)
		return
	}
	source, err := streams.ResultSource(caller.Header.Get(streams.HeaderSource))
	if err != nil {
		g.answer(w, r, fail(0, streams.CodeBadRequest, "%v", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	s, err := g.js.Stream(ctx, streams.StreamResults)
	if err != nil {
		g.answer(w, r, fail(http.StatusServiceUnavailable, streams.CodeInternal, "open %s: %v", streams.StreamResults, err))
		return
	}
	raw, err := s.GetLastMsgForSubject(ctx, g.d.Config().Subjects.Result(source, id))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		g.answer(w, r, fail(0, CodeNotFound, "no result recorded for %s of %s: the task may still wait or run, be parked "+
			"(agentreach result %s says where), or was never submitted by this caller", id, source, id))
		return
	case err != nil:
		g.answer(w, r, fail(http.StatusServiceUnavailable, streams.CodeInternal, "read %s: %v", streams.StreamResults, err))
		return
	}
	writeReply(w, r, &nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
}

// broadcast is POST /v1/broadcast/{capability}: one delivery to every
// routable instance, one aggregate answer.
func (g *Gateway) broadcast(w http.ResponseWriter, r *http.Request) {
	capability := r.PathValue("capability")
	m, f := readTask(w, r, capability, g.cfg.MaxBody)
	if f != nil {
		g.answer(w, r, f)
		return
	}
	m.Subject = g.d.Config().Subjects.Broadcast(capability)
	g.request(w, r, m)
}

// fanout is POST /v1/fanout: the body is a fan-out request (docs/reference.md, Broadcast and fan-out).
func (g *Gateway) fanout(w http.ResponseWriter, r *http.Request) {
	ct, f := contentType(r.Header.Get("Content-Type"))
	var body []byte
	if f == nil {
		body, f = readBody(w, r, g.cfg.MaxBody)
	}
	if f != nil {
		g.answer(w, r, f)
		return
	}
	m := taskMsg(r.Header, ct, body)
	m.Subject = g.d.Config().Subjects.FanOut()
	g.request(w, r, m)
}

// request sends m as a NATS request to the replicas' fan-out service (the
// queue group: this replica's or another's) and answers its reply. The
// broadcast and fan-out logic lives in one place, package fanout, reached
// the way every other client reaches it; the extra hop is one message.
func (g *Gateway) request(w http.ResponseWriter, r *http.Request, m *nats.Msg) {
	if !g.outbound(w, r, m) {
		return
	}
	ctx, cancel := g.callContext(r)
	defer cancel()
	reply, err := g.nc.RequestMsgWithContext(ctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		g.answer(w, r, fail(0, streams.CodeNoAgent, "no dispatcher's fan-out service listens on %s", m.Subject))
	case errors.Is(err, context.DeadlineExceeded):
		g.answer(w, r, fail(0, streams.CodeTimeout, "no answer on %s in time", m.Subject))
	case errors.Is(err, context.Canceled):
		g.answer(w, r, fail(0, streams.CodeCancelled, "the client went away"))
	case err != nil:
		g.answer(w, r, fail(http.StatusBadGateway, streams.CodeInternal, "request %s: %v", m.Subject, err))
	default:
		writeReply(w, r, reply)
	}
}
