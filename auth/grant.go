package auth

import (
	"fmt"
	"strings"

	"github.com/agent-reach/agentreach/registry"
)

// maxRecordLog bounds the instances whose refusal the authorizer
// remembers having logged; beyond it it starts afresh (and may log one
// again).
const maxRecordLog = 10000

// CheckRecord implements dispatcher.RecordChecker (registry.RecordFilter):
// an agent record in REACH_AGENTS may be routed only when its id — the key
// only that identity may write (Permissions) — is an agent identity of the
// directory, not revoked, the record's type is that identity's, and every
// capability the record offers is within the identity's grant
// (Identity.Grant: its --serves, or its type and everything under it).
// What an agent puts in its own record or declaration grants it nothing.
//
// A refused record is logged at warn level once per instance and reason
// (not per task, not per heartbeat: the dispatcher asks only when a
// capability's routes are built), and once more when it becomes
// routable again.
func (a *Authorizer) CheckRecord(e *registry.Entry) error {
	err := a.current().checkRecord(e)
	a.logRecord(e, err)
	return err
}

// FilterRevision implements dispatcher.RecordChecker: the REACH_POLICY
// revision the directory was read at. A new one (an identity made,
// revoked, or granted more) has the dispatcher check every record again.
func (a *Authorizer) FilterRevision() uint64 { return a.pol.Current().Revision() }

// checkRecord says why e may not be routed under v, or nil.
func (v *policyView) checkRecord(e *registry.Entry) error {
	id := v.lookup(e.ID)
	switch {
	case id == nil:
		return fmt.Errorf("agent record %s names no identity of the directory", e.ID)
	case !id.Revoked.IsZero():
		return fmt.Errorf("agent record %s names identity %s, revoked", e.ID, e.ID)
	case id.Role != RoleAgent:
		return fmt.Errorf("agent record %s names identity %s, a %s, not an agent", e.ID, e.ID, id.Role)
	case e.Type != id.Type:
		return fmt.Errorf("agent record %s says type %q; its identity is of type %q", e.ID, e.Type, id.Type)
	}
	grant := id.Grant()
	var outside []string
	for _, c := range e.Capabilities {
		if !Grants(grant, c) {
			outside = append(outside, c)
		}
	}
	if len(outside) > 0 {
		return fmt.Errorf("agent record %s offers %s, outside its identity's grant %s (auth grant %s --serves …)",
			e.ID, strings.Join(outside, ", "), strings.Join(grant, ", "), e.ID)
	}
	return nil
}

// logRecord logs a refused record once per instance and reason, and an
// instance whose refusal was logged once when it is admitted again.
func (a *Authorizer) logRecord(e *registry.Entry, err error) {
	a.loggedMu.Lock()
	last, seen := a.records[e.ID]
	switch {
	case err == nil && !seen:
		a.loggedMu.Unlock()
		return
	case err == nil:
		delete(a.records, e.ID)
	case seen && last == err.Error():
		a.loggedMu.Unlock()
		return
	default:
		if len(a.records) >= maxRecordLog {
			clear(a.records)
		}
		a.records[e.ID] = err.Error()
	}
	a.loggedMu.Unlock()
	if err == nil {
		a.log.Info().Str("agent", e.ID).Str("type", e.Type).Strs("capabilities", e.Capabilities).
			Msg("agent record within its identity's grant again: routed")
		return
	}
	a.log.Warn().Str("agent", e.ID).Str("type", e.Type).Strs("capabilities", e.Capabilities).Str("reason", err.Error()).
		Msg("agent record ignored: not routed (logged once per instance)")
}
