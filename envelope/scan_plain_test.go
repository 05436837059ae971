package envelope

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"testing"
	"unicode/utf8"
)

// TestNotPlain8 checks the eight-byte test against the byte table on every byte value
// in every position, beside plain filler and beside other special bytes.
func TestNotPlain8(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			for _, fill := range []byte{'a', '"', 0x00, 0xff, 0x20, 0x7f} {
				var w [8]byte
				for i := range w {
					w[i] = 'a'
					if i > pos {
						w[i] = fill
					}
				}
				w[pos] = byte(c)
				m := notPlain8(binary.LittleEndian.Uint64(w[:]))
				first := -1
				for i, b := range w {
					if !strPlain[b] {
						first = i
						break
					}
				}
				got := -1
				if m != 0 {
					got = bits.TrailingZeros64(m) >> 3
				}
				if got != first {
					t.Fatalf("%q: first byte that is not plain at %d, notPlain8 says %d", w, first, got)
				}
			}
		}
	}
}

// TestUTF8Short checks the short UTF-8 path against utf8.DecodeRune on every two- and
// three-byte prefix.
func TestUTF8Short(t *testing.T) {
	for c0 := 0x80; c0 < 0x100; c0++ {
		for c1 := range 256 {
			for _, c2 := range []int{0x00, 0x41, 0x7f, 0x80, 0xa0, 0xbf, 0xc0, 0xff} {
				for _, b := range [][]byte{{byte(c0)}, {byte(c0), byte(c1)}, {byte(c0), byte(c1), byte(c2)}} {
					n := utf8Short(b)
					if n == 0 {
						continue
					}
					r, m := utf8.DecodeRune(b)
					if r == utf8.RuneError || m != n {
						t.Fatalf("% x: utf8Short %d, DecodeRune %U %d", b, n, r, m)
					}
				}
			}
		}
	}
}

// FuzzScanValid: the scanner accepts exactly the bodies that are one JSON value
// (encoding/json) and valid UTF-8, NaN and Infinity aside (flagged, then poison).
func FuzzScanValid(f *testing.F) {
	addSeeds(f)
	f.Add([]byte(`{"a":"0123456789abcdef\u00e9\"x","b":[1,2.5e3,-0],"c":"é—😀"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s := scanner{b: body}
		_, _, object := s.scanTop(nil)
		ok := object || s.reason == ReasonNotObject
		want := json.Valid(body) && utf8.Valid(body)
		if s.nonFinite {
			return
		}
		if ok != want {
			t.Fatalf("scanner ok=%v (%s %s), encoding/json and utf8.Valid say %v", ok, s.reason, s.detail, want)
		}
		if !object {
			return
		}
		// Make's data: what json.Compact makes of an object, copied as it is when the
		// scanner saw no white space to remove.
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			t.Fatalf("json.Compact of an object the scanner accepts: %v", err)
		}
		if s.spaced == bytes.Equal(compact.Bytes(), body) {
			t.Fatalf("scanner spaced=%v, json.Compact changed the body: %v", s.spaced, !bytes.Equal(compact.Bytes(), body))
		}
		got, err := compactObject(body)
		if err != nil || !bytes.Equal(got, compact.Bytes()) {
			t.Fatalf("compactObject = %q, %v; json.Compact = %q", got, err, compact.Bytes())
		}
	})
}
