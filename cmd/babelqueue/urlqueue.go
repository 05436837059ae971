package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/babelqueue-go/babelqueue/transport"
)

// One URL form across the command line: URL#queue. A broker URL never has a fragment,
// so what follows '#' names the queue a command works on, the way console and tail
// read URL#queue,queue…:
//
//   - publish, consume: the queue (as -queue);
//   - dlq stats|ls|show|redrive|export|purge, redrive: the dead-letter queue of that
//     work queue (as -queue), or that dead-letter queue itself when the name ends with
//     the broker's dead-letter suffix (as -dlq): #orders and #orders.dlq both mean
//     orders.dlq, #orders-dlq on SQS;
//   - dlq import: where the records go, read the same way (as -to);
//   - bridge: the source queue on the first URL (-queue), the destination queue on the
//     second (-to-queue);
//   - tail, console, stats: the queues to watch, show or count, comma-separated;
//   - outbox relay: refused, each row goes to the queue it was written for.
//
// A command that takes one queue refuses a list, and a fragment that names another
// queue than the command's flag is refused: nothing is silently ignored.

// oneQueue cuts raw into the broker URL and the one queue its fragment names ("" when
// it has none). A list of queues is a usage error.
func oneQueue(raw string) (string, string, error) {
	u, frag := splitFragment(raw)
	if strings.Contains(frag, ",") {
		return "", "", usageError{fmt.Sprintf("%s: #%s names several queues; this command works on one", transport.Redact(u), frag)}
	}
	return u, strings.TrimSpace(frag), nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, names ...string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		for _, n := range names {
			if f.Name == n {
				set = true
			}
		}
	})
	return set
}

// queueFromURL applies the queue a URL's fragment names to the flag that names the
// same thing: the fragment fills the flag; both given, they must agree.
func queueFromURL(fs *flag.FlagSet, flagName string, value *string, frag string) error {
	if frag == "" {
		return nil
	}
	if flagSet(fs, flagName) && *value != frag {
		return usageError{fmt.Sprintf("the queue is named twice, differently: #%s in the URL and -%s %s", frag, flagName, *value)}
	}
	*value = frag
	return nil
}

// isDeadLetterName reports whether name ends with the dead-letter suffix of a broker
// with these capabilities (".dlq"; "-dlq" on SQS, before a ".fifo").
func isDeadLetterName(name string, c transport.Capabilities) bool {
	suffix := c.DeadLetterSuffix
	if suffix == "" {
		suffix = ".dlq"
	}
	if c.FIFOSuffix != "" && strings.HasSuffix(name, suffix+c.FIFOSuffix) {
		return len(name) > len(suffix+c.FIFOSuffix)
	}
	return strings.HasSuffix(name, suffix) && len(name) > len(suffix)
}

// fromURL applies a URL's fragment to the flags that name a dead-letter queue: a work
// queue (its dead-letter queue is meant) or a dead-letter queue itself. Given with
// -queue or -dlq, both must name the same dead-letter queue.
func (q *queueFlags) fromURL(fs *flag.FlagSet, frag string, b *broker) error {
	if frag == "" {
		return nil
	}
	via := queueFlags{queue: frag}
	if isDeadLetterName(frag, b.tr.Capabilities()) {
		via = queueFlags{queue: q.queue, dlq: frag}
	}
	if flagSet(fs, "queue", "dlq", "dead-letter-queue") {
		if got, want := q.name(b), via.name(b); got != want {
			return usageError{fmt.Sprintf("the dead-letter queue is named twice, differently: #%s in the URL means %s, the flags mean %s", frag, want, got)}
		}
		return nil
	}
	*q = via
	return nil
}
