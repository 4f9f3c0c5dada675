package kvwatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

// ErrDirectUnsupported is ListDirect's error when the bucket's stream
// cannot answer a batched direct get: no replica serves direct gets, the
// server predates them, or the bucket holds more keys than one answer
// carries. A caller falls back to a watcher.
var ErrDirectUnsupported = errors.New("kvwatch: no batched direct get for this bucket")

// directTimeout bounds a ListDirect whose ctx has no deadline.
const directTimeout = 5 * time.Second

// Listing is a bucket's live keys as ListDirect read them, and the last
// sequence of the replica that answered (0 for an empty bucket): how
// current the answer is.
type Listing struct {
	Entries map[string]jetstream.KeyValueEntry
	LastSeq uint64
}

// ListDirect reads the last value of every key of bucket by one batched
// direct get ($JS.API.DIRECT.GET.KV_<bucket> with multi_last). Any replica
// of the bucket's stream that serves direct gets answers it, the one on the
// connected server first: unlike a watcher (a consumer, created by the
// JetStream meta leader) or a stream info (answered by the stream's
// leader), it needs no leader, so it answers while an election is under
// way. A replica that was cut off answers with what it held; LastSeq tells
// how current that is. Deleted and expired keys are left out.
func ListDirect(ctx context.Context, js jetstream.JetStream, bucket string) (Listing, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, directTimeout)
		defer cancel()
	}
	nc := js.Conn()
	pre := "$KV." + bucket + "."
	req, err := json.Marshal(map[string]any{"multi_last": []string{pre + ">"}})
	if err != nil {
		return Listing{}, err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return Listing{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(streams.APIPrefix(js)+"DIRECT.GET.KV_"+bucket, inbox, req); err != nil {
		return Listing{}, err
	}
	l := Listing{Entries: map[string]jetstream.KeyValueEntry{}}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if errors.Is(err, nats.ErrNoResponders) {
			return Listing{}, fmt.Errorf("%w: %v", ErrDirectUnsupported, err)
		}
		if err != nil {
			return Listing{}, fmt.Errorf("direct listing of %s: %w", bucket, err)
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "204": // the end of the batch
			if n := m.Header.Get("Nats-Num-Pending"); n != "" && n != "0" {
				return Listing{}, fmt.Errorf("%w: %s keys left unsent", ErrDirectUnsupported, n)
			}
			if seq, err := strconv.ParseUint(m.Header.Get("Nats-UpTo-Sequence"), 10, 64); err == nil {
				l.LastSeq = max(l.LastSeq, seq)
			}
			return l, nil
		case "404":
			if m.Header.Get("Description") == "No Results" { // no key at all
				return l, nil
			}
			return Listing{}, fmt.Errorf("direct listing of %s: %s %s", bucket, status, m.Header.Get("Description"))
		case "503":
			return Listing{}, fmt.Errorf("%w: %v", ErrDirectUnsupported, nats.ErrNoResponders)
		case "408":
			return Listing{}, fmt.Errorf("direct listing of %s: %s %s", bucket, status, m.Header.Get("Description"))
		default:
			return Listing{}, fmt.Errorf("%w: %s %s", ErrDirectUnsupported, status, m.Header.Get("Description"))
		}
		e, err := directEntry(bucket, pre, m)
		if err != nil {
			return Listing{}, err
		}
		l.LastSeq = max(l.LastSeq, e.revision)
		if e.op == jetstream.KeyValuePut {
			l.Entries[e.key] = e
		}
	}
}

// directEntry decodes one message of a batched direct get.
func directEntry(bucket, pre string, m *nats.Msg) (*entry, error) {
	subj := m.Header.Get(jetstream.SubjectHeader)
	key, ok := strings.CutPrefix(subj, pre)
	if !ok || key == "" {
		return nil, fmt.Errorf("direct listing of %s: an answer for subject %q", bucket, subj)
	}
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("direct listing of %s: sequence of %s: %w", bucket, key, err)
	}
	at, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("direct listing of %s: time of %s: %w", bucket, key, err)
	}
	e := &entry{bucket: bucket, key: key, value: m.Data, revision: seq, created: at, op: jetstream.KeyValuePut}
	switch m.Header.Get("KV-Operation") {
	case "DEL":
		e.op = jetstream.KeyValueDelete
	case "PURGE":
		e.op = jetstream.KeyValuePurge
	case "":
		switch m.Header.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge":
			e.op = jetstream.KeyValuePurge
		case "Remove":
			e.op = jetstream.KeyValueDelete
		}
	}
	return e, nil
}

// entry is a jetstream.KeyValueEntry read by ListDirect.
type entry struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
	op          jetstream.KeyValueOp
}

func (e *entry) Bucket() string                  { return e.bucket }
func (e *entry) Key() string                     { return e.key }
func (e *entry) Value() []byte                   { return e.value }
func (e *entry) Revision() uint64                { return e.revision }
func (e *entry) Created() time.Time              { return e.created }
func (e *entry) Delta() uint64                   { return 0 }
func (e *entry) Operation() jetstream.KeyValueOp { return e.op }
