package workflow

import "github.com/agent-reach/agentreach/streams"

// HeaderRunID is streams.HeaderRunID, on a workflow's answer: its run id,
// the request id of the call that started it.
const HeaderRunID = streams.HeaderRunID
