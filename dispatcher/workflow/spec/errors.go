package spec

import "errors"

// ErrInvalidDefinition wraps every reason a workflow definition is
// refused; the message names the step and the field.
var ErrInvalidDefinition = errors.New("workflow: invalid definition")
