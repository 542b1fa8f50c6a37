package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// A ledger: an account's entries apply in order, and one that cannot be
// applied must not be skipped. With KeyHold the account is held once its
// entry is dead-lettered; the entries after it are parked, and replaying
// the failed entry applies them after it, in order.
func ExampleWithKeyFailure() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://", bus.WithObserver(observer.Nop()))
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	var fixed atomic.Bool
	applied := make(chan string, 4)
	_, err = b.Subscribe(ctx, "ledger", func(_ context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "debit 70" && !fixed.Load() {
			return bus.Reject(errors.New("account service down"))
		}
		applied <- string(d.Payload)
		return nil
	}, bus.WithKeyOrdering(), bus.WithKeyFailure(bus.KeyHold))
	if err != nil {
		panic(err)
	}
	for _, p := range []string{"credit 100", "debit 70", "debit 20"} {
		if err := b.Publish(ctx, "ledger", &bus.Message{Key: "acct-7", Payload: []byte(p)}); err != nil {
			panic(err)
		}
	}
	fmt.Println(<-applied)
	// The key is held once "debit 70" is dead-lettered, and "debit 20"
	// is parked behind it.
	var held []bus.HeldKey
	for deadline := time.Now().Add(10 * time.Second); len(held) == 0 || held[0].Parked == 0; {
		if held, err = b.HeldKeys(ctx, "ledger.dlq"); err != nil || time.Now().After(deadline) {
			panic(fmt.Sprint("no held key: ", err))
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("%s held, %d parked\n", held[0].Key, held[0].Parked)

	fixed.Store(true) // the account service is back
	if _, err := b.ReplayDeadLetters(ctx, "ledger.dlq", held[0].Head); err != nil {
		panic(err)
	}
	fmt.Println(<-applied)
	fmt.Println(<-applied)
	// Output:
	// credit 100
	// acct-7 held, 1 parked
	// debit 70
	// debit 20
}
