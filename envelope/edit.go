package envelope

import "strconv"

// editSpans is where Decode found what a settlement rewrites in a received body: the
// values of the top-level "attempts" and "dead_letter" members and the closing brace.
// With them the body of a retry or a dead letter is written without scanning the
// body a second time.
type editSpans struct {
	decoded  bool // recorded by Decode
	close    int  // the top-level closing brace
	members  int  // top-level members
	attempts span
	// deadLetter is the top-level "dead_letter" member's value.
	deadLetter span
}

// span is the value of a top-level member, and how many times its name occurs.
type span struct {
	start, end int
	count      int
}

// add records one more occurrence of a member.
func (s span) add(m *member) span {
	return span{start: m.valStart, end: m.valEnd, count: s.count + 1}
}

// RetryBody is the body of this envelope's retry: the bytes it was decoded from
// with the top-level "attempts" value set to attempts, the same bytes as
// SetAttempts(e.Raw(), attempts). For an envelope that Decode returned it does not
// scan the body again. attempts must not be negative.
func (e *Envelope) RetryBody(attempts int) ([]byte, error) {
	if out, ok := e.edited(true, attempts, nil); ok {
		return out, nil
	}
	return SetAttempts(e.raw, attempts)
}

// DeadLetterBody is the body of this envelope's dead letter: the bytes it was
// decoded from with a "dead_letter" member holding dl, and the top-level "attempts"
// set to dl.Attempts when it differs from e.Attempts (the body records the attempts
// made, as its dead_letter block does). The same bytes as AppendDeadLetter, after
// SetAttempts when the attempts differ, on e.Raw(). For an envelope that Decode
// returned it does not scan the body again.
func (e *Envelope) DeadLetterBody(dl DeadLetter) ([]byte, error) {
	setAttempts := dl.Attempts != e.Attempts
	if out, ok := e.edited(setAttempts, dl.Attempts, &dl); ok {
		return out, nil
	}
	body := e.raw
	if setAttempts {
		var err error
		if body, err = SetAttempts(body, dl.Attempts); err != nil {
			return nil, err
		}
	}
	return AppendDeadLetter(body, dl)
}

// edited writes e.raw with the attempts value replaced or inserted (when
// setAttempts) and then the dead_letter value replaced or inserted (when dl is not
// nil), from the spans Decode recorded: what replaceOrAppend does for each edit in
// turn. ok is false when it cannot: an envelope Decode did not return, a member
// named twice (replaceOrAppend replaces every occurrence), a negative attempts.
func (e *Envelope) edited(setAttempts bool, attempts int, dl *DeadLetter) (out []byte, ok bool) {
	s := &e.spans
	if !s.decoded || s.attempts.count > 1 || s.deadLetter.count > 1 || attempts < 0 {
		return nil, false
	}
	type replacement struct {
		span
		attempts bool // else the dead letter
	}
	var reps [2]replacement
	n := 0
	if setAttempts && s.attempts.count == 1 {
		reps[n] = replacement{s.attempts, true}
		n++
	}
	if dl != nil && s.deadLetter.count == 1 {
		reps[n] = replacement{s.deadLetter, false}
		n++
	}
	if n == 2 && reps[1].start < reps[0].start {
		reps[0], reps[1] = reps[1], reps[0]
	}
	put := func(out []byte, isAttempts bool) []byte {
		if isAttempts {
			return strconv.AppendInt(out, int64(attempts), 10)
		}
		return appendDeadLetter(out, *dl)
	}
	size := len(e.raw) + len(`,"attempts":`) + 20
	if dl != nil {
		size += deadLetterSize(dl)
	}
	out = make([]byte, 0, size)
	last := 0
	for _, r := range reps[:n] {
		out = append(out, e.raw[last:r.start]...)
		out = put(out, r.attempts)
		last = r.end
	}
	out = append(out, e.raw[last:s.close]...)
	members := s.members
	if setAttempts && s.attempts.count == 0 {
		if members > 0 {
			out = append(out, ',')
		}
		out = append(out, `"attempts":`...)
		out = put(out, true)
		members++
	}
	if dl != nil && s.deadLetter.count == 0 {
		if members > 0 {
			out = append(out, ',')
		}
		out = append(out, `"dead_letter":`...)
		out = put(out, false)
	}
	return append(out, e.raw[s.close:]...), true
}

// deadLetterSize is about the length of dl's JSON, so that the body it goes into is
// made once.
func deadLetterSize(dl *DeadLetter) int {
	n := 160 + len(dl.Reason) + len(dl.OriginalQueue) + len(dl.Lang)
	if dl.Error != nil {
		n += len(*dl.Error) + len(*dl.Error)/8
	}
	if dl.Exception != nil {
		n += len(*dl.Exception)
	}
	return n
}
