package gateway

import "errors"

// ErrInvalidConfig is returned by New for a Config out of range or a nil
// connection or dispatcher.
var ErrInvalidConfig = errors.New("gateway: invalid config")

// HTTP-level error codes, beside the wire codes (streams.Code), in the
// {"code", "message"} body of an error response.
const (
	// CodeNotFound: no route for the path, or no result recorded for a
	// request id.
	CodeNotFound = "NOT_FOUND"
	// CodeMethodNotAllowed: the path exists, not with this method.
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	// CodeMisdirected: the request's Host does not name the gateway
	// (Config.Hosts); answered with 421 Misdirected Request.
	CodeMisdirected = "MISDIRECTED_REQUEST"
)
