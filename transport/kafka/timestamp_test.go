package kafka

import (
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
