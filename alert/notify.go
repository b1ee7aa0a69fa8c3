package alert

import "context"

// Telling others of changes: subscribers (the SSE stream) through buffered
// channels that drop a slow reader, sinks through one bounded queue and one
// delivery goroutine each.

// sinkQueue is one sink's queue and its delivery goroutine's done signal.
type sinkQueue struct {
	sink Sink
	name string
	q    chan notice
	done chan struct{}
}

// notice is one item of a sink's queue: an alert to deliver, or a Flush
// marker (flushed set) to close once everything before it is handled.
type notice struct {
	a       Alert
	flushed chan struct{}
}

type subscriber struct{ ch chan Alert }

// Subscribe returns a channel that first carries every firing alert (oldest
// change first) and then every change of any alert, in Seq order, until
// ctx ends, the returned cancel function is called, or the Manager
// closes; then the channel is closed. A subscriber that falls more than
// Options.SubscriberBuffer changes behind is dropped: its channel is
// closed early (it may subscribe again for a fresh snapshot). Subscribers
// never block the Manager.
func (m *Manager) Subscribe(ctx context.Context) (<-chan Alert, func()) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		ch := make(chan Alert)
		close(ch)
		return ch, func() {}
	}
	var firing []*Alert
	for _, a := range m.sorted() {
		if a.State == StateFiring {
			firing = append(firing, a)
		}
	}
	s := &subscriber{ch: make(chan Alert, len(firing)+m.opts.SubscriberBuffer)}
	for _, a := range firing {
		s.ch <- a.clone()
	}
	m.subs[s] = struct{}{}
	m.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { m.unsubscribe(s) })
	return s.ch, func() {
		stop()
		m.unsubscribe(s)
	}
}

func (m *Manager) unsubscribe(s *subscriber) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.subs[s]; ok {
		delete(m.subs, s)
		close(s.ch)
	}
}

// publish tells subscribers, and sinks if toSinks, of a; m.mu must be held.
func (m *Manager) publish(a *Alert, toSinks bool) {
	for s := range m.subs {
		select {
		case s.ch <- a.clone():
		default:
			delete(m.subs, s)
			close(s.ch)
			m.log.Warn("dropped a slow alert subscriber", "buffer", m.opts.SubscriberBuffer)
		}
	}
	if toSinks {
		m.toSinks(*a)
	}
}

// toSinks queues a for every sink; m.mu must be held.
func (m *Manager) toSinks(a Alert) {
	for _, sq := range m.sinks {
		select {
		case sq.q <- notice{a: a.clone()}:
		default:
			m.notifications.WithLabelValues(sq.name, "dropped").Inc()
			m.log.Error("alert sink queue full, notification dropped", "sink", sq.name, "alert", a.ID, "state", a.State)
		}
	}
}

// deliver sends sq's queue to its sink until the queue closes.
func (m *Manager) deliver(sq *sinkQueue) {
	defer close(sq.done)
	for n := range sq.q {
		if n.flushed != nil {
			close(n.flushed)
			continue
		}
		a := n.a
		if m.ctx.Err() != nil {
			m.notifications.WithLabelValues(sq.name, "dropped").Inc()
			continue
		}
		if err := sq.sink.Notify(m.ctx, []Alert{a}); err != nil {
			m.notifications.WithLabelValues(sq.name, "failed").Inc()
			m.log.Error("alert notification failed", "sink", sq.name, "alert", a.ID, "state", a.State, "err", err)
			continue
		}
		m.notifications.WithLabelValues(sq.name, "delivered").Inc()
	}
}

// Flush waits until every sink has been handed (or has dropped) every
// notification queued before the call: delivered, failed or dropped, each
// is counted by then. It returns ErrClosed after Close, or ctx's error.
func (m *Manager) Flush(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	marks := make([]chan struct{}, len(m.sinks))
	for i, sq := range m.sinks {
		marks[i] = make(chan struct{})
		select {
		case sq.q <- notice{flushed: marks[i]}:
		case <-ctx.Done():
			m.mu.Unlock()
			return ctx.Err()
		}
	}
	m.mu.Unlock()
	for _, mark := range marks {
		select {
		case <-mark:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
