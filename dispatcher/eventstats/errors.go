package eventstats

import "errors"

// ErrInvalidQuery is returned for a Query that names an unknown dimension
// or a window the Aggregator does not hold.
var ErrInvalidQuery = errors.New("eventstats: invalid query")
