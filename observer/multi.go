package observer

import "context"

// Multi returns an Observer that passes each event to every non-nil
// observer in order.
func Multi(observers ...Observer) Observer {
	list := make([]Observer, 0, len(observers))
	for _, o := range observers {
		if o != nil {
			list = append(list, o)
		}
	}
	return multi(list)
}

type multi []Observer

func (m multi) Observe(ctx context.Context, e Event) {
	for _, o := range m {
		o.Observe(ctx, e)
	}
}
