package nats

// WithoutSchedules turns schedules off in o, so that a test runs the
// fallback of streams that cannot store them (the bus holds early
// deliveries).
func WithoutSchedules(o Options) Options {
	o.noSchedules = true
	return o
}

// PromoterLeads reports whether b's promoter of topic holds the topic's
// promoter lock and promotes.
func PromoterLeads(b *Backend, topic string) bool {
	b.promoMu.Lock()
	p := b.promoters[topic]
	b.promoMu.Unlock()
	return p != nil && p.leading.Load()
}
