package streams_test

import (
	"errors"
	"fmt"

	"github.com/agent-reach/agentreach/streams"
)

func ExampleEncode() {
	b, _ := streams.Encode(streams.ContentTypeJSON, map[string]string{"text": "hi"})
	var back map[string]string
	_ = streams.Decode(streams.ContentTypeJSON, b, &back)
	fmt.Println(string(b), back["text"])
	// Output: {"text":"hi"} hi
}

func ExampleCodeOf() {
	err := fmt.Errorf("calling inventory: %w", streams.NewError(streams.CodeTargetBusy, "all slots taken"))
	fmt.Println(streams.CodeOf(err), streams.CodeOf(err).Retryable(), errors.Is(err, streams.ErrTargetBusy))
	// Output: TARGET_BUSY true true
}
