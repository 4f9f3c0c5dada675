package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/streams"
)

// Patterns are the paths a Server answers, for a mux to route to it.
var Patterns = []string{"/a2a", "/a2a/", "/.well-known/agent-card.json"}

// wellKnown is the path of a card under its agent's base URL.
const wellKnown = "/.well-known/agent-card.json"

// DefaultMaxBody bounds a JSON-RPC request body when Config.MaxBody is 0.
const DefaultMaxBody = 1 << 20

// Config configures a Server. The zero value means all defaults.
type Config struct {
	// Identify says who the caller of r is, as the gateway's Identifier
	// does: it sets the task's Reach-Source (and signature) or returns
	// the error the caller gets. Nil: nobody is identified (auth off),
	// the request's own Reach-Source header passes, and the cards name
	// no security scheme.
	Identify func(r *http.Request, task *nats.Msg) *streams.Error
	// MaxBody bounds a request body; default 1 MiB.
	MaxBody int64
	// CallTimeout bounds a SendMessage answered at once; default the
	// dispatcher's overall Deadline.
	CallTimeout time.Duration
	// MaxTasks bounds the tasks remembered for GetTask and ListTasks
	// (the oldest ended one is forgotten first); default 10,000.
	MaxTasks int
}

// Server serves A2A over a dispatcher. Create it with New, mount it on
// Patterns, stop it with Close. Safe for concurrent use.
type Server struct {
	d     *dispatcher.Dispatcher
	cfg   Config
	tasks *tasks
	cache skillCache

	ctx  context.Context // ends at Close: the background tasks' parent
	stop context.CancelFunc
	mu   sync.Mutex // guards wg.Add against Close's Wait
	done bool
	wg   sync.WaitGroup
}

// New returns a Server routing through d (started).
func New(d *dispatcher.Dispatcher, cfg Config) (*Server, error) {
	if d == nil {
		return nil, errors.New("a2a: nil dispatcher")
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = d.Config().Deadline
	}
	if cfg.MaxTasks == 0 {
		cfg.MaxTasks = DefaultMaxTasks
	}
	if cfg.MaxBody < 1 || cfg.CallTimeout < 0 || cfg.MaxTasks < 1 {
		return nil, fmt.Errorf("a2a: invalid config: MaxBody %d, CallTimeout %v, MaxTasks %d", cfg.MaxBody, cfg.CallTimeout, cfg.MaxTasks)
	}
	s := &Server{d: d, cfg: cfg, tasks: newTasks(cfg.MaxTasks)}
	s.ctx, s.stop = context.WithCancel(context.Background())
	return s, nil
}

// Close cancels the tasks still running in the background (as CancelTask
// does) and waits for them. Calling it again does nothing.
func (s *Server) Close() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
}

// ServeHTTP answers the cards (GET) and the JSON-RPC methods (POST).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	switch {
	case path == wellKnown:
		s.serveCard(w, r, "")
	case path == "/a2a":
		s.serveRPC(w, r, "")
	case strings.HasPrefix(path, "/a2a/"):
		rest := path[len("/a2a/"):]
		if t, ok := strings.CutSuffix(rest, wellKnown); ok {
			s.serveCard(w, r, t)
			return
		}
		s.serveRPC(w, r, rest)
	default:
		writeHTTPError(w, http.StatusNotFound, "NOT_FOUND", "no route "+r.Method+" "+path)
	}
}

// skillCache holds each known type's capabilities until the routing
// table or the declarations change: a message needs them to find its
// skill, and computing them takes a walk of the table.
type skillCache struct {
	mu      sync.Mutex
	changed <-chan struct{} // the table's Changed when byType was begun
	catalog uint64          // the declarations' version then
	byType  map[string][]string
}

// skills returns the capabilities of agentType, declared or live; false
// when it is neither. Unknown types are not remembered, so a caller
// naming many cannot grow the cache.
func (s *Server) skills(agentType string) ([]string, bool) {
	changed := s.d.Table().Changed()
	var version uint64
	if c := s.d.Catalog(); c != nil {
		version = c.Version()
	}
	s.cache.mu.Lock()
	if s.cache.changed != changed || s.cache.catalog != version {
		s.cache.changed, s.cache.catalog, s.cache.byType = changed, version, map[string][]string{}
	}
	caps, ok := s.cache.byType[agentType]
	s.cache.mu.Unlock()
	if ok {
		return caps, true
	}
	v, known := s.view(agentType, time.Now())
	if !known {
		return nil, false
	}
	s.cache.mu.Lock()
	if s.cache.changed == changed && s.cache.catalog == version {
		s.cache.byType[agentType] = v.caps
	}
	s.cache.mu.Unlock()
	return v.caps, true
}

// knownType checks that agentType is a valid type name, answering 404
// when it is not.
func knownType(w http.ResponseWriter, agentType string) bool {
	if agentType == "" || strings.Contains(agentType, "/") || streams.ValidateCapability(agentType) != nil {
		writeHTTPError(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("no agent type %q", agentType))
		return false
	}
	return true
}

func (s *Server) serveCard(w http.ResponseWriter, r *http.Request, agentType string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET")
		writeHTTPError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", r.Method+" "+r.URL.Path+": use GET")
		return
	}
	if s.cfg.Identify != nil {
		if e := s.cfg.Identify(r, &nats.Msg{Header: nats.Header{}}); e != nil {
			writeIdentifyError(w, r, e)
			return
		}
	}
	if agentType == "" {
		writeJSON(w, http.StatusOK, s.gatewayCard(baseURL(r)))
		return
	}
	if !knownType(w, agentType) {
		return
	}
	v, ok := s.view(agentType, time.Now())
	if !ok {
		writeHTTPError(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("no agent type %q: none is declared or registered", agentType))
		return
	}
	writeJSON(w, http.StatusOK, s.card(v, baseURL(r)))
}

