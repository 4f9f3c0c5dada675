package mcp

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// NATSSource is a Source for a process beside no dispatcher (`agentreach
// mcp` on stdio): it follows REACH_AGENTS, REACH_CAPS and REACH_POLICY
// itself and calls through the dispatchers over NATS with an
// agentkit.Client (a call whose context ends early is cancelled on
// reach.cancel). Its connection's identity must be able to read those
// buckets. Close it after the Server.
type NATSSource struct {
	client   *agentkit.Client
	table    *registry.Table
	catalog  *registry.Catalog
	policies *registry.PolicyWatcher
	checked  bool
}

// NewNATSSource starts following the registry over nc and calls through
// client. With acl set (auth on) the ACL in REACH_POLICY filters the tools.
func NewNATSSource(ctx context.Context, nc *nats.Conn, client *agentkit.Client, acl bool, log zerolog.Logger) (_ *NATSSource, err error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s := &NATSSource{client: client, checked: acl}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	reg, err := registry.Open(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("reading the registry (this identity needs read access to %s): %w", streams.BucketAgents, err)
	}
	s.table = registry.NewTable(reg, registry.WithLogger(log))
	if err := s.table.Start(ctx); err != nil {
		return nil, fmt.Errorf("following %s: %w", streams.BucketAgents, err)
	}
	if s.catalog, err = registry.NewCatalog(ctx, js, registry.WatchLogger(log)); err == nil {
		err = s.catalog.Start(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("following %s: %w", streams.BucketCaps, err)
	}
	if acl {
		if s.policies, err = registry.NewPolicyWatcher(ctx, js, registry.WatchLogger(log)); err == nil {
			err = s.policies.Start(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("following %s: %w", streams.BucketPolicy, err)
		}
	}
	return s, nil
}

// Close stops following the registry.
func (s *NATSSource) Close() {
	if s.table != nil {
		s.table.Close()
	}
	if s.catalog != nil {
		s.catalog.Close()
	}
	if s.policies != nil {
		s.policies.Close()
	}
}

// Offers implements Source.
func (s *NATSSource) Offers() []Offer { return offers(s.table, s.catalog) }

// ACL implements Source.
func (s *NATSSource) ACL() *policy.ACL {
	if !s.checked {
		return nil
	}
	if acl := aclOf(s.policies.Current()); acl != nil {
		return acl
	}
	return &policy.ACL{}
}

// Changed implements Source.
func (s *NATSSource) Changed() []<-chan struct{} {
	out := []<-chan struct{}{s.table.Changed(), s.catalog.Changed()}
	if s.policies != nil {
		out = append(out, s.policies.Changed())
	}
	return out
}

// Call implements Source: a call over NATS as the client's identity (the
// task's Reach-Source is the client's, not the task's).
func (s *NATSSource) Call(ctx context.Context, capability string, task *nats.Msg) *nats.Msg {
	res, err := s.client.Call(ctx, capability, task.Data, callOptions(task)...)
	return replyOf(res, err)
}

// Stream implements Streamer: Client.Stream over NATS, each chunk given
// to each with its Reach-Seq and content type.
func (s *NATSSource) Stream(ctx context.Context, capability string, task *nats.Msg, each func(chunk *nats.Msg)) *nats.Msg {
	for res, err := range s.client.Stream(ctx, capability, task.Data, callOptions(task)...) {
		if err == nil && res.Status == streams.StatusChunk {
			each(messageOf(res))
			continue
		}
		return replyOf(res, err)
	}
	return replyOf(nil, streams.NewError(streams.CodeInternal, "the stream of %s ended without a reply", capability))
}

// callOptions carries the task's request id, idempotency key and content
// type onto a client call.
func callOptions(task *nats.Msg) []agentkit.CallOption {
	var opts []agentkit.CallOption
	for _, h := range []string{streams.HeaderRequestID, streams.HeaderIdempotencyKey, streams.HeaderContentType} {
		if v := task.Header.Get(h); v != "" {
			opts = append(opts, agentkit.WithHeader(h, v))
		}
	}
	return opts
}

// replyOf is the reply of a client call: its result, or an error reply
// (a context that ended is CANCELLED or DEADLINE_EXCEEDED).
func replyOf(res *agentkit.Result, err error) *nats.Msg {
	if err != nil {
		e := streams.AsError(err)
		if errors.Is(err, context.Canceled) {
			e = streams.NewError(streams.CodeCancelled, "the caller stopped waiting")
		} else if errors.Is(err, context.DeadlineExceeded) {
			e = streams.NewError(streams.CodeDeadlineExceeded, "the caller stopped waiting")
		}
		m := &nats.Msg{Header: nats.Header{}, Data: streams.ErrorBody(streams.ContentTypeJSON, e)}
		m.Header.Set(streams.HeaderError, string(e.Code))
		m.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
		return m
	}
	return messageOf(res)
}

// messageOf is a client result as a message, its content type set.
func messageOf(res *agentkit.Result) *nats.Msg {
	m := &nats.Msg{Header: res.Header, Data: res.Data}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(streams.HeaderContentType, res.ContentType)
	return m
}
