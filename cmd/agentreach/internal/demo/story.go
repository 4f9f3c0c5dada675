package demo

import (
	"context"
	"strings"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/streams"
)

// storyText is what the story agent tells, a word at a time.
const storyText = "Once upon a time a caller asked an agent for a story, and the agent, " +
	"like every model that thinks in tokens, answered one word after another; " +
	"the dispatcher passed each word on the moment it came, so the caller read " +
	"the beginning while the end was still being written. The end."

// StoryInput is the story agent's payload: how many words (default all of
// them) and the pause before each, in ms (default 60, at most 2000).
type StoryInput struct {
	Words   int `json:"words"`
	DelayMS int `json:"delay_ms"`
}

// story streams its text a word at a time, like an LLM streaming tokens
// (docs/protocol.md, Streaming results): each word is a chunk, and the
// result is the whole text, so a caller that did not ask for a stream gets
// it at once at the end.
func story(ctx context.Context, req *agentkit.Request, in StoryInput) (string, error) {
	words := strings.Fields(storyText)
	if in.Words < 0 || in.DelayMS < 0 || in.DelayMS > 2000 {
		return "", agentkit.BadRequest("words must not be negative, delay_ms from 0 to 2000")
	}
	if in.Words > 0 && in.Words < len(words) {
		words = words[:in.Words]
	}
	delay := 60 * time.Millisecond
	if in.DelayMS > 0 {
		delay = time.Duration(in.DelayMS) * time.Millisecond
	}
	for i, w := range words {
		if i > 0 {
			w = " " + w
		}
		if err := sleep(ctx, delay); err != nil {
			return "", err
		}
		if err := req.Send(ctx, w); err != nil {
			return "", streams.NewError(streams.CodeCancelled, "story: %v", err)
		}
	}
	return strings.Join(words, " "), nil
}
