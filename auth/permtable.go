package auth

import (
	"fmt"
	"strings"

	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// Placeholders PermissionsTable writes for names.
const (
	tableName       = "<name>"
	tableType       = "<type>"
	tableCapability = "<capability>"
)

// PermissionsTable returns what Permissions gives each role, as a markdown
// table: an agent <name> of type <type>, a caller <name>, a dispatcher
// <name> and a leaf link <leaf> carrying the agent (with a dispatcher
// identity <dispatcher>), the ACL granting <name>
// the pattern <capability>. docs/security.md
// carries it, regenerated from this code (TestSecurityDocPermissionTable).
func PermissionsTable(subjects streams.Subjects) string {
	acl := &policy.ACL{Rules: []policy.ACLRule{{Caller: tableName, MayCall: []string{tableCapability}}}}
	var b strings.Builder
	b.WriteString("| role | may publish | may not publish | may subscribe | may answer what it received |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, r := range Roles() {
		id := Identity{Name: tableName, Role: r}
		label := string(r) + " `" + tableName + "`"
		if r == RoleAgent {
			id.Type = tableType
			label += " of type `" + tableType + "`"
		}
		p := Permissions(id, acl, subjects)
		if r == RoleLeaf {
			label = string(r) + " `<leaf>` carrying agent `" + tableName + "` of type `" + tableType + "`"
			id.Name, id.Carries = "<leaf>", []string{tableName}
			agent := Identity{Name: tableName, Role: RoleAgent, Type: tableType}
			dispatcher := Identity{Name: "<dispatcher>", Role: RoleDispatcher}
			p = LeafPermissions(id, []Identity{agent, dispatcher}, acl, subjects)
		}
		resp := "no"
		if p.Resp != nil {
			resp = fmt.Sprintf("up to %d messages within %v of each", p.Resp.MaxMsgs, p.Resp.Expires)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", label, subjectList(p.Pub.Allow), subjectList(p.Pub.Deny),
			subjectList(p.Sub.Allow), resp)
	}
	return b.String()
}

// subjectList writes subjects one a line in a table cell.
func subjectList(subjects []string) string {
	if len(subjects) == 0 {
		return "—"
	}
	quoted := make([]string, len(subjects))
	for i, s := range subjects {
		quoted[i] = "`" + s + "`"
	}
	return strings.Join(quoted, "<br>")
}
