// Package driverkit is the kit a broker driver builds its consumer on. It owns what
// every driver's consumer does the same way: the receive loop and its prefetch, the
// backoff of failed receives and failed settlements, settle-once and the validation of
// a settlement, settle writes confirmed before the acknowledgement (pipelined or
// awaited), give-back, and Close with one error policy. A driver supplies its broker's
// primitives (receive a batch, acknowledge, give back, write and confirm, close) and
// its facts; what is left in the driver is only what its broker makes different.
// gocloud.dev/pubsub splits its drivers from its portable layer the same way.
//
// # Writing a driver's consumer
//
// Pick M, the raw message: what the broker client hands out and what acknowledging or
// giving back that message needs (a delivery and its channel, a receipt handle, a
// record). Implement [Driver] for M:
//
//	type consumer struct {
//		ch  *client.Channel
//		kit *driverkit.Consumer[msg] // for Done, in Receive
//	}
//
//	func (c *consumer) Receive(ctx context.Context, into []msg) (int, error) // wait for one or more
//	func (c *consumer) Decode(m msg, d *transport.Delivery)                 // body, key, headers, counts
//	func (c *consumer) Ack(ctx context.Context, m msg) error
//	func (c *consumer) GiveBack(ctx context.Context, ms []msg, why driverkit.Reason) error
//	func (c *consumer) IsRetryable(err error) bool // a receive error the next Receive recovers from
//	func (c *consumer) Close(ctx context.Context) error
//
// and [Writer] (publish a settlement's writes, return the wait for their confirmation)
// or, when the broker can make the writes and the acknowledgement one atomic step,
// [AtomicAcker]; [HandOffer] when the broker has a redrive of its own; [AsyncWriter]
// when the client reports confirmations through callbacks. Then Consume
// returns the kit's consumer:
//
//	c := &consumer{ch: ch}
//	k, err := driverkit.New[msg](c, driverkit.Config{
//		Broker: "mybroker", Queue: queue, Logger: t.log, Group: &t.consumers,
//		Pipeline: true, ConcurrentReceive: true,
//	}, opts)
//	if err != nil {
//		return nil, err
//	}
//	c.kit = k
//	return k, nil
//
// and the transport's Close calls Group.Close. A driver that offers more on its
// consumer ([transport.AckSyncer], say) returns a struct that embeds the
// *[Consumer] and adds the method.
//
// # What the kit does with the primitives
//
// Receive waits for a prefetch slot (and for the backoff after failed settlements),
// then calls [Driver.Receive] for one message plus as many as the prefetch has room
// for, up to [Config.MaxBatch]; messages beyond the first wait for the next Receive
// calls, each holding its slot. With [Config.ConcurrentReceive] several Receive calls
// reach the driver at once; without it one does and the others wait for its batch. A
// receive error [Driver.IsRetryable] accepts is retried after a backoff that doubles
// from [Config.MinBackoff] to [Config.MaxBackoff], shared by the workers of the
// consumer and logged at the first failure and at each doubling of their count, with
// the cause; the first success logs the recovery. Any other error is returned.
//
// Settle validates the settlement and that the delivery is this consumer's and not
// settled already, then:
//
//   - Ack without writes: [Driver.Ack]. With [Config.PipelineAcks] Settle returns at
//     once and a goroutine of the kit makes it; one that fails gives the delivery back
//     ([SettleFailed]) and tells [transport.ConsumeOptions.SettleFailed].
//   - Ack with writes: [AtomicAcker.AckWrites] with [Config.AtomicAcks]; else
//     [Writer.Write], then its [Confirm], then [Driver.Ack]. A write that fails is
//     returned as a [*transport.SettleWriteError] and nothing is acknowledged; the
//     delivery stays held for the runtime's Rewind. With [Config.Pipeline] Settle returns
//     after Write, and a goroutine of the kit waits for the confirmation (up to
//     [Config.ConfirmTimeout]), then acknowledges the delivery, or gives it back
//     ([SettleFailed]) and tells [transport.ConsumeOptions.SettleFailed]; a driver
//     that is an [AsyncWriter] gets the writes through WriteAsync instead, and the kit
//     does the same from its callback, with no goroutine or timer of its own.
//   - Rewind: [Driver.GiveBack] with [Rewound], or [SettleFailed] after a failed Ack.
//   - HandOff: [HandOffer.HandOff], offered with [Config.HandOff].
//
// A failed settlement, pipelined or not, makes the next Receive wait a backoff that
// doubles while failures go on, logged on the same terms as receive failures.
//
// Close stops receiving, gives back ([Closing]) what was held and not settled,
// waits for the receives and settlements in progress (pipelined ones included) until
// its context ends, then calls [Driver.Close]. It does every step whatever fails and
// returns nil or one error joining what failed; it never logs. [Group.Close] closes a
// transport's consumers at once and joins their errors.
//
// # Options and headers
//
// A driver reads its URL with [ParseQuery] and records a bad value given to one of its
// option functions in an [Options]: a bad option, from the URL or from code, is an
// [*OptionError] naming it, matching [transport.ErrInvalidOption] (which
// babelqueue.ErrInvalidOption is). An attempts header is read with [Attempts] (or
// [ParseAttempts] for text): one coercion on every broker.
//
// # The transport's plumbing
//
// What every transport repeats around its consumers is here too, each tested once:
// [Common], the settings every driver takes (logger, connect timeout, size limit) with
// one validation path and their URL parameters ([Common.Query]); [ParseURL],
// [RefuseParts], [CheckHTTPURL], [IsLoopback] and [Hosts] for reading a URL; [Reach], the
// start-up check that a node answers; [Pool], a client per destination (a producer per
// topic, a sender per queue) made once and closed together; [Project], the envelope's
// fields under the bq- property names, and [SetHeader]; [PublishRuns] and [Receipts] for confirmed
// publishes; [Coalescer], one request for the calls made while another is on its way
// (acknowledgements); [GroupCommit], the calls several workers make at once sent as one
// request by the caller that finds a lane free; [DeferredAcks], acknowledgements sent
// with the next receive request or after a linger; [Poller], long polls never cancelled for their caller; [Await], a
// blocking client call bounded by a context; [ClientLog], the log handler a driver
// gives its client; [WatchSilence], a dialled connection that reports the first read
// timing out while an answer was awaited; [AMQPBody] and [SchemaValue] for AMQP 1.0
// brokers; [Offsets], the commit bookkeeping of a consumer of a partitioned log, and
// [LogConsumer], its partitions, rewinds and revokes around it, with [Slabs] and
// [PartitionCursor]; and [Backoff], [Sleep],
// [Params], [FIFO], [Confirmations], [RunCoalesced] and [RunDue].
//
// # Testing
//
// The kit is tested once, with fault injection and on memory://. A driver's tests
// reuse package driverkittest: its Faults make any primitive fail or hang on demand
// and count calls, and Wrap puts them between the kit and the driver.
//
// # The ledger
//
// [Ledger] is the bookkeeping the Consumer is built on (prefetch slots, settle-once,
// give-back, the backoff after failed settlements), public for a driver whose broker
// hands out messages in a way the Consumer cannot drive. Prefer the Consumer.
//
// # Compatibility
//
// The package is part of the root module's public API and is versioned with it
// (CHANGELOG.md says what a version promises; every module of a release has that one
// version, so a driver requires the root at its own). The kit grows without breaking
// a driver: interfaces a driver implements never gain methods, a new primitive comes
// as a new optional interface, and a new fact as a new [Config] field whose zero value
// keeps the earlier behaviour.
package driverkit
