package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp1 "github.com/Azure/go-amqp"
	pc "github.com/apache/pulsar-client-go/pulsar"
	pclog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/internal/benchpair"
)

// The raw clients do the same work with the broker's own client and nothing else: the
// same envelope bytes with the same metadata the SDKs project beside it (the URN, trace
// id, message id, schema version, language and attempts as headers, properties or
// attributes), each publish confirmed as the broker confirms it, each consumed message
// read for its data.n and acknowledged.
var raws = map[string]func(context.Context, job) (result, error){
	"redis": rawRedis, "amqp": rawAMQP, "kafka": rawKafka, "sqs": rawSQS, "artemis": rawArtemis, "pulsar": rawPulsar,
}

// rawFails names the brokers whose raw client also runs the failure-heavy consume
// (Fail): what the broker itself allows that mix, beside the runtime's figure.
var rawFails = map[string]bool{"amqp": true, "kafka": true}

// The projected metadata of message n, as the raw clients write it.
const (
	metaURN     = "urn:babel:bench:sdk"
	metaTraceID = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"
)

func metaID(n int) string { return fmt.Sprintf("f1e2d3c4-b5a6-4789-90ab-%012d", n) }

// metaStrings is the metadata as string headers (Kafka, Pulsar, Artemis).
func metaStrings(n int) map[string]string {
	return map[string]string{"bq-job": metaURN, "bq-trace-id": metaTraceID, "bq-message-id": metaID(n),
		"bq-schema-version": "1", "bq-source-lang": "go", "bq-attempts": "0"}
}

// consumeWith runs work on j.Workers goroutines until the recorder is idle, then cancels
// them.
func consumeWith(ctx context.Context, j job, work func(ctx context.Context, rec *recorder) error) (result, error) {
	ready()
	rec := newRecorderFor(j)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, j.Workers)
	for w := range j.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := work(ctx, rec); err != nil && ctx.Err() == nil {
				errs[w] = err
				cancel()
			}
		}()
	}
	rec.waitIdle(ctx, j.Idle)
	cancel()
	wg.Wait()
	return rec.result(), errors.Join(errs...)
}

// ---- Redis: RPUSH; BLMOVE to a processing list, then LREM (a reliable queue) ----