// serveRPC answers one JSON-RPC request to agentType ("" for the
// gateway's endpoint, where the message names its skill).
func (s *Server) serveRPC(w http.ResponseWriter, r *http.Request, agentType string) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeHTTPError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", r.Method+" "+r.URL.Path+": use POST (JSON-RPC)")
		return
	}
	v := typeView{name: agentType}
	if agentType != "" {
		if !knownType(w, agentType) {
			return
		}
		var ok bool
		if v.caps, ok = s.skills(agentType); !ok {
			writeHTTPError(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("no agent type %q: none is declared or registered", agentType))
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		writeRPC(w, nil, nil, rpcError(CodeInvalidRequest, "reading the body (at most %d bytes): %v", s.cfg.MaxBody, err))
		return
	}
	req, e := DecodeRequest(body)
	if e != nil {
		writeRPC(w, req.ID, nil, e)
		return
	}
	w.Header().Set(HeaderVersion, ProtocolVersion)
	if e := checkVersion(r.Header.Get(HeaderVersion)); e != nil {
		writeRPC(w, req.ID, nil, e)
		return
	}
	switch req.Method {
	case MethodSendMessage, MethodSendStreamingMessage:
		s.sendMessage(w, r, req, v)
	case MethodGetTask:
		s.getTask(w, r, req)
	case MethodListTasks:
		s.listTasks(w, r, req)
	case MethodCancelTask:
		s.cancelTask(w, r, req)
	case "SubscribeToTask", "GetExtendedAgentCard":
		writeRPC(w, req.ID, nil, rpcError(CodeUnsupportedOperation, "%s is not served here", req.Method))
	case "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig":
		writeRPC(w, req.ID, nil, rpcError(CodePushNotSupported, "push notifications are not served here"))
	default:
		writeRPC(w, req.ID, nil, rpcError(CodeMethodNotFound, "no method %q", req.Method))
	}
}

// checkVersion accepts a version of ProtocolVersion's major; none means
// 0.3 (the A2A rule), which is not served.
func checkVersion(v string) *RPCError {
	v = strings.TrimSpace(v)
	if v == "" {
		return rpcError(CodeVersionNotSupported, "no %s header, which means 0.3: this server speaks %s (send %s: %s)",
			HeaderVersion, ProtocolVersion, HeaderVersion, ProtocolVersion)
	}
	major, _, _ := strings.Cut(v, ".")
	if want, _, _ := strings.Cut(ProtocolVersion, "."); major != want {
		return rpcError(CodeVersionNotSupported, "A2A version %q is not served: this server speaks %s", v, ProtocolVersion)
	}
	return nil
}

// identify asks Config.Identify who sends m; false once it has answered
// the refusal.
func (s *Server) identify(w http.ResponseWriter, r *http.Request, m *nats.Msg) bool {
	if s.cfg.Identify == nil {
		return true
	}
	if e := s.cfg.Identify(r, m); e != nil {
		writeIdentifyError(w, r, e)
		return false
	}
	return true
}

// caller returns the identity of r's sender (the Reach-Source its task
// would carry); false once it has answered a refusal.
func (s *Server) caller(w http.ResponseWriter, r *http.Request) (string, bool) {
	m := &nats.Msg{Header: nats.Header{}}
	if v := r.Header.Get(streams.HeaderSource); v != "" {
		m.Header.Set(streams.HeaderSource, v)
	}
	if !s.identify(w, r, m) {
		return "", false
	}
	return m.Header.Get(streams.HeaderSource), true
}

// writeIdentifyError answers a refused identification: 401 without
// credentials, 403 with, 400 for one that does not parse; the body a
// JSON-RPC error (no id: the request was not read).
func writeIdentifyError(w http.ResponseWriter, r *http.Request, e *streams.Error) {
	status := http.StatusForbidden
	switch {
	case e.Code == streams.CodeBadRequest:
		status = http.StatusBadRequest
	case r.Header.Get("Authorization") == "":
		status = http.StatusUnauthorized
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentreach"`)
	}
	b, _ := json.Marshal(response{JSONRPC: "2.0", ID: json.RawMessage("null"),
		Error: rpcError(CodeInvalidRequest, "%s: %s", e.Code, e.Message).withReachCode(e.Code)})
	writeBytes(w, status, b)
}

// writeRPC answers a JSON-RPC response, 200 as JSON-RPC over HTTP does
// for errors too.
func writeRPC(w http.ResponseWriter, id json.RawMessage, result any, e *RPCError) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, err := json.Marshal(response{JSONRPC: "2.0", ID: id, Result: result, Error: e})
	if err != nil {
		b, _ = json.Marshal(response{JSONRPC: "2.0", ID: id, Error: rpcError(CodeInternalError, "result not encodable: %v", err)})
	}
	writeBytes(w, http.StatusOK, b)
}

// writeHTTPError answers a request that is no JSON-RPC call (a path or
// method the server does not serve) the gateway's way: {"code", "message"}.
func writeHTTPError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]string{"code": code, "message": message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":"INTERNAL","message":"response not encodable"}`)
	}
	writeBytes(w, status, b)
}

func writeBytes(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
