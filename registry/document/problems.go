package document

import (
	"fmt"
	"strings"
)

// Problems collects the validation problems of a document, each prefixed
// with its path, to report them all in one error. The zero value is empty.
type Problems struct{ list []string }

// maxProblems bounds how many problems one error lists.
const maxProblems = 20

// Add adds the problem at path, its words formatted as by fmt.Sprintf.
func (p *Problems) Add(path, format string, args ...any) {
	p.list = append(p.list, path+": "+fmt.Sprintf(format, args...))
}

// Err returns nil without problems, else one error wrapping sentinel
// that lists them after subject (when not empty).
func (p *Problems) Err(sentinel error, subject string) error {
	if len(p.list) == 0 {
		return nil
	}
	list := p.list
	more := ""
	if len(list) > maxProblems {
		list, more = list[:maxProblems], fmt.Sprintf("; and %d more", len(list)-maxProblems)
	}
	if subject != "" {
		subject += ": "
	}
	return fmt.Errorf("%w: %s%s%s", sentinel, subject, strings.Join(list, "; "), more)
}