func rawRedis(ctx context.Context, j job) (result, error) {
	opt, err := redis.ParseURL(j.URL)
	if err != nil {
		return result{}, err
	}
	opt.PoolSize = max(opt.PoolSize, 2*j.Workers)
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return result{}, err
	}
	q, proc := "raw:"+j.Queue, "raw:"+j.Queue+":processing"
	switch j.Op {
	case "publish":
		return publishAll(j, func(_, from, to int, at stamp) error {
			for i := from; i < to; i++ {
				if err := c.RPush(ctx, q, body(i, at(i))).Err(); err != nil {
					return err
				}
			}
			return nil
		})
	case "batch":
		return publishAll(j, func(_, from, to int, at stamp) error {
			for i := from; i < to; i += 100 {
				p := c.Pipeline()
				for k := i; k < min(i+100, to); k++ {
					p.RPush(ctx, q, body(k, at(k)))
				}
				if _, err := p.Exec(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return consumeWith(ctx, j, func(ctx context.Context, rec *recorder) error {
		for ctx.Err() == nil {
			b, err := c.BLMove(ctx, q, proc, "LEFT", "RIGHT", time.Second).Bytes()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return err
			}
			n, at, err := dataN(b)
			if err != nil {
				return err
			}
			rec.add(n, at)
			if err := c.LRem(ctx, proc, 1, b).Err(); err != nil {
				return err
			}
		}
		return nil
	})
}

// ---- RabbitMQ: publisher confirms; basic.consume with a prefetch, one ack each ----

func rawAMQP(ctx context.Context, j job) (result, error) {
	conn, err := amqp091.Dial(j.URL)
	if err != nil {
		return result{}, err
	}
	defer conn.Close()
	q := "raw." + j.Queue
	setup, err := conn.Channel()
	if err != nil {
		return result{}, err
	}
	if _, err := setup.QueueDeclare(q, true, false, false, false, nil); err != nil {
		return result{}, err
	}
	if j.Op == "publish" || j.Op == "batch" {
		chans := make([]*amqp091.Channel, j.Workers)
		for w := range chans {
			ch, err := conn.Channel()
			if err != nil {
				return result{}, err
			}
			if err := ch.Confirm(false); err != nil {
				return result{}, err
			}
			chans[w] = ch
		}
		per := 1
		if j.Op == "batch" {
			per = 100
		}
		return publishAll(j, func(w, from, to int, at stamp) error {
			ch := chans[w]
			dcs := make([]*amqp091.DeferredConfirmation, 0, per)
			for i := from; i < to; i += per {
				dcs = dcs[:0]
				for k := i; k < min(i+per, to); k++ {
					dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp091.Publishing{
						Headers:      amqp091.Table{"x-schema-version": int32(1), "x-source-lang": "go", "x-attempts": int32(0)},
						DeliveryMode: amqp091.Persistent, ContentType: "application/json", CorrelationId: metaTraceID,
						MessageId: metaID(k), Type: metaURN, AppId: "babelqueue", Body: body(k, at(k))})
					if err != nil {
						return err
					}
					dcs = append(dcs, dc)
				}
				for _, dc := range dcs {
					ok, err := dc.WaitContext(ctx)
					if err != nil || !ok {
						return fmt.Errorf("not confirmed: %v", err)
					}
				}
			}
			return nil
		})
	}
	ch, err := conn.Channel()
	if err != nil {
		return result{}, err
	}
	if err := ch.Qos(max(j.Prefetch, j.Workers), 0, false); err != nil {
		return result{}, err
	}
	deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		return result{}, err
	}
	dlq := q + ".dlq"
	if j.Fail {
		if _, err := setup.QueueDeclare(dlq, true, false, false, false, nil); err != nil {
			return result{}, err
		}
	}
	return consumeWith(ctx, j, func(ctx context.Context, rec *recorder) error {
		var pub *amqp091.Channel // a failing delivery's write, confirmed before its ack
		if j.Fail {
			var err error // this worker's own: the workers run at once
			if pub, err = conn.Channel(); err != nil {
				return err
			}
			if err := pub.Confirm(false); err != nil {
				return err
			}
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case d, ok := <-deliveries:
				if !ok {
					return errors.New("delivery channel closed")
				}
				n, at, err := dataN(d.Body)
				if err != nil {
					return err
				}
				rec.add(n, at)
				if j.Fail && n%2 == 1 {
					if err := rawAMQPFail(ctx, pub, q, dlq, d); err != nil {
						return err
					}
					continue
				}
				if err := d.Ack(false); err != nil {
					return err
				}
			}
		}
	})
}

// rawAMQPFail is what a careful raw consumer does with a failed delivery, the work the
// runtime does with max_attempts 3 and the DLQ on: publish it again with its attempts
// header one higher (or, at the third attempt, to the dead-letter queue), persistent and
// confirmed, and ack the delivery once the broker confirmed the write. The confirm is
// awaited beside the next deliveries, as the runtime pipelines its settle writes.
func rawAMQPFail(ctx context.Context, pub *amqp091.Channel, q, dlq string, d amqp091.Delivery) error {
	attempts, _ := d.Headers["x-attempts"].(int32)
	attempts++
	to := q
	if attempts >= 3 {
		to = dlq
	}
	headers := amqp091.Table{}
	for k, v := range d.Headers {
		headers[k] = v
	}
	headers["x-attempts"] = attempts
	dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", to, false, false, amqp091.Publishing{
		Headers: headers, DeliveryMode: amqp091.Persistent, ContentType: d.ContentType, CorrelationId: d.CorrelationId,
		MessageId: d.MessageId, Type: d.Type, AppId: d.AppId, Body: d.Body})
	if err != nil {
		return err
	}
	go func() {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			_ = d.Nack(false, true)
			return
		}
		_ = d.Ack(false)
	}()
	return nil
}

// ---- Kafka: produce, then flush; a group consumer committing what it handled ----

func kafkaSeeds(raw string) ([]string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	return strings.Split(u.Host, ","), nil
}

