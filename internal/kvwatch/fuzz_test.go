package kvwatch

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FuzzDirectEntry feeds directEntry the headers of a direct get's answer as
// a server (or anything answering on its subject) may send them: it never
// panics, and an entry it returns belongs to the bucket, has a key, and is
// a put only without a delete or purge header.
func FuzzDirectEntry(f *testing.F) {
	f.Add("$KV.B.a", "7", "2026-12-02T08:00:00.123456789Z", "", "", []byte("v"))
	f.Add("$KV.B.a.b", "1", "2026-12-02T08:00:00Z", "DEL", "", []byte(nil))
	f.Add("$KV.B.x", "18446744073709551615", "2026-12-02T08:00:00Z", "", "MaxAge", []byte(nil))
	f.Add("$KV.C.a", "x", "yesterday", "PURGE", "Remove", []byte("{}"))
	f.Fuzz(func(t *testing.T, subj, seq, ts, op, marker string, data []byte) {
		m := &nats.Msg{Header: nats.Header{}, Data: data}
		m.Header.Set(jetstream.SubjectHeader, subj)
		m.Header.Set(jetstream.SequenceHeader, seq)
		m.Header.Set(jetstream.TimeStampHeaer, ts)
		if op != "" {
			m.Header.Set("KV-Operation", op)
		}
		if marker != "" {
			m.Header.Set(jetstream.MarkerReasonHeader, marker)
		}
		e, err := directEntry("B", "$KV.B.", m)
		if err != nil {
			return
		}
		if e.Key() == "" || !strings.HasPrefix(subj, "$KV.B."+e.Key()) || e.Bucket() != "B" {
			t.Fatalf("entry %q of bucket %q from subject %q", e.Key(), e.Bucket(), subj)
		}
		if e.Operation() == jetstream.KeyValuePut && (op == "DEL" || op == "PURGE") {
			t.Fatalf("a put from operation %q", op)
		}
	})
}
