package driverkit_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// OffsetBrowse reads the place and the limit, refusing a cursor of another kind and an
// empty queue name.
func TestOffsetBrowse(t *testing.T) {
	if off, n, err := driverkit.OffsetBrowse("b", "q", transport.OffsetCursor(7), 0); err != nil || off != 7 || n != 1 {
		t.Errorf("OffsetBrowse(7, 0) = %d, %d, %v; want 7, 1, nil", off, n, err)
	}
	if off, n, err := driverkit.OffsetBrowse("b", "q", "", 20); err != nil || off != 0 || n != 20 {
		t.Errorf("OffsetBrowse(\"\", 20) = %d, %d, %v; want 0, 20, nil", off, n, err)
	}
	if _, _, err := driverkit.OffsetBrowse("b", "q", "1700000000/x", 5); !errors.Is(err, transport.ErrBadCursor) {
		t.Errorf("a cursor of another kind: %v, want ErrBadCursor", err)
	}
	if _, _, err := driverkit.OffsetBrowse("b", "", "", 5); err == nil || !strings.Contains(err.Error(), "b: browse: empty queue name") {
		t.Errorf("an empty queue name: %v", err)
	}
}

// OffsetPage takes the messages from the place up to the limit, says the end only when
// nothing came after them, and points the cursor past the last one.
func TestOffsetPage(t *testing.T) {
	decode := func(i int) *transport.Delivery { return &transport.Delivery{Body: []byte(strconv.Itoa(i))} }
	got := []int{0, 1, 2, 3, 4, 5}
	for _, tc := range []struct {
		off, limit int
		got        []int
		bodies     string
		next       transport.Cursor
		end        bool
	}{
		{off: 0, limit: 2, got: got[:3], bodies: "0,1", next: "2"},          // one more read than shown: it goes on
		{off: 2, limit: 2, got: got[:5], bodies: "2,3", next: "4"},          // from a place
		{off: 4, limit: 5, got: got, bodies: "4,5", next: "6", end: true},   // the rest
		{off: 9, limit: 5, got: got, bodies: "", next: "9", end: true},      // past the end
		{off: 0, limit: 3, got: nil, bodies: "", next: "", end: true},       // empty: the head
		{off: 3, limit: 3, got: got, bodies: "3,4,5", next: "6", end: true}, // exactly to the end
	} {
		p := driverkit.OffsetPage(tc.off, tc.limit, tc.got, decode)
		var bodies []string
		for _, d := range p.Deliveries {
			bodies = append(bodies, string(d.Body))
		}
		if b := strings.Join(bodies, ","); b != tc.bodies || p.Next != tc.next || p.End != tc.end {
			t.Errorf("OffsetPage(%d, %d, %d read) = %q next %q end %v; want %q next %q end %v",
				tc.off, tc.limit, len(tc.got), b, p.Next, p.End, tc.bodies, tc.next, tc.end)
		}
	}
}

// A partition cursor holds an offset per partition, in the order given, and reads back;
// one that does not parse is a bad cursor.
func TestPartitionCursor(t *testing.T) {
	c := driverkit.PartitionCursor(map[int32]int64{0: 5, 2: 0, 1: 17}, []int32{0, 1, 2})
	if c != "0:5,1:17,2:0" {
		t.Fatalf("PartitionCursor = %q, want 0:5,1:17,2:0", c)
	}
	pos, err := driverkit.ParsePartitionCursor(c)
	if err != nil || len(pos) != 3 || pos[0] != 5 || pos[1] != 17 || pos[2] != 0 {
		t.Fatalf("ParsePartitionCursor(%q) = %v, %v", c, pos, err)
	}
	if pos, err := driverkit.ParsePartitionCursor(""); err != nil || len(pos) != 0 {
		t.Errorf("the empty cursor: %v, %v; want no offset", pos, err)
	}
	for _, bad := range []transport.Cursor{"0", "0:x", "-1:3", "0:-3", "0:1,", "a:1"} {
		if _, err := driverkit.ParsePartitionCursor(bad); !errors.Is(err, transport.ErrBadCursor) {
			t.Errorf("ParsePartitionCursor(%q): %v, want ErrBadCursor", bad, err)
		}
	}
}
