// Package autoscale holds the controller behind bus.WithAutoscale: it
// keeps a subscription's in-flight bound between a minimum and a maximum,
// following the group's backlog (its lag, read from the backend's
// Inspector) and the latency of its handlers.
//
// # Policy
//
// Every tick (DefaultTick) the controller reads the lag and the handlers
// that finished since the last tick (their count and total latency), and
// makes at most one decision:
//
//   - "latency": the mean handler latency of the tick is more than
//     RiseFactor times the baseline (the lowest mean seen, drifting slowly
//     up): the bound shrinks by a quarter and does not grow again for
//     CooldownTicks ticks. Handlers are then the bottleneck, and more of
//     them at once would only make each slower.
//   - "backlog": the lag is above the bound and grows, or would take more
//     than PaceTicks ticks to drain at the pace of the last tick: the bound
//     doubles, up to the maximum.
//   - "drained": for CalmTicks ticks in a row the lag was at most the
//     bound and fewer than half the bound's handlers ran on average: the
//     bound halves, down to the minimum.
//
// Growth is multiplicative and fast, shrinking slow and only after a calm
// spell, so that the bound does not flap between ticks. Where the lag is
// unknown (a backend that cannot compute it) the bound only follows
// latency.
//
// # Concurrency
//
// A Controller is safe for concurrent use. Its goroutine runs from Start
// until Stop, which waits for it.
package autoscale
