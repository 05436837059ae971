package otel

import (
	"crypto/sha256"
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"
)

// TraceIDOf maps an envelope's trace_id to its OpenTelemetry trace id, as every SDK of
// the family does (SPEC §8.4): a UUID (with or without hyphens) is its 16 bytes; any
// other string, or the nil UUID, is the first 16 bytes of its SHA-256. The result is
// never the invalid all-zero id.
func TraceIDOf(traceID string) trace.TraceID {
	var id trace.TraceID
	if uuidBytes(traceID, &id) && id.IsValid() {
		return id
	}
	sum := sha256.Sum256([]byte(traceID))
	copy(id[:], sum[:16])
	if !id.IsValid() {
		id[15] = 1
	}
	return id
}

// UUIDOf formats a trace id as a canonical UUID, the trace_id that [TraceIDOf] maps
// back to it.
func UUIDOf(id trace.TraceID) string {
	var b [36]byte
	hex.Encode(b[0:8], id[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], id[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], id[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], id[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], id[10:16])
	return string(b[:])
}

// RemoteParent is the span context a consumer starts its span under when a message
// carries no valid traceparent: the trace of [TraceIDOf](traceID), a span id that is
// the first 8 bytes of SHA-256("babelqueue-span:" + traceID) (never zero), sampled and
// remote. Every SDK of the family derives the same one, so consumers in any language
// put their spans for one trace_id in one trace, under one parent.
func RemoteParent(traceID string) trace.SpanContext {
	var buf [96]byte // a UUID trace_id fits: no allocation
	sum := sha256.Sum256(append(append(buf[:0], "babelqueue-span:"...), traceID...))
	var sid trace.SpanID
	copy(sid[:], sum[:8])
	if !sid.IsValid() {
		sid[7] = 1
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    TraceIDOf(traceID),
		SpanID:     sid,
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
}

// uuidBytes decodes s into id when it is 32 hex digits once hyphens are removed (how
// the family reads a UUID), without allocating.
func uuidBytes(s string, id *trace.TraceID) bool {
	if len(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' {
		// The canonical layout: the digit pairs are at fixed places.
		var bad byte
		for i, at := range canonicalPairs {
			hi, lo := unhex[s[at]], unhex[s[at+1]]
			id[i] = hi<<4 | lo
			bad |= hi | lo
		}
		return bad <= 0xf
	}
	n := 0 // hex digits read
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' {
			continue
		}
		v := unhex[c]
		if v > 0xf || n == 2*len(id) {
			return false
		}
		if n%2 == 0 {
			id[n/2] = v << 4
		} else {
			id[n/2] |= v
		}
		n++
	}
	return n == 2*len(id)
}

// canonicalPairs are where the 16 digit pairs of a canonical UUID start.
var canonicalPairs = [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// unhex is the value of each hex digit (either case); 0xff for every other byte.
var unhex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
	}
	for i, c := range "ABCDEF" {
		t[c] = byte(10 + i)
	}
	return t
}()