// createTopic makes a topic with partitions partitions, so eight consumers of a group
// (eight Python processes) each get one.
func createTopic(raw, topic string, partitions int32) error {
	seeds, err := kafkaSeeds(raw)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err != nil {
		return err
	}
	if resp.Err != nil {
		return resp.Err
	}
	// Wait until the brokers' metadata has the topic with a leader for each partition:
	// a producer that writes to it sooner waits for its own metadata refresh, which
	// once stalled a raw failure-heavy consume past its idle time.
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil && len(td.Partitions) == int(partitions) && allLed(td.Partitions) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s has no leader after 30 s: %w", topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// allLed reports whether every partition has a leader.
func allLed(ps kadm.PartitionDetails) bool {
	for _, p := range ps {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

func rawKafka(ctx context.Context, j job) (result, error) {
	seeds, err := kafkaSeeds(j.URL)
	if err != nil {
		return result{}, err
	}
	if j.Op == "publish" || j.Op == "batch" {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(j.Queue))
		if err != nil {
			return result{}, err
		}
		defer cl.Close()
		if err := cl.Ping(ctx); err != nil {
			return result{}, err
		}
		// publish: every record produced, one flush at the end (as the SDKs' Kafka
		// publish is fire-and-forget, flushed once); batch: a flush every 100 records.
		per := j.Count
		if j.Op == "batch" {
			per = 100
		}
		var failed sync.Map
		res, err := publishAll(j, func(_, from, to int, at stamp) error {
			for i := from; i < to; i++ {
				var hs []kgo.RecordHeader
				for k, v := range metaStrings(i) {
					hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
				}
				cl.Produce(ctx, &kgo.Record{Value: body(i, at(i)), Headers: hs, Timestamp: time.UnixMilli(1749132727000)},
					func(_ *kgo.Record, err error) {
						if err != nil {
							failed.Store(i, err)
						}
					})
				if (i-from+1)%per == 0 {
					if err := cl.Flush(ctx); err != nil {
						return err
					}
				}
			}
			return cl.Flush(ctx)
		})
		failed.Range(func(_, v any) bool { err = v.(error); return false })
		return res, err
	}
	if j.Fail {
		if err := createTopic(j.URL, j.Queue+".dlq", 1); err != nil {
			return result{}, err
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(j.Group), kgo.ConsumeTopics(j.Queue),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return result{}, err
	}
	defer cl.Close()
	// One poller hands the records to the workers and commits each poll's records
	// once they are handled.
	j1 := j
	j1.Workers = 1
	return consumeWith(ctx, j1, func(ctx context.Context, rec *recorder) error {
		work := make(chan *kgo.Record)
		var wg, handled sync.WaitGroup // the records' writes confirmed; the records handled
		var werr error
		var once sync.Once
		for range j.Workers {
			go func() {
				for r := range work {
					n, at, err := dataN(r.Value)
					if err != nil {
						once.Do(func() { werr = err })
						wg.Done()
						handled.Done()
						continue
					}
					rec.add(n, at)
					if j.Fail && n%2 == 1 {
						// The failed record written again, its attempts header one
						// higher (at the third attempt to the dead-letter topic); the
						// poll's offsets are committed once every write is confirmed.
						cl.Produce(ctx, rawKafkaRetry(r, j.Queue), func(_ *kgo.Record, err error) {
							if err != nil {
								once.Do(func() { werr = err })
							}
							wg.Done()
						})
						handled.Done()
						continue
					}
					wg.Done()
					handled.Done()
				}
			}()
		}
		defer close(work)
		for ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			fs := cl.PollFetches(pctx)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			var recs []*kgo.Record
			fs.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
			for _, e := range fs.Errors() {
				if !errors.Is(e.Err, context.DeadlineExceeded) && !errors.Is(e.Err, context.Canceled) {
					return e.Err
				}
			}
			wg.Add(len(recs))
			handled.Add(len(recs))
			for _, r := range recs {
				work <- r
			}
			if j.Fail {
				// The writes go out now, not after the producer's linger.
				handled.Wait()
				if err := cl.Flush(ctx); err != nil {
					return err
				}
			}
			wg.Wait()
			if werr != nil {
				return werr
			}
			if len(recs) > 0 {
				if err := cl.CommitRecords(ctx, recs...); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// rawKafkaRetry is a failed record written again: the same value and headers, its
// bq-attempts one higher, to the dead-letter topic at the third attempt.
func rawKafkaRetry(r *kgo.Record, topic string) *kgo.Record {
	hs := make([]kgo.RecordHeader, len(r.Headers))
	copy(hs, r.Headers)
	attempts := 0
	for i, h := range hs {
		if h.Key == "bq-attempts" {
			attempts, _ = strconv.Atoi(string(h.Value))
			hs[i].Value = []byte(strconv.Itoa(attempts + 1))
		}
	}
	if attempts+1 >= 3 {
		topic += ".dlq"
	}
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp}
}

// ---- SQS: SendMessage (SendMessageBatch of 10); ReceiveMessage of 10, DeleteMessage each ----

func sqsClient(ctx context.Context, raw string) (*awssqs.Client, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(u.Host))
	if err != nil {
		return nil, err
	}
	return awssqs.NewFromConfig(cfg, func(o *awssqs.Options) {
		if ep := u.Query().Get("endpoint"); ep != "" {
			o.BaseEndpoint = aws.String(ep)
		}
	}), nil
}

// createSQSQueue makes a queue up front: the Python SDK does not create the queues it
// publishes to.
func createSQSQueue(raw, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := sqsClient(ctx, raw)
	if err != nil {
		return err
	}
	_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name)})
	return err
}

// sqsAttributes is the metadata as SQS message attributes.
func sqsAttributes(n int) map[string]sqstypes.MessageAttributeValue {
	str := func(v string) sqstypes.MessageAttributeValue {
		return sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	num := func(v string) sqstypes.MessageAttributeValue {
		return sqstypes.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(v)}
	}
	return map[string]sqstypes.MessageAttributeValue{"bq-job": str(metaURN), "bq-trace-id": str(metaTraceID),
		"bq-message-id": str(metaID(n)), "bq-schema-version": num("1"), "bq-source-lang": str("go"), "bq-created-at": num("1749132727000")}
}

func rawSQS(ctx context.Context, j job) (result, error) {
	c, err := sqsClient(ctx, j.URL)
	if err != nil {
		return result{}, err
	}
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("raw-" + j.Queue)})
	if err != nil {
		return result{}, err
	}
	qurl := out.QueueUrl
	switch j.Op {
	case "publish":
		return publishAll(j, func(_, from, to int, at stamp) error {
			for i := from; i < to; i++ {
				if _, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: qurl, MessageBody: aws.String(string(body(i, at(i)))), MessageAttributes: sqsAttributes(i)}); err != nil {
					return err
				}
			}
			return nil
		})
	case "batch":
		return publishAll(j, func(_, from, to int, at stamp) error {
			for i := from; i < to; i += 10 {
				var entries []sqstypes.SendMessageBatchRequestEntry
				for k := i; k < min(i+10, to); k++ {
					entries = append(entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(k - i)),
						MessageBody: aws.String(string(body(k, at(k)))), MessageAttributes: sqsAttributes(k)})
				}
				out, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: qurl, Entries: entries})
				if err != nil {
					return err
				}
				if len(out.Failed) > 0 {
					return fmt.Errorf("%d entries refused", len(out.Failed))
				}
			}
			return nil
		})
	}
	return consumeWith(ctx, j, func(ctx context.Context, rec *recorder) error {
		for ctx.Err() == nil {
			out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: qurl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
				MessageAttributeNames:       []string{"All"},
				MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			for _, m := range out.Messages {
				n, at, err := dataN([]byte(aws.ToString(m.Body)))
				if err != nil {
					return err
				}
				rec.add(n, at)
				if _, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: qurl, ReceiptHandle: m.ReceiptHandle}); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// ---- Artemis: unsettled transfers awaited for the accepted outcome; receive + accept ----

func rawArtemis(ctx context.Context, j job) (result, error) {
	u, err := url.Parse(j.URL)
	if err != nil {
		return result{}, err
	}
	pass, _ := u.User.Password()
	conn, err := amqp1.Dial(ctx, "amqp://"+u.Host, &amqp1.ConnOptions{SASLType: amqp1.SASLTypePlain(u.User.Username(), pass)})
	if err != nil {
		return result{}, err
	}
	defer conn.Close()
	q := "raw." + j.Queue
	if j.Op == "publish" || j.Op == "batch" {
		mode := amqp1.SenderSettleModeUnsettled
		senders := make([]*amqp1.Sender, j.Workers)
		for w := range senders {
			sess, err := conn.NewSession(ctx, nil)
			if err != nil {
				return result{}, err
			}
			if senders[w], err = sess.NewSender(ctx, q, &amqp1.SenderOptions{TargetCapabilities: []string{"queue"}, SettlementMode: &mode}); err != nil {
				return result{}, err
			}
		}
		per := 1
		if j.Op == "batch" {
			per = 100
		}
		return publishAll(j, func(w, from, to int, at stamp) error {
			s := senders[w]
			rs := make([]amqp1.SendReceipt, 0, per)
			for i := from; i < to; i += per {
				rs = rs[:0]
				for k := i; k < min(i+per, to); k++ {
					urn, ts := metaURN, time.UnixMilli(1749132727000)
					r, err := s.SendWithReceipt(ctx, &amqp1.Message{
						Header:                &amqp1.MessageHeader{Durable: true},
						Annotations:           amqp1.Annotations{"x-opt-jms-type": urn, "x-opt-jms-dest": int8(0)},
						Properties:            &amqp1.MessageProperties{Subject: &urn, CorrelationID: metaTraceID, MessageID: metaID(k), CreationTime: &ts},
						ApplicationProperties: map[string]any{"bq_schema_version": "1", "bq_source_lang": "go", "bq_attempts": "0", "bq_app_id": "babelqueue"},
						Value:                 string(body(k, at(k))),
					}, nil)
					if err != nil {
						return err
					}
					rs = append(rs, r)
				}
				for _, r := range rs {
					st, err := r.Wait(ctx)
					if err != nil {
						return err
					}
					if _, ok := st.(*amqp1.StateAccepted); !ok {
						return fmt.Errorf("not accepted: %T", st)
					}
				}
			}
			return nil
		})
	}
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		return result{}, err
	}
	rcv, err := sess.NewReceiver(ctx, q, &amqp1.ReceiverOptions{SourceCapabilities: []string{"queue"}, Credit: int32(max(j.Prefetch, j.Workers))})
	if err != nil {
		return result{}, err
	}
	return consumeWith(ctx, j, func(ctx context.Context, rec *recorder) error {
		for ctx.Err() == nil {
			m, err := rcv.Receive(ctx, nil)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			var b []byte
			switch v := m.Value.(type) {
			case string:
				b = []byte(v)
			default:
				b = m.GetData()
			}
			n, at, err := dataN(b)
			if err != nil {
				return err
			}
			rec.add(n, at)
			if err := rcv.AcceptMessage(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// ---- Pulsar: Send (SendAsync + Flush); a Shared subscription, Receive + Ack awaited ----

func rawPulsar(ctx context.Context, j job) (result, error) {
	c, err := pc.NewClient(pc.ClientOptions{URL: j.URL, Logger: pclog.DefaultNopLogger()})
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	topic := "raw-" + j.Queue
	if j.Op == "publish" || j.Op == "batch" {
		p, err := c.CreateProducer(pc.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			return result{}, err
		}
		defer p.Close()
		if j.Op == "publish" {
			return publishAll(j, func(_, from, to int, at stamp) error {
				for i := from; i < to; i++ {
					if _, err := p.Send(ctx, &pc.ProducerMessage{Payload: body(i, at(i)), Properties: metaStrings(i)}); err != nil {
						return err
					}
				}
				return nil
			})
		}
		return publishAll(j, func(_, from, to int, at stamp) error {
			for i := from; i < to; i += 100 {
				var cbs benchpair.Callbacks
				for k := i; k < min(i+100, to); k++ {
					cbs.Add(1)
					p.SendAsync(ctx, &pc.ProducerMessage{Payload: body(k, at(k)), Properties: metaStrings(k)},
						func(_ pc.MessageID, _ *pc.ProducerMessage, err error) { cbs.Done(err) })
				}
				if err := p.FlushWithCtx(ctx); err != nil {
					return err
				}
				if err := cbs.Wait(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// Acks awaited for the broker's answer, as the transport's are (a grouped ack is lost
	// on a crash and the message comes back).
	cons, err := c.Subscribe(pc.ConsumerOptions{Topic: topic, SubscriptionName: "babelqueue", Type: pc.Shared,
		SubscriptionInitialPosition: pc.SubscriptionPositionEarliest, ReceiverQueueSize: max(j.Prefetch, j.Workers),
		AckWithResponse: true})
	if err != nil {
		return result{}, err
	}
	defer cons.Close()
	return consumeWith(ctx, j, func(ctx context.Context, rec *recorder) error {
		for ctx.Err() == nil {
			m, err := cons.Receive(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			n, at, err := dataN(m.Payload())
			if err != nil {
				return err
			}
			rec.add(n, at)
			if err := cons.Ack(m); err != nil {
				return err
			}
		}
		return nil
	})
}
