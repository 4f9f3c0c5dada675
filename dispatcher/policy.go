package dispatcher

// Quorum returns the completion policy REACH_POLICY gives broadcasts of
// capability ("quorum": a fraction below 1 or a count), if it gives one.
func (d *Dispatcher) Quorum(capability string) (float64, bool) {
	if q := d.eng.Policy(capability).Quorum; q != nil {
		return *q, true
	}
	return 0, false
}
