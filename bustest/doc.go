// Package bustest helps unit-test handlers without a broker.
//
// Run delivers a message to a handler the way a subscription with the same
// options would, and reports what the bus decided once the handler
// returned: ack, retry after which delay, or dead-letter with which code.
// It is the one to use for AckOnSuccess handlers (the default), whose
// settlement is the bus's, not the handler's:
//
//	res := bustest.Run(t, charge, &bus.Message{Payload: []byte("gateway-down")},
//		bustest.Subscribe(bus.WithMaxDeliveries(5)), bustest.WithAttempt(5))
//	require.Equal(t, bus.OutcomeDeadLettered, res.Outcome, res.String())
//	require.Equal(t, bus.CodeMaxDeliveries, res.Code)
//
// NewDelivery gives a real *bus.Delivery in AckManual mode, as a handler
// that settles deliveries itself receives it, and records its
// settlements: call the handler with it and check what it did. Nothing
// settles it but the code under test.
//
// Both use a private bus over an in-process recording backend, so every
// settlement behaves as in production: the first settlement wins, and
// later ones return bus.ErrAlreadySettled. The private bus is closed when
// Run returns, or when the test of NewDelivery ends.
package bustest
