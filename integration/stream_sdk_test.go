package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/streams"
)

// storyHandler streams n words with Request.Send and returns the text.
func storyHandler(n int, cancelled chan<- struct{}) agentkit.Handler {
	return func(ctx context.Context, r *agentkit.Request) (any, error) {
		var all []string
		for i := 1; i <= n; i++ {
			w := fmt.Sprintf("w%d", i)
			if err := r.Send(ctx, w); err != nil {
				if cancelled != nil {
					<-ctx.Done()
					cancelled <- struct{}{}
				}
				return nil, err
			}
			all = append(all, w)
			if cancelled != nil && i == 2 {
				<-ctx.Done() // waits for the reader to go
				cancelled <- struct{}{}
				return nil, ctx.Err()
			}
		}
		return strings.Join(all, " "), nil
	}
}

func TestTheGoSDKStreamsEndToEnd(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{Type: "story", ID: "story-1"}, map[string]agentkit.Handler{"story": storyHandler(10, nil)})
	WaitRoutable(t, "story", 1, d)
	c := st.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var chunks []string
	var final *agentkit.Result
	for res, err := range c.Stream(ctx, "story", map[string]string{}) {
		if err != nil {
			t.Fatal(err)
		}
		if res.Status == streams.StatusChunk {
			var w string
			if err := res.Decode(&w); err != nil {
				t.Fatal(err)
			}
			chunks = append(chunks, w)
			continue
		}
		final = res
	}
	var text string
	if final == nil || final.Decode(&text) != nil || text != strings.Join(chunks, " ") || len(chunks) != 10 ||
		final.Header.Get(streams.HeaderChunks) != "10" {
		t.Fatalf("chunks %v, final %+v", chunks, final)
	}
	// The control: a plain Call of the same agent gets the whole text alone.
	res, err := c.Call(ctx, "story", map[string]string{})
	if err != nil || res.Decode(&text) != nil || text != strings.Join(chunks, " ") || res.Header.Get(streams.HeaderChunks) != "" {
		t.Fatalf("call: %v %+v", err, res)
	}
}

// A reader that stops reading cancels the task at the agent.
func TestAGoStreamReaderThatStopsCancelsTheAgent(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	cancelled := make(chan struct{}, 1)
	st.Agent(agentkit.Config{Type: "story", ID: "story-1"}, map[string]agentkit.Handler{"story": storyHandler(10, cancelled)})
	WaitRoutable(t, "story", 1, d)
	c := st.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for res, err := range c.Stream(ctx, "story", map[string]string{}) {
		if err != nil {
			t.Fatal(err)
		}
		if res.Status == streams.StatusChunk {
			break // stops after the first chunk
		}
	}
	select {
	case <-cancelled:
	case <-ctx.Done():
		t.Fatal("the agent's handler was not cancelled after its reader stopped")
	}
}
