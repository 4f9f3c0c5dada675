package eventstats

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// APISummary is the inspection verb (reach.api.summary) on which every
// replica that follows REACH_EVENTS answers its Summary. The request body
// is empty (by capability over the whole window) or a Query in JSON.
const APISummary = "summary"

// Query asks for a Summary: by a dimension ("" for capability), over the
// last Since (a duration such as "15m"; "" for the whole window).
type Query struct {
	By    string `json:"by,omitempty"`
	Since string `json:"since,omitempty"`
}

// Parse checks q and returns what it asks for.
func (q Query) Parse() (Dimension, time.Duration, error) {
	by := ByCapability
	if q.By != "" {
		d, err := ParseDimension(q.By)
		if err != nil {
			return "", 0, err
		}
		by = d
	}
	var since time.Duration
	if q.Since != "" {
		d, err := time.ParseDuration(q.Since)
		if err != nil || d <= 0 {
			return "", 0, fmt.Errorf("%w: since %q: want a positive duration such as 15m or 1h", ErrInvalidQuery, q.Since)
		}
		since = d
	}
	return by, since, nil
}

// Answer returns the Summary q asks for, or a BAD_REQUEST naming what is
// wrong with it.
func (a *Aggregator) Answer(q Query) (*Summary, *streams.Error) {
	by, since, err := q.Parse()
	if err == nil {
		var s *Summary
		if s, err = a.Summary(by, since); err == nil {
			return s, nil
		}
	}
	return nil, streams.NewError(streams.CodeBadRequest, "%v", err)
}

// ServeAPI answers reach.api.summary on nc from a until the returned
// subscription is unsubscribed.
func ServeAPI(nc *nats.Conn, subjects streams.Subjects, a *Aggregator) (*nats.Subscription, error) {
	return nc.Subscribe(subjects.API(APISummary), func(m *nats.Msg) {
		var q Query
		if len(m.Data) > 0 {
			if err := json.Unmarshal(m.Data, &q); err != nil {
				_ = m.RespondMsg(streams.ErrorReply(m.Reply, streams.ContentTypeJSON, "",
					streams.NewError(streams.CodeBadRequest, "summary query: %v", err)))
				return
			}
		}
		s, e := a.Answer(q)
		if e != nil {
			_ = m.RespondMsg(streams.ErrorReply(m.Reply, streams.ContentTypeJSON, "", e))
			return
		}
		b, _ := json.Marshal(s)
		_ = m.Respond(b)
	})
}
