package rawclient

import (
	"context"
	"fmt"
)

// Loop runs a raw consumer's read loop on a goroutine of its own, until
// Stop or until the loop fails. Its methods are safe for concurrent use.
type Loop struct {
	cancel context.CancelFunc
	exited chan struct{} // closed when run returned
	ended  chan struct{} // closed when run failed
	failed error         // set before ended is closed
}

// StartLoop starts run with a context that Stop cancels. An error run
// returns before that is its failure; one after it is not.
func StartLoop(run func(ctx context.Context) error) *Loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Loop{cancel: cancel, exited: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(l.exited)
		if err := run(ctx); err != nil && ctx.Err() == nil {
			l.failed = err
			close(l.ended)
		}
	}()
	return l
}

// Ended is closed when the loop failed.
func (l *Loop) Ended() <-chan struct{} { return l.ended }

// Err is the loop's failure, or nil.
func (l *Loop) Err() error {
	select {
	case <-l.ended:
		return l.failed
	default:
		return nil
	}
}

// Stop cancels the loop's context and waits, while ctx lasts, for the
// loop to return.
func (l *Loop) Stop(ctx context.Context) error {
	l.cancel()
	select {
	case <-l.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop the consumer: %w", ctx.Err())
	}
}
