package pulsar_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/pulsar"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestBrowseSkipsIndividuallyAcked: messages the subscription acknowledged out of
// order (past its mark-delete position) are not shown; the others are, in order.
func TestBrowseSkipsIndividuallyAcked(t *testing.T) {
	tr := openTransport(t, "")
	q := transporttest.UniqueName("bqtest-browse")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ms []*transport.Message
	for i := range 10 {
		ms = append(ms, &transport.Message{Queue: q, Body: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	if err := transport.PublishConfirmed(ctx, tr, ms); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 10})
	if err != nil {
		t.Fatal(err)
	}
	var ds []*transport.Delivery
	for range 6 {
		d, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	for _, i := range []int{2, 4} {
		if err := c.Settle(ctx, ds[i], transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{}
	for i := range 10 {
		if i != 2 && i != 4 {
			want = append(want, fmt.Sprintf(`{"n":%d}`, i))
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got []string
		var from transport.Cursor
		for {
			p, err := tr.Browse(ctx, q, from, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range p.Deliveries {
				got = append(got, string(d.Body))
			}
			if p.End {
				break
			}
			from = p.Next
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) { // the broker persists acknowledgements a moment later
			t.Fatalf("browsed %v, want %v", got, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func TestBrowseNeedsAnAdminURL(t *testing.T) {
	tr := openTransport(t, "")
	bare, err := pulsar.New(tr.Client())
	if err != nil {
		t.Fatal(err)
	}
	_, err = bare.Browse(context.Background(), "anything", "", 1)
	if !errors.Is(err, transport.ErrCannotPeek) {
		t.Errorf("Browse without an admin URL: %v", err)
	}
	for _, bad := range []string{"admin=ftp://h:8080", "admin=http://u:pw@h:8080", "admin=h:8080"} {
		u, _ := url.Parse("pulsar://h?" + bad)
		if _, err := pulsar.ParseURL(u); !errors.Is(err, transport.ErrBadURL) {
			t.Errorf("ParseURL(%s): %v", bad, err)
		}
	}
	u, _ := url.Parse("pulsar://h?admin=http://admin.example:8081/")
	if c, err := pulsar.ParseURL(u); err != nil || c.AdminURL != "http://admin.example:8081" {
		t.Errorf("ParseURL admin: %+v %v", c, err)
	}
}
