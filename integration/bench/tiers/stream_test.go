package tiers

import (
	"context"
	"testing"

	"github.com/agent-reach/agentreach/integration/bench/harness"
)

// The stream scenario's two paths as Go benchmarks, for a profile of one
// path at a time (go test -bench Stream -cpuprofile): one stream of b.N
// chunks of 32 bytes, and b.N streams of one 64-byte chunk (the time to the
// first chunk), each routed through the dispatcher and to the agent
// directly.

func benchStream(b *testing.B, fn func(b *testing.B, st *streamStack)) {
	_, err := harness.Execute(context.Background(), "stream-bench", harness.Options{Quick: true}, func(r *harness.Run) error {
		st, err := startStream(r)
		if err != nil {
			return err
		}
		defer st.stop()
		fn(b, st)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

func BenchmarkStreamChunks(b *testing.B) {
	for _, c := range []struct {
		name   string
		routed bool
	}{{"routed", true}, {"direct", false}} {
		b.Run(c.name, func(b *testing.B) {
			benchStream(b, func(b *testing.B, st *streamStack) {
				job := mustJSON(streamJob{N: b.N, Size: 32})
				b.ResetTimer()
				if _, _, err := streamOnce(b.Context(), st.nc, c.routed, job); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

func BenchmarkStreamFirstChunk(b *testing.B) {
	for _, c := range []struct {
		name   string
		routed bool
	}{{"routed", true}, {"direct", false}} {
		b.Run(c.name, func(b *testing.B) {
			benchStream(b, func(b *testing.B, st *streamStack) {
				job := mustJSON(streamJob{N: 1, Size: 64})
				b.ResetTimer()
				for range b.N {
					if _, _, err := streamOnce(b.Context(), st.nc, c.routed, job); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
