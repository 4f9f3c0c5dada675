package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/registry/document"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/registry/taxonomy"
	"github.com/agent-reach/agentreach/streams"
)

// The streams of the Action a policy or declaration write records, and its
// action.
const (
	StreamPolicy = "policy" // REACH_POLICY
	StreamCaps   = "caps"   // REACH_CAPS

	ActionPut = "put"
)

// CodeConflict answers a write whose revision is no longer the stored
// one: someone else changed the value since the page read it.
const CodeConflict streams.Code = "CONFLICT"

// MaxEditSize bounds the body of a policy or declaration write.
const MaxEditSize = policy.MaxSize + 64<<10

// Edit is the body of a policy or declaration write: the new value as the
// page's text, JSON or YAML, and the revision it was read at (0: the key
// must not exist yet; absent: write whatever is stored).
type Edit struct {
	Value    string  `json:"value"`
	Revision *uint64 `json:"revision,omitempty"`
}

// DecodeEdit reads an Edit strictly (an unknown key, a key given twice or
// a value of the wrong type is a BAD_REQUEST naming it).
func DecodeEdit(body []byte) (Edit, *streams.Error) {
	var e Edit
	bad := func(format string, args ...any) (Edit, *streams.Error) {
		return Edit{}, streams.NewError(streams.CodeBadRequest, "body: "+format, args...)
	}
	if len(body) > MaxEditSize {
		return bad("%d bytes, more than the %d allowed", len(body), MaxEditSize)
	}
	tree, err := document.ReadTree(body)
	if err != nil {
		return bad("%v (want {\"value\": \"<JSON or YAML>\", \"revision\": N})", err)
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return bad("want an object {\"value\": \"<JSON or YAML>\", \"revision\": N}")
	}
	for k, v := range obj {
		switch k {
		case "value":
			s, ok := v.(string)
			if !ok {
				return bad("value: want a string, the value as JSON or YAML text")
			}
			e.Value = s
		case "revision":
			n, ok := v.(json.Number)
			r, err := n.Int64()
			if !ok || err != nil || r < 0 {
				return bad("revision: want the revision read, a non-negative integer (0: the key is new)")
			}
			u := uint64(r)
			e.Revision = &u
		default:
			return bad("%s: unknown key (want value and revision)", clip(k))
		}
	}
	if strings.TrimSpace(e.Value) == "" {
		return bad("value: required, the new value as JSON or YAML")
	}
	return e, nil
}

// PolicyKey is one REACH_POLICY key as the console lists it.
type PolicyKey struct {
	Key      string          `json:"key"`
	Revision uint64          `json:"revision"`
	Updated  time.Time       `json:"updated"`
	Value    json.RawMessage `json:"value,omitempty"`
	// Error says why the stored value is invalid: dispatchers ignore it and
	// keep the last good one.
	Error string `json:"error,omitempty"`
	// Raw is the stored value when it is invalid.
	Raw string `json:"raw,omitempty"`
}

// PolicyListing is the answer of GET /v1/console/policy.
type PolicyListing struct {
	Keys []PolicyKey `json:"keys"`
	// Write says whether the requester may change the policy, and if not
	// why.
	Write   bool   `json:"write"`
	Refusal string `json:"refusal,omitempty"`
}

// WriteResult answers a policy or declaration write: the action recorded,
// or with ?validate=1 only whether the value is valid. Warnings are the
// catalog governance's (registry/taxonomy): they never refuse.
type WriteResult struct {
	Valid    bool               `json:"valid"`
	Key      string             `json:"key"`
	Warnings []taxonomy.Warning `json:"warnings"`
	Action   *Action            `json:"action,omitempty"`
}

// mayWrite says whether id may change the policy and the declarations: an
// operator with auth on, anyone with auth off under --http-admin.
func (c *Console) mayWrite(id *Identity) (bool, string) {
	if r := c.offReason(id); r != "" {
		return false, strings.Replace(r, "actions are off", "changes are off", 1)
	}
	if id != nil && !id.Operator {
		return false, fmt.Sprintf("only an operator identity (role dispatcher) may change the policy and the declarations; %s is not one", id.Name)
	}
	return true, ""
}

// mayReadPolicy says whether id may read REACH_POLICY (which no agent or
// caller credential may read over NATS either): an operator with auth on.
func mayReadPolicy(id *Identity) (bool, string) {
	if id != nil && !id.Operator {
		return false, fmt.Sprintf("only an operator identity (role dispatcher) reads the policy; %s is not one", id.Name)
	}
	return true, ""
}

// hidden reports whether key is not the console's: the identity directory
// (`agentreach auth` writes it).
func hidden(key string) bool { return strings.HasPrefix(key, auth.PolicyIdentityPrefix) }

