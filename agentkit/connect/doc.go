// Package connect joins things that are not Agent-Reach agents as agents:
// an MCP server (its tools become capabilities, [MCP]) and an HTTP API
// described by OpenAPI (its operations become capabilities, [OpenAPI]).
//
// A connector is an ordinary agentkit agent: it registers, heartbeats,
// declares its capabilities in REACH_CAPS and drains like any other, so
// several connector processes for one upstream are several instances with
// load balancing, breakers, retries and hedging for the read-only ones.
//
// Names. An upstream name (a tool, an operationId) becomes the capability
// <name>.<mapped>, where mapped is the upstream name with each upper-case
// letter that follows a lower-case letter or digit preceded by '_', every
// letter lower-cased, and every character other than [a-z0-9_.-] written as
// '_' ("getWeather" → "get_weather", "files/read" → "files_read"). A name
// that maps to nothing valid, or onto the capability of another upstream
// name, is skipped with a logged reason; so are names given twice and tools
// whose schemas do not compile. The rest are served.
package connect
