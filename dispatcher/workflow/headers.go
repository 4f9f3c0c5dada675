package workflow

import "github.com/agent-reach/agentreach/streams"

// HeaderParams overrides a workflow's params for one call: a JSON object
// of names and values, {"threshold": 5000}. Each name must be a declared
// parameter, each value of its default's JSON type (any type where the
// default is null); otherwise the run is refused with BAD_REQUEST naming
// it. Parameters not named keep their defaults.
const HeaderParams = "Reach-Params"

// HeaderRunID is streams.HeaderRunID, on a workflow's answer: its run id,
// the request id of the call that started it.
const HeaderRunID = streams.HeaderRunID
