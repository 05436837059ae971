package envelope

// RemoveDeadLetter returns body without its top-level "dead_letter" member (every
// occurrence, when the name repeats), with the comma that separated it. Every other
// byte is kept. A body without the member comes back unchanged. body must be one
// valid JSON object (ErrNotObject).
func RemoveDeadLetter(body []byte) ([]byte, error) {
	var buf [memberBuf]member
	members, _, err := editable(body, buf[:0])
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body))
	last := 0
	for i := range members {
		m := &members[i]
		if !m.keyIs(body, "dead_letter") {
			continue
		}
		var from, to int
		switch {
		case i > 0: // drop `,"dead_letter":{...}` from the end of the previous value
			from, to = members[i-1].valEnd, m.valEnd
		case len(members) > 1: // first member: drop `"dead_letter":{...},` up to the next key
			from, to = m.keyStart-1, members[1].keyStart-1
		default:
			from, to = m.keyStart-1, m.valEnd
		}
		from = max(from, last)
		out = append(out, body[last:from]...)
		last = to
	}
	return append(out, body[last:]...), nil
}
