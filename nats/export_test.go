package nats

// WithoutSchedules turns message schedules off in o, so that a test runs
// the fallback of servers older than 2.12 on a new one.
func WithoutSchedules(o Options) Options {
	o.noSchedules = true
	return o
}
