package kafka_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestOldCreatedAtOutlivesRetention: a record's timestamp is its created_at, and a topic
// that keeps records an hour by their timestamp deletes a segment whose newest record is
// older at its next retention check; one with message.timestamp.after.max.ms of an hour
// refuses a record stamped further ahead. On such a topic, a message created two hours
// ago (a retry, a dead letter, a redrive) or two hours ahead (a clock off) is stamped with
// its write time, with a warning; one created ten minutes ago or ahead keeps its
// created_at, and so does an old one on a topic without a retention by time (this
// broker's default, read while the topic does not exist yet).
func TestOldCreatedAtOutlivesRetention(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	hourly := newTopic(t, "bqtest-stamp")
	adm := kadm.NewClient(rawClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hour := "3600000"
	configs := map[string]*string{"retention.ms": &hour, "message.timestamp.after.max.ms": &hour}
	if resp, err := adm.CreateTopic(ctx, 1, 1, configs, hourly); err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", hourly, err, resp.Err)
	}
	// The broker answers for a topic just created once it has loaded it; until then the
	// transport takes the brokers' defaults, as for a topic its first write creates.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rcs, err := adm.DescribeTopicConfigs(ctx, hourly)
		if err == nil {
			if rc, err := rcs.On(hourly, nil); err == nil && rc.Err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker does not describe %s 30 s after creating it: %v", hourly, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	kept := newTopic(t, "bqtest-stamp") // created by its first write, with the broker's defaults

	logs := &transporttest.LogBuffer{}
	tr, err := kafka.Open(ctx, withParams(t, brokerURL(t)), kafka.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })

	start := time.Now()
	old := start.Add(-2 * time.Hour).UnixMilli()
	recent := start.Add(-10 * time.Minute).UnixMilli()
	ahead := start.Add(2 * time.Hour).UnixMilli()
	soon := start.Add(10 * time.Minute).UnixMilli()
	at := func(q, s string, createdAt int64) *transport.Message {
		return &transport.Message{Queue: q, Body: []byte(`{"s":"` + s + `"}`),
			Projection: transport.Projection{URN: "urn:babel:test:" + s, CreatedAt: createdAt}}
	}
	if err := tr.PublishConfirmed(ctx, []*transport.Message{at(hourly, "old", old), at(hourly, "recent", recent),
		at(hourly, "ahead", ahead), at(hourly, "soon", soon), at(kept, "old", old)}); err != nil {
		t.Fatal(err)
	}
	end := time.Now()

	byBody := map[string]*kgo.Record{}
	for _, r := range readTopic(t, hourly, 4) {
		byBody[string(r.Value)] = r
	}
	for _, s := range []string{"old", "ahead"} {
		if r := byBody[`{"s":"`+s+`"}`]; r == nil || r.Timestamp.Before(start.Truncate(time.Millisecond)) || r.Timestamp.After(end) {
			t.Errorf("%s record on the hourly topic: timestamp %v, want its write time in [%v, %v]", s, ts(r), start, end)
		}
	}
	for s, createdAt := range map[string]int64{"recent": recent, "soon": soon} {
		if r := byBody[`{"s":"`+s+`"}`]; r == nil || r.Timestamp.UnixMilli() != createdAt {
			t.Errorf("%s record on the hourly topic: timestamp %v, want its created_at %v", s, ts(r), time.UnixMilli(createdAt))
		}
	}
	if r := readTopic(t, kept, 1)[0]; r.Timestamp.UnixMilli() != old {
		t.Errorf("old record on a topic without retention by time: timestamp %v, want its created_at %v", r.Timestamp, time.UnixMilli(old))
	}
	got := logs.String()
	if !strings.Contains(got, "stamped with its write time") || !strings.Contains(got, hourly) || strings.Contains(got, "topic="+kept) {
		t.Errorf("want one warning naming %s and none naming %s; logs:\n%s", hourly, kept, got)
	}
}

func ts(r *kgo.Record) any {
	if r == nil {
		return "no record"
	}
	return r.Timestamp
}
