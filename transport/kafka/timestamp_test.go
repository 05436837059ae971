package kafka

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

func TestStampLimitOf(t *testing.T) {
	const long = "9223372036854775807" // Kafka's Long.MAX_VALUE: no limit
	cases := []struct {
		name    string
		prefix  string
		configs map[string]string
		want    stampLimit
	}{
		{"half the retention", "", map[string]string{"message.timestamp.type": "CreateTime", "retention.ms": "604800000"}, stampLimit{behind: 84 * time.Hour}},
		{"no retention by time", "", map[string]string{"retention.ms": "-1"}, stampLimit{}},
		{"the broker stamps", "", map[string]string{"message.timestamp.type": "LogAppendTime", "retention.ms": "3600000", "message.timestamp.after.max.ms": "3600000"}, stampLimit{}},
		{"nothing said", "", map[string]string{}, stampLimit{}},
		{"refused before the retention", "", map[string]string{"retention.ms": "86400000", "message.timestamp.before.max.ms": "3600000"}, stampLimit{behind: 30 * time.Minute}},
		{"refused, no retention", "", map[string]string{"retention.ms": "-1", "message.timestamp.before.max.ms": "7200000"}, stampLimit{behind: time.Hour}},
		{"Kafka 4's defaults", "", map[string]string{"retention.ms": "604800000", "message.timestamp.before.max.ms": long, "message.timestamp.after.max.ms": "3600000"}, stampLimit{behind: 84 * time.Hour, ahead: 30 * time.Minute}},
		{"Kafka 3's defaults", "", map[string]string{"retention.ms": "604800000", "message.timestamp.before.max.ms": long, "message.timestamp.after.max.ms": long}, stampLimit{behind: 84 * time.Hour}},
		{"broker hours", "log.", map[string]string{"log.retention.hours": "168"}, stampLimit{behind: 84 * time.Hour}},
		{"broker minutes before hours", "log.", map[string]string{"log.retention.minutes": "60", "log.retention.hours": "168"}, stampLimit{behind: 30 * time.Minute}},
		{"broker ms first", "log.", map[string]string{"log.retention.ms": "-1", "log.retention.hours": "168"}, stampLimit{}},
		{"broker stamps", "log.", map[string]string{"log.message.timestamp.type": "LogAppendTime", "log.retention.hours": "168"}, stampLimit{}},
		{"broker ahead", "log.", map[string]string{"log.retention.ms": "-1", "log.message.timestamp.after.max.ms": "7200000"}, stampLimit{ahead: time.Hour}},
		{"a topic ignores broker keys", "", map[string]string{"log.retention.hours": "168"}, stampLimit{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var configs []kadm.Config
			for k, v := range tc.configs {
				configs = append(configs, kadm.Config{Key: k, Value: &v})
			}
			if got := stampLimitOf(configs, tc.prefix); got != tc.want {
				t.Errorf("limits = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestTighter(t *testing.T) {
	for _, tc := range []struct{ a, b, want time.Duration }{
		{0, 0, 0}, {0, 5, 5}, {5, 0, 5}, {3, 5, 3}, {5, 3, 3},
	} {
		if got := tighter(tc.a, tc.b); got != tc.want {
			t.Errorf("tighter(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestTimestampDecision: with a topic's limits known (an hour behind, half an hour
// ahead), a record keeps its created_at within them and is stamped with its write time
// beyond; a topic without limits keeps every created_at; one warning a minute per topic.
func TestTimestampDecision(t *testing.T) {
	var logs bytes.Buffer
	tr, err := newTransport(nil, false, nil, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_800_000_000_000)
	far := now.Add(time.Hour).UnixMilli()
	tr.stamps.topics.Store("limited", &stampEntry{stampLimit: stampLimit{behind: time.Hour, ahead: 30 * time.Minute}, expires: far})
	tr.stamps.topics.Store("open", &stampEntry{expires: far})
	cases := []struct {
		topic   string
		created time.Duration // from now
		stamped bool
	}{
		{"limited", -59 * time.Minute, false},
		{"limited", -61 * time.Minute, true},
		{"limited", 29 * time.Minute, false},
		{"limited", 31 * time.Minute, true},
		{"limited", -30 * time.Second, false},
		{"open", -1000 * time.Hour, false},
		{"open", 1000 * time.Hour, false},
	}
	for _, tc := range cases {
		created := now.Add(tc.created).UnixMilli()
		got := tr.timestamp(context.Background(), tc.topic, created, now)
		want := time.UnixMilli(created)
		if tc.stamped {
			want = now
		}
		if !got.Equal(want) {
			t.Errorf("%s, created %v from now: timestamp %v, want %v", tc.topic, tc.created, got, want)
		}
	}
	if n := strings.Count(logs.String(), "stamped with its write time"); n != 1 {
		t.Errorf("%d warnings for two records stamped within a minute, want 1:\n%s", n, logs.String())
	}
	if got := tr.timestamp(context.Background(), "limited", now.Add(-2*time.Hour).UnixMilli(), now.Add(stampRetry)); !got.Equal(now.Add(stampRetry)) {
		t.Errorf("a minute later: timestamp %v, want the write time", got)
	}
	if n := strings.Count(logs.String(), "stamped with its write time"); n != 2 {
		t.Errorf("%d warnings after a minute, want 2", n)
	}
	if got := tr.timestamp(context.Background(), "limited", 0, now); !got.IsZero() {
		t.Errorf("no created_at: timestamp %v, want zero (the produce time)", got)
	}
	// A created_at in the year 3000: its age in nanoseconds would overflow a Duration.
	if got := tr.timestamp(context.Background(), "limited", 32503680000000, now); !got.Equal(now) {
		t.Errorf("created_at in the year 3000: timestamp %v, want the write time", got)
	}
}
