// Package peek reads a topic's retained messages through a
// backend.Inspector, page by page, for the bus's dead-letter tools and
// the lifecycle history.
package peek

import (
	"context"
	"errors"

	"github.com/eventbus-go/bus/backend"
)

// All pages through topic, page messages per Inspector.Peek call, calling
// f for each message until f returns false. It returns the first Peek
// error, ctx's error when ctx ends between pages, or an error when the
// inspector's cursor does not advance.
func All(ctx context.Context, in backend.Inspector, topic string, page int, f func(*backend.Message) bool) error {
	cursor := ""
	for {
		msgs, next, err := in.Peek(ctx, topic, cursor, page)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if !f(m) {
				return nil
			}
		}
		if next == "" || len(msgs) == 0 {
			return nil
		}
		if next == cursor {
			return errors.New("inspector peek did not advance")
		}
		cursor = next
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
