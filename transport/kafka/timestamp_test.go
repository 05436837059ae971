package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

func TestStampLimitOf(t *testing.T) {
	const topicType, topicBefore = "message.timestamp.type", "message.timestamp.before.max.ms"
	topicKeys := []string{"retention.ms"}
	brokerKeys := []string{"log.retention.ms", "log.retention.minutes", "log.retention.hours"}
	cases := []struct {
		name    string
		configs map[string]string
		keys    []string
		want    time.Duration
	}{
		{"half the retention", map[string]string{topicType: "CreateTime", "retention.ms": "604800000"}, topicKeys, 84 * time.Hour},
		{"no retention by time", map[string]string{topicType: "CreateTime", "retention.ms": "-1"}, topicKeys, 0},
		{"the broker stamps", map[string]string{topicType: "LogAppendTime", "retention.ms": "3600000"}, topicKeys, 0},
		{"nothing said", map[string]string{}, topicKeys, 0},
		{"refused before the retention", map[string]string{"retention.ms": "86400000", topicBefore: "3600000"}, topicKeys, time.Hour},
		{"refused, no retention", map[string]string{"retention.ms": "-1", topicBefore: "7200000"}, topicKeys, 2 * time.Hour},
		{"Kafka's default before.max.ms", map[string]string{"retention.ms": "-1", topicBefore: "9223372036854775807"}, topicKeys, 0},
		{"broker hours", map[string]string{"log.retention.hours": "168"}, brokerKeys, 84 * time.Hour},
		{"broker minutes before hours", map[string]string{"log.retention.minutes": "60", "log.retention.hours": "168"}, brokerKeys, 30 * time.Minute},
		{"broker ms first", map[string]string{"log.retention.ms": "-1", "log.retention.hours": "168"}, brokerKeys, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var configs []kadm.Config
			for k, v := range tc.configs {
				configs = append(configs, kadm.Config{Key: k, Value: &v})
			}
			typeKey, beforeKey := topicType, topicBefore
			if tc.keys[0] != "retention.ms" {
				typeKey, beforeKey = "log."+topicType, "log."+topicBefore
			}
			if got := stampLimitOf(configs, typeKey, beforeKey, tc.keys...); got != tc.want {
				t.Errorf("limit = %v, want %v", got, tc.want)
			}
		})
	}
}
