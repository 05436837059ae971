package kafka_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// clusterURL is the three-node Kafka of scripts/brokers.sh (kafka-cluster, its three
// nodes in the URL); it fails under CI=true when the cluster is not running. The test
// holds the cluster until it ends: the fault suite kills its nodes (faults/), never
// under this test.
func clusterURL(t *testing.T) string {
	t.Helper()
	raw := transporttest.BrokerURL(t, "BQ_KAFKA_CLUSTER_URL", "kafka-cluster")
	brokerproc.LockCluster(t, "kafka-cluster")
	return raw
}

// openCluster opens a transport on the cluster URL with a group of its own.
func openCluster(t *testing.T, raw string) *kafka.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := kafka.Open(ctx, withParams(t, raw, "group", transporttest.UniqueName("bqcluster-group")), kafka.WithMetadataRefresh(2*time.Second))
	if err != nil {
		t.Fatalf("kafka.Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// clusterAdmin is an admin client on the cluster URL's nodes.
func clusterAdmin(t *testing.T, raw string) *kadm.Client {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(u.Host, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// clusterTopic returns a topic name no other test uses and deletes it, with the topics
// derived from it, when the test ends.
func clusterTopic(t *testing.T, adm *kadm.Client, prefix string) string {
	q := transporttest.UniqueName(prefix)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		td, err := adm.ListTopics(ctx)
		if err != nil {
			t.Logf("delete topics %s: %v", q, err)
			return
		}
		var names []string
		for _, name := range td.Names() {
			if name == q || strings.HasPrefix(name, q+".") {
				names = append(names, name)
			}
		}
		if len(names) > 0 {
			if _, err := adm.DeleteTopics(ctx, names...); err != nil {
				t.Logf("delete topics %v: %v", names, err)
			}
		}
	})
	return q
}

// TestClusterKit runs the kit's cases on the three-node cluster, its URL naming every
// node.
func TestClusterKit(t *testing.T) {
	raw := clusterURL(t)
	adm := clusterAdmin(t, raw)
	transporttest.Run(t, transporttest.Config{
		Open:        func(t *testing.T) transport.Transport { return openCluster(t, raw) },
		NewQueue:    func(t *testing.T) string { return clusterTopic(t, adm, "bqcluster") },
		QuietPeriod: 2 * time.Second,
	})
}

// TestClusterDurability: on the cluster, the transport's producer waits for every
// in-sync replica (acks=all) and writes idempotently (franz-go's defaults, which the
// transport keeps), and the topics it creates itself (a consumer's dead-letter topic)
// get the cluster's replication, three replicas, not one.
func TestClusterDurability(t *testing.T) {
	raw := clusterURL(t)
	adm := clusterAdmin(t, raw)
	tr := openCluster(t, raw)
	if acks := tr.Producer().OptValue(kgo.RequiredAcks); acks != kgo.AllISRAcks() {
		t.Errorf("producer acks %v, want all in-sync replicas", acks)
	}
	if off := tr.Producer().OptValue(kgo.DisableIdempotentWrite); off != false {
		t.Errorf("producer idempotent writes disabled (%v)", off)
	}
	q := clusterTopic(t, adm, "bqcluster-rf")
	dlq := q + ".dlq"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1, SettleQueues: []string{dlq}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	// Created by Consume; a node other than the controller may learn of it a moment later.
	var d kadm.TopicDetail
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		td, err := adm.ListTopics(ctx, dlq)
		if err != nil {
			t.Fatal(err)
		}
		d = td[dlq]
		if d.Err == nil && len(d.Partitions) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead-letter topic %s not created: %+v", dlq, d)
		}
	}
	for _, p := range d.Partitions {
		if len(p.Replicas) != 3 {
			t.Errorf("%s partition %d has replicas %v, want 3 (the cluster's default.replication.factor)", dlq, p.Partition, p.Replicas)
		}
	}
	// A confirmed publish on the cluster returns once the record is on every in-sync
	// replica; consumed back from the queue.
	m := &transport.Message{Queue: q, Body: []byte(`{"cluster":true}`)}
	if err := tr.PublishConfirmed(ctx, []*transport.Message{m}); err != nil {
		t.Fatal(err)
	}
	got := transporttest.Receive(t, c, 30*time.Second)
	if string(got.Body) != string(m.Body) {
		t.Fatalf("body %q, want %q", got.Body, m.Body)
	}
	if err := c.Settle(ctx, got, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}
