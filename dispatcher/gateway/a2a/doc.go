// Package a2a serves the gateway's agents over A2A 1.0 (the Agent2Agent
// protocol, JSON-RPC binding; docs/a2a.md): an AgentCard per agent type at
// /a2a/{type}/.well-known/agent-card.json, one for the gateway itself at
// /.well-known/agent-card.json, and the JSON-RPC methods at /a2a/{type}
// (and /a2a, where the message names its skill).
//
// It is a thin edge over the dispatcher, never a second routing engine:
// SendMessage is a routed call (Dispatcher.Call) as the caller's identity,
// with its data part as the payload (a text part becomes {"text": …});
// its outcome is an A2A task whose state comes from the reply's code.
// Cards are generated from the live routing table and the declarations
// on every request, never stored or rewritten.
//
// The JSON types are those of the A2A 1.0 specification's protobuf
// definition in its JSON form (camelCase names, enums by their full
// names: TASK_STATE_COMPLETED, ROLE_AGENT), checked against the official
// Python client (a2a-sdk 1.3.0).
package a2a
