package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/internal/registry"
)

// defaultEventsTopic is the events topic the command and the dashboard
// read unless told otherwise; the docs suggest it for bus.WithEvents.
const defaultEventsTopic = "bus.events"

const historyAbout = `Prints the timeline of a message: the lifecycle events that buses opened with
bus.WithEvents wrote to the events topic (received, succeeded, failed, retry
scheduled, snoozed, dead-lettered, expired, replayed), merged with the dead
letters the dead-letter topics hold now. --key shows every message with that
key. The events topic is read from its oldest message, at most --limit events
of it, within --timeout.`

func historyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("history", "bus history (--id ID | --key K) [--events TOPIC] [flags]", historyAbout, stderr)
	id := a.fs.String("id", "", "message ID")
	key := a.fs.String("key", "", "message key (every message with it)")
	events := a.fs.String("events", defaultEventsTopic, "the events topic (bus.WithEvents)")
	limit := a.fs.Int("limit", lifecycle.DefaultScanLimit, "read at most this many events")
	var dlqs idList
	a.fs.Var(&dlqs, "dlq", "dead-letter topic to search (repeatable; default: every topic that holds dead letters)")
	if code, ok := parseFlags(a.fs, args); !ok {
		return code
	}
	switch {
	case a.fs.NArg() > 0:
		fmt.Fprintf(stderr, "bus history: unexpected arguments %q\n", a.fs.Args())
		return exitUsage
	case (*id == "") == (*key == ""):
		fmt.Fprintln(stderr, "bus history: give --id or --key")
		return exitUsage
	case *limit < 1:
		fmt.Fprintln(stderr, "bus history: --limit must be >= 1")
		return exitUsage
	}
	if err := bus.ValidateTopic(*events); err != nil {
		fmt.Fprintf(stderr, "bus history: --events: %v\n", err)
		return exitUsage
	}
	warnPrivateMem(*a.url, stderr)
	ctx, cancel := context.WithTimeout(ctx, *a.timeout)
	defer cancel()
	in, done, err := openInspector(ctx, *a.url)
	if err != nil {
		fmt.Fprintf(stderr, "bus history: %v\n", err)
		return exitFailure
	}
	defer done()
	q := lifecycle.Query{ID: *id, Key: *key, Limit: *limit, DeadLetterTopics: dlqs}
	h, err := lifecycle.Read(ctx, in, *events, q)
	if err != nil {
		fmt.Fprintf(stderr, "bus history: %v\n", err)
		return exitFailure
	}
	if *a.asJSON {
		if h.Entries == nil {
			h.Entries = []lifecycle.Entry{}
		}
		return exitCode(writeJSON(stdout, h), stderr, "history")
	}
	if h.Truncated {
		fmt.Fprintf(stderr, "bus history: read the first %d events of %s only; raise --limit for more\n", h.Scanned, *events)
	}
	if note := eventsNote(&h, *events); note != "" {
		fmt.Fprintf(stderr, "bus history: %s\n", note)
	}
	if len(h.Entries) == 0 {
		fmt.Fprintf(stderr, "bus history: nothing about %s in %s or the dead-letter topics (is the bus opened with bus.WithEvents(%q)?)\n", orDash(*id+*key), *events, *events)
		return exitFailure
	}
	return exitCode(printHistory(stdout, h.Entries), stderr, "history")
}

// eventsNote says when the history comes from the dead-letter topics
// alone because the events topic is missing or empty; "" otherwise.
func eventsNote(h *lifecycle.History, events string) string {
	switch {
	case h.EventsMissing:
		return fmt.Sprintf("there is no events topic %s: the history below comes from the dead-letter topics alone (--events names another; buses write events with bus.WithEvents)", events)
	case h.Scanned == 0:
		return fmt.Sprintf("the events topic %s is empty: the history below comes from the dead-letter topics alone", events)
	}
	return ""
}

// printHistory prints a timeline as a table.
func printHistory(w io.Writer, entries []lifecycle.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tEVENT\tID\tTOPIC\tGROUP\tATTEMPT\tMEMBER\tDETAIL")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.Time.UTC().Format(time.RFC3339Nano), e.Kind, e.MessageID,
			orDash(e.Topic), orDash(e.Group), e.Attempt, orDash(e.Member), historyDetail(&e))
	}
	return tw.Flush()
}

// historyDetail is what a timeline entry says besides its columns.
func historyDetail(e *lifecycle.Entry) string {
	var parts []string
	add := func(format string, v any) { parts = append(parts, fmt.Sprintf(format, v)) }
	if e.Duration > 0 {
		add("took %v", e.Duration)
	}
	if e.Delay > 0 {
		add("next in %v", e.Delay)
	}
	if e.Code != "" {
		add("code %s", e.Code)
	}
	if e.DeadLetter != "" {
		add("dead-letter topic %s", e.DeadLetter)
	}
	if e.Held {
		parts = append(parts, "held there now")
	}
	if e.Error != "" {
		add("error: %s", e.Error)
	}
	return orDash(strings.Join(parts, ", "))
}

// eventsToWrite returns the events topic that a replay writes its
// replayed events to: flag when given, none for "-", else
// defaultEventsTopic when it is there (a bus writes events to it), so a
// replay does not make an events topic nobody reads.
func eventsToWrite(ctx context.Context, rawURL, flag string, timeout time.Duration) (string, error) {
	switch flag {
	case "-":
		return "", nil
	case "":
	default:
		if err := bus.ValidateTopic(flag); err != nil {
			return "", fmt.Errorf("--events: %w", err)
		}
		return flag, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	in, done, err := openInspector(ctx, rawURL)
	if err != nil {
		return "", nil // the replay itself reports what is wrong with the backend
	}
	defer done()
	ts, err := in.Topics(ctx)
	if err != nil {
		return "", err
	}
	if !listed(ts, defaultEventsTopic) {
		return "", nil
	}
	return defaultEventsTopic, nil
}

// listed reports whether ts lists topic or a partition of it.
func listed(ts []bus.TopicInfo, topic string) bool {
	for _, t := range ts {
		base, _, ok := bus.SplitPartitionTopic(t.Name)
		if t.Name == topic || ok && base == topic {
			return true
		}
	}
	return false
}

// openInspector opens the backend of rawURL for reading its topics, as
// bus.Open would open it.
func openInspector(ctx context.Context, rawURL string) (backend.Inspector, func(), error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, nil, fmt.Errorf("bad backend URL (want scheme://...)")
	}
	open, ok := registry.Lookup(u.Scheme)
	if !ok {
		return nil, nil, fmt.Errorf("unknown backend scheme %q (known: %v)", u.Scheme, registry.Schemes())
	}
	be, err := open(ctx, u)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s backend: %w", u.Scheme, err)
	}
	in, ok := be.(backend.Inspector)
	if !ok {
		_ = be.Close()
		return nil, nil, errors.New(be.Capabilities().Name + " cannot be inspected")
	}
	return in, func() { _ = be.Close() }, nil
}
