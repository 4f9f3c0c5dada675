package registry

import (
	"fmt"
	"strings"
)

// problems collects validation problems, each prefixed with its path.
type problems struct{ list []string }

// maxProblems bounds how many problems one error lists.
const maxProblems = 20

func (p *problems) add(path, format string, args ...any) {
	p.list = append(p.list, path+": "+fmt.Sprintf(format, args...))
}

// err returns nil without problems, else one error wrapping sentinel
// that lists them after subject (when not empty).
func (p *problems) err(sentinel error, subject string) error {
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
