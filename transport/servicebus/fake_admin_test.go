package servicebus

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// adminClient returns the SDK's administration client pointed at a management
// endpoint the fake serves over TLS on loopback: GET /<queue> answers the queue's ATOM
// entry with its runtime counts, as Service Bus does (ActiveMessageCount holds the
// ready and the locked messages, ScheduledMessageCount the scheduled ones,
// DeadLetterMessageCount the dead-letter sub-queue), and a queue the fake does not have
// gets the empty feed Service Bus answers with a 200. The client parses the XML itself.
func (b *fakeBroker) adminClient(t testing.TB) *admin.Client {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.Header.Get("Authorization") == "" {
			http.Error(w, "want an authorized GET", http.StatusUnauthorized)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/")
		w.Header().Set("Content-Type", "application/atom+xml;type=entry;charset=utf-8")
		b.mu.Lock()
		q := b.queueLocked(name, false)
		if q == nil {
			b.mu.Unlock()
			fmt.Fprintf(w, `<feed xmlns="http://www.w3.org/2005/Atom"><title type="text">Publicly Listed Services</title><id>uuid:%s</id><updated>%s</updated></feed>`,
				"00000000-0000-0000-0000-000000000000", time.Now().UTC().Format(time.RFC3339))
			return
		}
		b.tickLocked(q, time.Now())
		active, scheduled, dead := len(q.ready)+len(q.locked), len(q.scheduled), len(q.deadLetters)
		b.mu.Unlock()
		now := time.Now().UTC().Format(time.RFC3339Nano)
		fmt.Fprintf(w, `<entry xmlns="http://www.w3.org/2005/Atom"><id>https://%[1]s/%[2]s?api-version=2021-05</id><title type="text">%[2]s</title>`+
			`<content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">`+
			`<MessageCount>%[3]d</MessageCount><Status>Active</Status><CreatedAt>%[7]s</CreatedAt><UpdatedAt>%[7]s</UpdatedAt><AccessedAt>0001-01-01T00:00:00</AccessedAt>`+
			`<CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/servicebus"><d2p1:ActiveMessageCount>%[4]d</d2p1:ActiveMessageCount>`+
			`<d2p1:DeadLetterMessageCount>%[5]d</d2p1:DeadLetterMessageCount><d2p1:ScheduledMessageCount>%[6]d</d2p1:ScheduledMessageCount>`+
			`<d2p1:TransferMessageCount>0</d2p1:TransferMessageCount><d2p1:TransferDeadLetterMessageCount>0</d2p1:TransferDeadLetterMessageCount></CountDetails>`+
			`</QueueDescription></content></entry>`, r.Host, name, active+scheduled+dead, active, dead, scheduled, now)
	}))
	t.Cleanup(srv.Close)
	cs := fmt.Sprintf("Endpoint=sb://%s/;SharedAccessKeyName=fake;SharedAccessKey=ZmFrZQ==", strings.TrimPrefix(srv.URL, "https://"))
	c, err := admin.NewClientFromConnectionString(cs, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: srv.Client()}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// peek shows the queue's messages from a sequence number on, as Service Bus's peek
// does: ready, locked and scheduled messages in sequence order, with their state,
// locking nothing.
func (b *fakeBroker) peek(ctx context.Context, queue string, from int64, max int) ([]*azservicebus.ReceivedMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queueLocked(queue, false)
	if q == nil {
		return nil, notFound()
	}
	b.tickLocked(q, time.Now())
	type shown struct {
		m     *fakeMsg
		state azservicebus.MessageState
	}
	var all []shown
	for _, m := range q.ready {
		all = append(all, shown{m, azservicebus.MessageStateActive})
	}
	for _, m := range q.locked {
		all = append(all, shown{m, azservicebus.MessageStateActive})
	}
	for _, m := range q.scheduled {
		all = append(all, shown{m, azservicebus.MessageStateScheduled})
	}
	slices.SortFunc(all, func(a, b shown) int { return int(a.m.seq - b.m.seq) })
	var out []*azservicebus.ReceivedMessage
	for _, s := range all {
		if s.m.seq < from || len(out) == max {
			continue
		}
		rm := received(s.m, [16]byte{})
		rm.LockedUntil, rm.State = nil, s.state
		out = append(out, rm)
	}
	return out, nil
}