func (c *Console) policyList(w http.ResponseWriter, r *http.Request) {
	id, e := c.who(r)
	if e != nil {
		writeError(w, r, e)
		return
	}
	if ok, why := mayReadPolicy(id); !ok {
		writeError(w, r, streams.NewError(streams.CodeUnauthorized, "%s", why))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	kv, err := c.cfg.JS.KeyValue(ctx, streams.BucketPolicy)
	var list []registry.PolicyEntry
	if err == nil {
		list, err = registry.ListPolicy(ctx, kv)
	}
	if err != nil {
		writeError(w, r, streams.NewError(streams.CodeInternal, "list %s: %v", streams.BucketPolicy, err))
		return
	}
	out := PolicyListing{Keys: []PolicyKey{}}
	out.Write, out.Refusal = c.mayWrite(id)
	for _, p := range list {
		if hidden(p.Key) {
			continue
		}
		k := PolicyKey{Key: p.Key, Revision: p.Revision, Updated: p.Updated.UTC(), Value: p.Value.JSON}
		if p.Err != nil {
			k.Value, k.Error, k.Raw = nil, p.Err.Error(), string(p.Raw)
		}
		out.Keys = append(out.Keys, k)
	}
	writeJSON(w, http.StatusOK, out)
}

// begin does what every write does first: the console header, who sends
// it, whether it may (a validation only needs an identity), and its body.
// ok false: answered already.
func (c *Console) begin(w http.ResponseWriter, r *http.Request) (id *Identity, edit Edit, validateOnly, ok bool) {
	if r.Header.Get(HeaderConsole) != "1" {
		writeJSON(w, http.StatusForbidden, streams.NewError(streams.CodeUnauthorized,
			"a change needs the header %s: 1 (the page sends it; a form on another site cannot)", HeaderConsole))
		return nil, Edit{}, false, false
	}
	id, e := c.who(r)
	if e != nil {
		writeError(w, r, e)
		return nil, Edit{}, false, false
	}
	validateOnly = r.URL.Query().Get("validate") == "1"
	if !validateOnly {
		if may, why := c.mayWrite(id); !may {
			c.cfg.Log.Warn().Str("by", by(id)).Str("path", r.URL.Path).Str("reason", why).Msg("console change refused")
			writeJSON(w, http.StatusForbidden, streams.NewError(streams.CodeUnauthorized, "%s", why))
			return nil, Edit{}, false, false
		}
	}
	body := http.MaxBytesReader(w, r.Body, MaxEditSize)
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(body); err != nil {
		writeError(w, r, streams.NewError(streams.CodeBadRequest, "body: %v", err))
		return nil, Edit{}, false, false
	}
	if edit, e = DecodeEdit(buf.Bytes()); e != nil {
		writeError(w, r, e)
		return nil, Edit{}, false, false
	}
	return id, edit, validateOnly, true
}

func (c *Console) policyPut(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	id, edit, validateOnly, ok := c.begin(w, r)
	if !ok {
		return
	}
	if hidden(key) {
		writeJSON(w, http.StatusForbidden, streams.NewError(streams.CodeUnauthorized,
			"%s: the identity directory is written by `agentreach auth`, not from the console", clip(key)))
		return
	}
	if err := policy.ValidateKey(key); err != nil {
		writeError(w, r, streams.NewError(streams.CodeBadRequest, "%v", err))
		return
	}
	v, err := policy.Parse(key, []byte(edit.Value))
	if err != nil {
		writeError(w, r, streams.NewError(streams.CodeBadRequest, "%v", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	out := WriteResult{Valid: true, Key: key, Warnings: []taxonomy.Warning{}}
	if tx, ok := v.Decoded.(*taxonomy.Taxonomy); ok {
		// A new taxonomy: what in the catalog would be outside it.
		names, _ := c.catalogNames(ctx, "")
		out.Warnings = outsideOnly(taxonomy.Check(tx, names, nil))
	}
	if validateOnly {
		writeJSON(w, http.StatusOK, out)
		return
	}
	kv, err := c.cfg.JS.KeyValue(ctx, streams.BucketPolicy)
	var rev uint64
	if err == nil {
		if edit.Revision != nil {
			rev, err = registry.UpdatePolicy(ctx, kv, key, []byte(edit.Value), *edit.Revision)
		} else {
			rev, err = registry.PutPolicy(ctx, kv, key, []byte(edit.Value))
		}
	}
	if err != nil {
		writeError(w, r, writeFailure(streams.BucketPolicy, key, edit.Revision, err))
		return
	}
	a := Action{Time: time.Now().UTC(), By: by(id), Stream: StreamPolicy, Action: ActionPut, Key: key, Revision: rev}
	c.record(a)
	out.Action = &a
	writeJSON(w, http.StatusOK, out)
}

// outsideOnly keeps the warnings of capabilities outside the taxonomy.
func outsideOnly(ws []taxonomy.Warning) []taxonomy.Warning {
	out := []taxonomy.Warning{}
	for _, w := range ws {
		if w.Kind == taxonomy.KindOutside {
			out = append(out, w)
		}
	}
	return out
}

// writeFailure is the error of a failed write: CONFLICT when the value
// changed since the revision the page read, else INTERNAL.
func writeFailure(bucket, key string, revision *uint64, err error) *streams.Error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, policy.ErrInvalid), errors.Is(err, declare.ErrInvalidDeclaration):
		return streams.NewError(streams.CodeBadRequest, "%v", err)
	case revision != nil && (errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence):
		if *revision == 0 {
			return streams.NewError(CodeConflict, "%s: someone stored it meanwhile; reload and edit again (nothing was written)", key)
		}
		return streams.NewError(CodeConflict, "%s changed since revision %d; reload and edit again (nothing was written)", key, *revision)
	}
	return streams.NewError(streams.CodeInternal, "write %s %s: %v", bucket, key, err)
}
