package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"strings"
	"time"

	"github.com/eventbus-go/bus"
)

// headerFlag collects repeated --header k=v flags.
type headerFlag map[string]string

func (h headerFlag) String() string {
	parts := make([]string, 0, len(h))
	for k, v := range h {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (h headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("header %q: want key=value", s)
	}
	h[k] = v
	return nil
}

// publishOptions is the parsed command line of bus publish.
type publishOptions struct {
	topic   string
	key     string
	headers map[string]string
}

func publishCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bus publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rawURL := fs.String("url", defaultURL(), "backend URL (default $BUS_URL, else mem://)")
	opts := publishOptions{headers: headerFlag{}}
	fs.StringVar(&opts.topic, "topic", "", "topic to publish to (required)")
	fs.StringVar(&opts.key, "key", "", "message key")
	fs.Var(headerFlag(opts.headers), "header", "header as key=value (repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bus publish --topic T [flags] [payload...]\n\nPublishes each payload argument as a message, or each line of stdin when\nthere is none, and prints the ID of each message.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if opts.topic == "" {
		fmt.Fprintln(stderr, "bus publish: --topic is required")
		return exitUsage
	}
	warnPrivateMem(*rawURL, stderr)
	b, err := bus.Open(ctx, *rawURL)
	if err != nil {
		fmt.Fprintf(stderr, "bus publish: %v\n", err)
		return exitFailure
	}
	n, err := publishAll(ctx, b, opts, fs.Args(), stdin, stdout)
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if cerr := b.Close(closeCtx); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "bus publish: %d published, then: %v\n", n, err)
		return exitFailure
	}
	return exitOK
}

// publishAll publishes payloads, or each line of in when payloads is
// empty, writing each message ID to out. It returns how many it published.
func publishAll(ctx context.Context, p bus.Publisher, opts publishOptions, payloads []string, in io.Reader, out io.Writer) (int, error) {
	n := 0
	send := func(payload []byte) error {
		m := &bus.Message{Key: opts.key, Payload: payload}
		if len(opts.headers) > 0 {
			m.Headers = maps.Clone(opts.headers) // publish middleware may add to it
		}
		if err := p.Publish(ctx, opts.topic, m); err != nil {
			return err
		}
		n++
		_, err := fmt.Fprintln(out, m.ID)
		return err
	}
	if len(payloads) > 0 {
		for _, s := range payloads {
			if err := send([]byte(s)); err != nil {
				return n, err
			}
		}
		return n, nil
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), bus.DefaultMaxPayload+1)
	for sc.Scan() {
		if err := send(append([]byte(nil), sc.Bytes()...)); err != nil {
			return n, err
		}
	}
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("read stdin: %w", err)
	}
	return n, nil
}
