package task

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/streams"
)

// StreamChunk is one line of `agentreach call --stream --json`: a chunk's
// sequence number and body, before the final CallOutput line.
type StreamChunk struct {
	Seq   string          `json:"seq"`
	Chunk json.RawMessage `json:"chunk"`
}

// streamCall is `call --stream`: it asks for the result as a stream
// (Reach-Stream: 1) and prints each chunk as it comes — a JSON string's
// text as it is, any other JSON value on a line of its own — then a
// newline and the metadata on stderr; with asJSON, one StreamChunk line
// per chunk, then the CallOutput line. An agent that does not stream
// prints its result as call does.
func streamCall(ctx context.Context, c *agentkit.Client, capability string, payload []byte, opts []agentkit.CallOption,
	stdout, stderr io.Writer, requestID string, asJSON bool, explain func(error) error) int {
	chunks := 0
	for res, err := range c.Stream(ctx, capability, payload, opts...) {
		if err != nil || res.Status != streams.StatusChunk {
			if chunks > 0 && !asJSON {
				fmt.Fprintln(stdout) // the text streamed so far ends its line
				if err == nil {      // the result is the chunks, printed already
					printMeta(stderr, &cli.CallMeta{Status: string(res.Status), Node: res.Node, Attempt: res.Attempt,
						RequestID: res.RequestID, OrchestrationID: res.OrchestrationID, Cost: res.Cost})
					return cli.ExitOK
				}
			}
			return printResult(stdout, stderr, res, explain(err), requestID, asJSON)
		}
		chunks++
		body := bodyJSON(res.ContentType, res.Data)
		switch {
		case asJSON:
			b, _ := json.Marshal(StreamChunk{Seq: res.Header.Get(streams.HeaderSeq), Chunk: body})
			fmt.Fprintf(stdout, "%s\n", b)
		default:
			var text string
			if json.Unmarshal(body, &text) == nil {
				fmt.Fprint(stdout, text)
			} else {
				fmt.Fprintf(stdout, "%s\n", body)
			}
		}
	}
	return cli.ExitOK
}
