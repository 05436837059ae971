package envelope

import "testing"

// TestEditsFromSpans: a decoded envelope's retry and dead-letter bodies are the bytes
// the scanning editors write, for the layouts that matter to the byte-level edits.
func TestEditsFromSpans(t *testing.T) {
	const head = `"job":"urn:babel:a:b","trace_id":"t","data":{"n":1}`
	for name, body := range map[string]string{
		"attempts last":             `{` + head + `,"attempts":2}`,
		"attempts first":            `{"attempts":2,` + head + `}`,
		"no attempts":               `{` + head + `}`,
		"no attempts, spaces":       "{ " + head + " \n}\t ",
		"attempts null":             `{` + head + `,"attempts":null}`,
		"attempts twice":            `{"attempts":1,` + head + `,"attempts":2}`,
		"escaped attempts key":      `{` + head + `,"att\u0065mpts":2}`,
		"dead letter before":        `{"dead_letter":{"reason":"failed"},` + head + `,"attempts":3}`,
		"dead letter after":         `{` + head + `,"attempts":3,"dead_letter":{"reason":"failed"}}`,
		"dead letter null":          `{` + head + `,"dead_letter":null}`,
		"dead letter twice":         `{` + head + `,"dead_letter":null,"dead_letter":{}}`,
		"meta with nested attempts": `{` + head + `,"meta":{"id":"x","attempts":9},"attempts":1}`,
		"urn alias":                 `{"urn":"urn:babel:a:b","data":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			env, err := Decode([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			checkEditsFromSpans(t, env)
		})
	}
}

// TestEditsOfAMadeEnvelope: an envelope made with Make has no received bytes, so it
// has neither a retry nor a dead-letter body to edit.
func TestEditsOfAMadeEnvelope(t *testing.T) {
	env, err := Make("urn:babel:a:b", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.RetryBody(1); err == nil {
		t.Error("RetryBody of a made envelope: no error")
	}
	if _, err := env.DeadLetterBody(DeadLetter{Reason: ReasonFailed, Attempts: 1}); err == nil {
		t.Error("DeadLetterBody of a made envelope: no error")
	}
}
