package envelope

import "time"

// CreatedAt reads meta.created_at of body: when the envelope was made. ok is false
// when body is not an envelope or has no positive created_at. Drivers use it to tell
// the age of a message where the broker keeps no time of its own.
func CreatedAt(body []byte) (t time.Time, ok bool) {
	e, err := Decode(body)
	if err != nil || e.Meta.CreatedAt <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(e.Meta.CreatedAt), true
}
