// Package bustest helps unit-test handlers without a broker.
//
// NewDelivery gives a real *bus.Delivery for a message, as a handler would
// receive it, whose settlements are recorded: call the handler with it and
// then check what it did.
//
//	d := bustest.NewDelivery(t, &bus.Message{ID: "m-1", Payload: []byte(`{"id":7}`)}, bustest.WithAttempt(2))
//	err := myHandler(ctx, d.Delivery)
//	require.NoError(t, err)
//	require.Equal(t, bus.OutcomeAcked, d.Outcome())
//
// The delivery comes from a private bus over an in-process recording
// backend, so every settlement method behaves as it does in production:
// the first settlement wins, and later ones return bus.ErrAlreadySettled.
// The delivery is in AckManual mode: nothing settles it but the code under
// test. The private bus is closed when the test ends.
package bustest
