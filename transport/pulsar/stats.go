package pulsar

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.QueueStatter = (*Transport)(nil)

// adminFor returns the admin REST API's client and queue's topic, for op (a browse, the stats).
func (t *Transport) adminFor(op, queue string) (admin.Client, *utils.TopicName, error) {
	if queue == "" {
		return nil, nil, fmt.Errorf("pulsar: %s: empty queue name", op)
	}
	name, err := utils.GetTopicName(queue)
	if err != nil {
		return nil, nil, fmt.Errorf("pulsar: %s: %w", op, err)
	}
	adm, err := t.opts.secure.admin(t.opts.adminURL)
	if err != nil {
		return nil, nil, fmt.Errorf("pulsar: %s: admin client for %s: %w", op, t.opts.adminURL, err)
	}
	return adm, name, nil
}

// isNotFound reports the admin API's answer for a topic that does not exist.
func isNotFound(err error) bool {
	var re rest.Error
	return errors.As(err, &re) && re.Code == http.StatusNotFound
}

// QueueStats asks the admin REST API ([WithAdminURL]) for the counts of the
// transport's subscription (its backlog as Ready, InFlight, Delayed and Oldest), or of
// the topic's stored entries before the subscription exists. Without an admin URL it
// returns a [transport.CannotCountError].
func (t *Transport) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	s := transport.QueueStats{Appended: transport.UnknownCount}
	if t.opts.adminURL == "" {
		return s, &transport.CannotCountError{Transport: "pulsar", Reason: "no admin URL: the counts come from the admin REST API (pulsar.WithAdminURL, or admin= in the URL)"}
	}
	adm, name, err := t.adminFor("stats", queue)
	if err != nil {
		return s, err
	}
	st, err := adm.Topics().GetStatsWithOptionWithContext(ctx, *name, utils.GetStatsOptions{GetEarliestTimeInBacklog: true})
	if isNotFound(err) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("pulsar: stats %q from %s: %w", queue, t.opts.adminURL, err)
	}
	s.Exists = true
	if sub, ok := st.Subscriptions[t.opts.subscription]; ok {
		s.InFlight = sub.UnAckedMessages
		s.Ready = max(sub.MsgBacklogNoDelayed-sub.UnAckedMessages, 0)
		s.Delayed = sub.MsgDelayed
		if sub.MsgBacklog > 0 && sub.EarliestMsgPublishTimeInBacklog > 0 {
			s.Oldest = time.UnixMilli(sub.EarliestMsgPublishTimeInBacklog)
		}
		return s, nil
	}
	in, err := adm.Topics().GetInternalStatsWithContext(ctx, *name)
	if err != nil {
		return s, fmt.Errorf("pulsar: stats %q: internal stats from %s: %w", queue, t.opts.adminURL, err)
	}
	s.Ready, s.Delayed = in.NumberOfEntries, transport.UnknownCount
	return s, nil
}
