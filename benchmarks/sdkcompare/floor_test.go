package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/envelope"
)

// The floor does the SDK's envelope work by hand: what it publishes is an envelope the
// SDK accepts, with fresh ids, and what the SDK publishes the floor reads and accepts.
func TestFloorEnvelopeIsTheSDKs(t *testing.T) {
	b, err := floorBody(`q"1`, benchData{N: 7, At: 42})
	if err != nil {
		t.Fatal(err)
	}
	e, err := envelope.Decode(b)
	if err != nil {
		t.Fatalf("the SDK does not decode the floor's envelope %s: %v", b, err)
	}
	if err := e.Accepts(); err != nil {
		t.Fatalf("the SDK does not accept the floor's envelope %s: %v", b, err)
	}
	if e.Job != urn || e.Meta.Queue != `q"1` || e.Meta.CreatedAt == 0 || string(e.Data) != `{"n":7,"at":42}` {
		t.Fatalf("the floor's envelope reads back as %+v", e)
	}
	b2, _ := floorBody("q", benchData{N: 7})
	e2, err := envelope.Decode(b2)
	if err != nil {
		t.Fatal(err)
	}
	if e.Meta.ID == e2.Meta.ID || e.TraceID == e2.TraceID || e.Meta.ID == e.TraceID {
		t.Fatalf("ids repeat: %s %s %s %s", e.Meta.ID, e.TraceID, e2.Meta.ID, e2.TraceID)
	}

	sdk, err := envelope.Make(urn, benchData{N: 9, At: 5}, envelope.WithQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := sdk.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var f floorEnvelope
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatal(err)
	}
	if err := f.accepted(); err != nil {
		t.Fatalf("the floor does not accept the SDK's envelope %s: %v", body, err)
	}
	var d benchData
	if err := json.Unmarshal(f.Data, &d); err != nil || d != (benchData{N: 9, At: 5}) {
		t.Fatalf("the floor reads data %+v (%v)", d, err)
	}
	for _, bad := range []string{
		`{"trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`,
		`{"job":"u","trace_id":"t","data":{},"meta":{"schema_version":2},"attempts":0}`,
		`{"job":"u","trace_id":"t","data":[],"meta":{"schema_version":1},"attempts":0}`,
		`{"job":"u","data":{},"meta":{"schema_version":1},"attempts":0}`,
		`{"job":"u","trace_id":"t","data":{},"meta":{"schema_version":1}}`,
	} {
		var f floorEnvelope
		if err := json.NewDecoder(strings.NewReader(bad)).Decode(&f); err != nil {
			t.Fatal(err)
		}
		if f.accepted() == nil {
			t.Errorf("the floor accepts %s", bad)
		}
	}
}
