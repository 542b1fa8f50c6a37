package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// countLimiter lets a subscription take at most count messages in all:
// capacity is acquired before the backend is asked for messages, so tail
// --count never receives a message it would not print. done counts
// printed deliveries; held counts units acquired and not yet released
// (released when unused, or when the delivery finished). Safe for
// concurrent use.
type countLimiter struct {
	mu    sync.Mutex
	count int
	done  int
	held  int
	wake  chan struct{}
}

func newCountLimiter(count int) *countLimiter {
	return &countLimiter{count: count, wake: make(chan struct{}, 1)}
}

// Acquire implements bus.Limiter.
func (l *countLimiter) Acquire(ctx context.Context, max int) (int, error) {
	for {
		l.mu.Lock()
		n := min(max, l.count-l.done-l.held)
		if n > 0 {
			l.held += n
			l.mu.Unlock()
			return n, nil
		}
		l.mu.Unlock()
		select {
		case <-l.wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Release implements bus.Limiter.
func (l *countLimiter) Release(n int) {
	l.mu.Lock()
	l.held -= n
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// printed records one printed delivery, before its units are released.
func (l *countLimiter) printed() {
	l.mu.Lock()
	l.done++
	l.mu.Unlock()
}

// tailOptions is the parsed command line of bus tail.
type tailOptions struct {
	asJSON      bool
	topic       string
	group       string
	from        bus.StartFrom
	ackMode     bus.AckMode
	maxInFlight int
	count       int // stop after this many deliveries; 0 = until interrupted
}

func tailCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	rawURL, opts, code, ok := parseTailArgs(args, stderr)
	if !ok {
		return code
	}
	warnPrivateMem(rawURL, stderr)
	obs := observer.Func(func(_ context.Context, e observer.Event) {
		fmt.Fprintf(stderr, "bus tail: %s: %v\n", e.Scope, e.Err)
	})
	b, err := bus.Open(ctx, rawURL, bus.WithObserver(obs))
	if err != nil {
		fmt.Fprintf(stderr, "bus tail: %v\n", err)
		return exitFailure
	}
	err = tail(ctx, b, opts, stdout)
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if cerr := b.Close(closeCtx); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "bus tail: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// parseTailArgs parses and checks a bus tail command line.
func parseTailArgs(args []string, stderr io.Writer) (rawURL string, opts tailOptions, code int, ok bool) {
	fs := flag.NewFlagSet("bus tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", defaultURL(), "backend URL (default $BUS_URL, else mem://)")
	from := fs.String("from", "newest", "where a new group starts: oldest or newest")
	ackMode := fs.String("ack-mode", string(bus.AckOnSuccess), "on-success, on-receive or manual (tail acks after printing)")
	fs.StringVar(&opts.topic, "topic", "", "topic to read (required)")
	fs.StringVar(&opts.group, "group", "bus-tail", "consumer group; deliveries are acked for this group")
	fs.IntVar(&opts.maxInFlight, "max-in-flight", 1, "deliveries printed concurrently (1 keeps order)")
	fs.BoolVar(&opts.asJSON, "json", false, "print one JSON object per delivery: id, key, headers, attempt, published, payload (text when valid UTF-8, else base64, as payload_encoding says)")
	fs.IntVar(&opts.count, "count", 0, "exit after this many deliveries (0: until interrupted); no more are taken from the group")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bus tail --topic T [flags]\n\nPrints each delivery (id, attempt, key, headers, payload) until\ninterrupted, then closes the subscription gracefully.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return "", opts, code, false
	}
	var err error
	opts.ackMode, err = parseAckMode(*ackMode)
	starts := map[string]bus.StartFrom{"newest": bus.StartNewest, "oldest": bus.StartOldest}
	start, known := starts[*from]
	opts.from = start
	var why string
	switch {
	case opts.topic == "":
		why = "--topic is required"
	case fs.NArg() > 0:
		why = fmt.Sprintf("unexpected arguments %q", fs.Args())
	case !known:
		why = fmt.Sprintf("--from %q: want oldest or newest", *from)
	case err != nil:
		why = fmt.Sprintf("--ack-mode: %v", err)
	case opts.maxInFlight < 1 || opts.count < 0:
		why = "--max-in-flight must be >= 1 and --count >= 0"
	}
	if why != "" {
		fmt.Fprintf(stderr, "bus tail: %s\n", why)
		return "", opts, exitUsage, false
	}
	return *url, opts, 0, true
}

// tail prints deliveries of opts.topic to out until ctx ends or opts.count
// deliveries were printed, then closes the subscription, letting printing
// handlers finish and flushing acks.
func tail(ctx context.Context, s bus.Subscriber, opts tailOptions, out io.Writer) error {
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	p := &tailPrinter{opts: opts, out: out, stop: cancel}
	subOpts := []bus.SubscribeOption{
		bus.WithGroup(opts.group),
		bus.WithStartFrom(opts.from),
		bus.WithAckMode(opts.ackMode),
		bus.WithMaxInFlight(opts.maxInFlight),
	}
	if opts.count > 0 {
		p.limit = newCountLimiter(opts.count)
		subOpts = append(subOpts, bus.WithLimiter(p.limit))
	}
	sub, err := s.Subscribe(context.WithoutCancel(ctx), opts.topic, p.handle, subOpts...)
	if err != nil {
		return err
	}
	select {
	case <-stop.Done():
	case <-sub.Done():
	}
	closeCtx, cancelClose := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelClose()
	cerr := sub.Close(closeCtx)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.werr != nil:
		return fmt.Errorf("write: %w", p.werr)
	case sub.Err() != nil:
		return sub.Err()
	}
	return cerr
}

// tailPrinter is tail's handler: it prints each delivery, stops tail after
// opts.count of them or a write error, and in manual mode settles them.
type tailPrinter struct {
	opts  tailOptions
	out   io.Writer
	stop  context.CancelFunc
	limit *countLimiter

	mu      sync.Mutex
	printed int
	werr    error
}

func (p *tailPrinter) handle(hctx context.Context, d *bus.Delivery) error {
	p.mu.Lock()
	line := ""
	if p.opts.asJSON {
		line = formatDeliveryJSON(d)
	} else {
		line = formatDelivery(d)
	}
	_, err := io.WriteString(p.out, line)
	if err != nil && p.werr == nil {
		p.werr = err
		p.stop()
	}
	p.printed++
	if p.limit != nil {
		p.limit.printed()
		if p.printed == p.opts.count {
			p.stop()
		}
	}
	p.mu.Unlock()
	if err != nil {
		if p.opts.ackMode == bus.AckManual {
			// Not printed: hand it back now rather than at the end of its
			// lease.
			_ = d.Nack(hctx, 0)
		}
		return err
	}
	if p.opts.ackMode == bus.AckManual {
		return d.Ack(hctx)
	}
	return nil
}

// deliveryJSON is one line of bus tail --json.
type deliveryJSON struct {
	ID              string            `json:"id"`
	Key             string            `json:"key,omitempty"`
	Headers         map[string]string `json:"headers,omitempty"`
	Attempt         int               `json:"attempt"`
	Published       time.Time         `json:"published,omitzero"`
	Payload         string            `json:"payload"`
	PayloadEncoding string            `json:"payload_encoding"`
}

// formatDeliveryJSON renders one delivery as a JSON object on one line.
func formatDeliveryJSON(d *bus.Delivery) string {
	p, enc := encodePayload(d.Payload)
	b, err := json.Marshal(deliveryJSON{ID: d.ID, Key: d.Key, Headers: d.Headers, Attempt: d.Attempt, Published: d.PublishedAt.UTC(), Payload: p, PayloadEncoding: enc})
	if err != nil { // cannot happen: every field marshals
		return fmt.Sprintf("{\"id\":%q,\"error\":%q}\n", d.ID, err.Error())
	}
	return string(b) + "\n"
}

// formatDelivery renders one delivery as a line; the payload and header
// values are quoted with Go escapes, so binary data prints safely.
func formatDelivery(d *bus.Delivery) string {
	var b strings.Builder
	b.WriteString("id=")
	b.WriteString(d.ID)
	b.WriteString(" attempt=")
	b.WriteString(strconv.Itoa(d.Attempt))
	if !d.PublishedAt.IsZero() {
		b.WriteString(" published=")
		b.WriteString(d.PublishedAt.UTC().Format(time.RFC3339Nano))
	}
	if d.Key != "" {
		b.WriteString(" key=")
		b.WriteString(strconv.Quote(d.Key))
	}
	if len(d.Headers) > 0 {
		keys := make([]string, 0, len(d.Headers))
		for k := range d.Headers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteString(" headers={")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k)
			b.WriteByte('=')
			b.WriteString(strconv.Quote(d.Headers[k]))
		}
		b.WriteByte('}')
	}
	b.WriteString(" payload=")
	b.WriteString(strconv.Quote(string(d.Payload)))
	b.WriteByte('\n')
	return b.String()
}
