package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/internal/registry"
)

// adminFlags are the flags every inspection command shares.
type adminFlags struct {
	fs      *flag.FlagSet
	url     *string
	asJSON  *bool
	timeout *time.Duration
}

func newAdminFlags(name, usageLine, about string, stderr io.Writer) *adminFlags {
	fs := flag.NewFlagSet("bus "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := &adminFlags{
		fs:      fs,
		url:     fs.String("url", defaultURL(), "backend URL (default $BUS_URL, else mem://)"),
		asJSON:  fs.Bool("json", false, "print JSON instead of a table"),
		timeout: fs.Duration("timeout", 30*time.Second, "give up after this long"),
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s\n\n%s\n\nFlags:\n", usageLine, about)
		fs.PrintDefaults()
	}
	return a
}

// open opens the bus for an inspection command, bounded by --timeout.
func (a *adminFlags) open(ctx context.Context, opts ...bus.Option) (*bus.Bus, context.Context, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, *a.timeout)
	b, err := bus.Open(ctx, *a.url, opts...)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	done := func() {
		closeCtx, c := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer c()
		_ = b.Close(closeCtx)
		cancel()
	}
	return b, ctx, done, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeJSONLine writes v as one line of compact JSON (--json of bus bench).
func writeJSONLine(w io.Writer, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// warnPrivateMem tells the user that a mem:// broker dies with the command.
func warnPrivateMem(rawURL string, stderr io.Writer) {
	if strings.HasPrefix(strings.ToLower(rawURL), "mem:") {
		fmt.Fprintf(stderr, "bus: warning: %s is an in-process broker: nothing published or consumed here outlives this command (use --url or $BUS_URL for a shared backend)\n", rawURL)
	}
}

func topicsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "create" {
		return topicsCreateCmd(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "delete" {
		return topicsDeleteCmd(ctx, args[1:], stdout, stderr)
	}
	a := newAdminFlags("topics", "bus topics [--dead-letters] [flags]\n       bus topics create TOPIC --partitions N [flags]\n       bus topics delete TOPIC --yes [flags]",
		"Lists the topics with their retained messages, size and publish times (partition p of\na partitioned topic T is listed as T~p); with --db, also the outbox's pending and dead rows.\n\"create\" creates a topic with N partitions; \"delete\" removes a topic with its messages and groups.", stderr)
	dead := a.fs.Bool("dead-letters", false, "list only the topics that hold dead letters (found by their headers, whatever their names)")
	db := a.fs.String("db", "", "also show the transactional outbox in this PostgreSQL database: rows pending and dead rows")
	if code, ok := parseFlags(a.fs, args); !ok {
		return code
	}
	if a.fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bus topics: unexpected arguments %q\n", a.fs.Args())
		return exitUsage
	}
	b, ctx, done, err := a.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "bus topics: %v\n", err)
		return exitFailure
	}
	defer done()
	ts, err := b.Topics(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "bus topics: %v\n", err)
		return exitFailure
	}
	if *dead {
		ts = slices.DeleteFunc(ts, func(t bus.TopicInfo) bool { return !t.DeadLetters })
	}
	if ts == nil {
		ts = []bus.TopicInfo{}
	}
	if *db != "" {
		return topicsWithOutbox(ctx, ts, *db, *a.asJSON, stdout, stderr)
	}
	if *a.asJSON {
		return exitCode(writeJSON(stdout, ts), stderr, "topics")
	}
	return exitCode(writeTopicsTable(stdout, ts), stderr, "topics")
}

func writeTopicsTable(w io.Writer, ts []bus.TopicInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tMESSAGES\tBYTES\tOLDEST\tNEWEST\tSCHEDULED\tNEXT DUE")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Messages, t.Bytes, fmtTime(t.Oldest), fmtTime(t.Newest), t.Scheduled, fmtTime(t.NextDue))
	}
	return tw.Flush()
}

// topicsDeleteCmd removes a topic; it wants --yes, since nothing brings
// the messages back.
func topicsDeleteCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("topics delete", "bus topics delete TOPIC --yes [flags]",
		"Removes TOPIC with its retained messages and consumer groups. Nothing brings them back.", stderr)
	yes := a.fs.Bool("yes", false, "really delete")
	if code, ok := parseFlags(a.fs, args); !ok {
		return code
	}
	if a.fs.NArg() != 1 {
		fmt.Fprintln(stderr, "bus topics delete: give one topic")
		return exitUsage
	}
	topic := a.fs.Arg(0)
	if !*yes {
		fmt.Fprintf(stderr, "bus topics delete: this removes %s with its messages and groups; add --yes\n", topic)
		return exitUsage
	}
	b, ctx, done, err := a.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "bus topics delete: %v\n", err)
		return exitFailure
	}
	defer done()
	found, err := topicExists(ctx, b, topic)
	if err != nil {
		fmt.Fprintf(stderr, "bus topics delete: %v\n", err)
		return exitFailure
	}
	// A topic not listed may still have keys of its own (a group lock
	// whose holder died): the delete sweeps them all the same.
	if err := b.DeleteTopic(ctx, topic); err != nil {
		fmt.Fprintf(stderr, "bus topics delete: %v\n", err)
		return exitFailure
	}
	if !found {
		fmt.Fprintf(stderr, "bus topics delete: there is no topic %s: nothing to delete\n", topic)
		return exitFailure
	}
	fmt.Fprintf(stdout, "deleted %s\n", topic)
	return exitOK
}

// topicExists reports whether the backend lists topic, or a partition of
// it. A backend that cannot list topics counts it as there.
func topicExists(ctx context.Context, b *bus.Bus, topic string) (bool, error) {
	ts, err := b.Topics(ctx)
	if errors.Is(err, bus.ErrUnsupported) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return listed(ts, topic), nil
}

// topicsCreateCmd creates a partitioned topic.
func topicsCreateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("topics create", "bus topics create TOPIC --partitions N [flags]",
		"Creates TOPIC with N partitions (1 to 1024), stored at the broker. A topic's partitions\nare set once; a topic already used has 1.", stderr)
	parts := a.fs.Int("partitions", 1, "number of partitions")
	if code, ok := parseFlags(a.fs, args); !ok {
		return code
	}
	if a.fs.NArg() != 1 {
		fmt.Fprintln(stderr, "bus topics create: give one topic")
		return exitUsage
	}
	topic := a.fs.Arg(0)
	b, ctx, done, err := a.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "bus topics create: %v\n", err)
		return exitFailure
	}
	defer done()
	if err := b.CreateTopic(ctx, topic, *parts); err != nil {
		fmt.Fprintf(stderr, "bus topics create: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "created %s with %d partition(s)\n", topic, *parts)
	return exitOK
}

func groupsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "reset" {
		return groupsResetCmd(ctx, args[1:], stdout, stderr)
	}
	a := newAdminFlags("groups", "bus groups --topic T [--events TOPIC] [--dlq D] [flags]", "Lists the consumer groups of a topic with consumers, in flight (pending) and lag, and\nthe keys each holds (bus.KeyHold) when any does, from the dead-letter topic;\nwith --events, also the in-flight bound of each autoscaled member (bus.WithAutoscale)\nfrom the scaled events on the lifecycle events topic (bus.WithEvents).", stderr)
	topic := a.fs.String("topic", "", "topic (required)")
	dlq := a.fs.String("dlq", "", "dead-letter topic to count the held keys on (default <topic>.dlq)")
	events := a.fs.String("events", "", "lifecycle events topic to read the members' in-flight bounds from")
	eventsLimit := a.fs.Int("events-limit", lifecycle.DefaultScanLimit, "with --events: read at most this many events")
	if code, ok := parseFlags(a.fs, args); !ok {
		return code
	}
	if *topic == "" {
		fmt.Fprintln(stderr, "bus groups: --topic is required, for example: bus groups --url redis://127.0.0.1:6379 --topic orders")
		return exitUsage
	}
	if a.fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bus groups: unexpected arguments %q (the topic is given with --topic)\n", a.fs.Args())
		return exitUsage
	}
	if *events != "" && (bus.ValidateTopic(*events) != nil || *eventsLimit < 1) {
		fmt.Fprintln(stderr, "bus groups: --events must be a valid topic and --events-limit >= 1")
		return exitUsage
	}
	b, ctx, done, err := a.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "bus groups: %v\n", err)
		return exitFailure
	}
	defer done()
	gs, err := b.Groups(ctx, *topic)
	if err != nil {
		fmt.Fprintf(stderr, "bus groups: %v\n", err)
		return exitFailure
	}
	rows := rowsOf(gs)
	if err := withHeld(ctx, b, *topic, dlqOf(*topic, *dlq), rows); err != nil {
		fmt.Fprintf(stderr, "bus groups: held keys unknown: %v\n", err)
	}
	if *events != "" {
		truncated, err := withBounds(ctx, *a.url, *events, *topic, rows, *eventsLimit)
		if err != nil {
			fmt.Fprintf(stderr, "bus groups: %v\n", err)
			return exitFailure
		}
		printBoundsNote(stderr, *events, truncated, *eventsLimit)
	}
	if *a.asJSON {
		return exitCode(writeJSON(stdout, rows), stderr, "groups")
	}
	return exitCode(printGroups(stdout, rows, *events != ""), stderr, "groups")
}

// groupsResetCmd moves a group, as Pub/Sub seeks a subscription.
func groupsResetCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("groups reset", "bus groups reset --topic T --group G --to oldest|newest|TIME [flags]",
		"Moves a consumer group: it then receives the messages from the target on, those it had\nreceived or settled before included, and none before it. TIME is RFC 3339\n(2026-11-24T09:00:00Z). Stop the group's members first where the backend asks for it.", stderr)
	topic := a.fs.String("topic", "", "topic (required)")
	group := a.fs.String("group", "", "consumer group (required)")
	to := a.fs.String("to", "", "oldest, newest or an RFC 3339 time (required)")
	if code, ok := parseFlags(a.fs, args); !ok {
		return code
	}
	target, err := parseSeekTarget(*to)
	if *topic == "" || *group == "" || err != nil || a.fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bus groups reset: give --topic, --group and --to oldest|newest|TIME (%v)\n", err)
		return exitUsage
	}
	b, ctx, done, err := a.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "bus groups reset: %v\n", err)
		return exitFailure
	}
	defer done()
	if err := b.SeekGroup(ctx, *topic, *group, target); err != nil {
		fmt.Fprintf(stderr, "bus groups reset: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "group %s of %s now reads from %s\n", *group, *topic, *to)
	return exitOK
}

// parseSeekTarget reads --to.
func parseSeekTarget(to string) (bus.SeekTarget, error) {
	switch to {
	case "oldest":
		return bus.SeekTarget{Oldest: true}, nil
	case "newest":
		return bus.SeekTarget{Newest: true}, nil
	case "":
		return bus.SeekTarget{}, errors.New("--to is missing")
	}
	t, err := time.Parse(time.RFC3339Nano, to)
	if err != nil {
		return bus.SeekTarget{}, fmt.Errorf("--to %q is not oldest, newest or an RFC 3339 time", to)
	}
	return bus.SeekTarget{Time: t}, nil
}

// deadLetterJSON is how bus dlq list --json prints a dead letter.
type deadLetterJSON struct {
	ID       string            `json:"id"`
	Key      string            `json:"key,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	Payload  string            `json:"payload"`
	Reason   string            `json:"reason"`
	Code     string            `json:"code"`
	Topic    string            `json:"topic"`
	Group    string            `json:"group"`
	Attempt  int               `json:"attempt"`
	Time     time.Time         `json:"time,omitzero"`
	Encoding string            `json:"payload_encoding"`
}

const dlqUsage = `Usage: bus dlq list|show|replay|purge (--topic DLQ | --of TOPIC) [flags]

  list     lists the dead letters of a dead-letter topic
  show ID  prints one dead letter whole: headers, reason, payload
  replay   puts dead letters back on their original topic (--all or --id ID...),
           and writes a replayed event for each to the events topic (--events)
  purge    deletes dead letters (--all or --id ID...)

--topic names the dead-letter topic as it is (any name WithDeadLetter gave
it; "bus topics --dead-letters" lists them); --of TOPIC means TOPIC's
default dead-letter topic, "TOPIC.dlq". IDs that name no dead letter are
an error (exit code 1).`

// dlqArgs is the parsed command line of a bus dlq subcommand.
type dlqArgs struct {
	*adminFlags
	sub    string
	dlq    string
	limit  int
	all    bool
	ids    idList
	events string // replay: the events topic ("": bus.events if it is there; "-": none)
}

func dlqCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	d, code, ok := parseDLQArgs(args, stderr)
	if !ok {
		return code
	}
	var opts []bus.Option
	if d.sub == "replay" {
		events, err := eventsToWrite(ctx, *d.url, d.events, *d.timeout)
		if err != nil {
			fmt.Fprintf(stderr, "bus dlq replay: %v\n", err)
			return exitFailure
		}
		if events == "" {
			fmt.Fprintf(stderr, "bus dlq replay: there is no events topic %s: the replays write no replayed event (--events TOPIC names one)\n", defaultEventsTopic)
		} else {
			opts = append(opts, bus.WithEvents(events))
		}
	}
	b, ctx, done, err := d.open(ctx, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "bus dlq %s: %v\n", d.sub, err)
		return exitFailure
	}
	defer done()
	switch d.sub {
	case "list":
		dls, err := b.DeadLetters(ctx, d.dlq, d.limit)
		if err != nil {
			fmt.Fprintf(stderr, "bus dlq list: %v\n", err)
			return exitFailure
		}
		return exitCode(printDeadLetters(stdout, dls, *d.asJSON), stderr, "dlq list")
	case "show":
		return showDeadLetter(ctx, b, d, stdout, stderr)
	case "replay":
		n, err := b.ReplayDeadLetters(ctx, d.dlq, d.ids...)
		return reportCount(stdout, stderr, "dlq replay", "replayed", d.dlq, n, err, *d.asJSON)
	default:
		n, err := b.PurgeDeadLetters(ctx, d.dlq, d.ids...)
		return reportCount(stdout, stderr, "dlq purge", "purged", d.dlq, n, err, *d.asJSON)
	}
}

// parseDLQArgs parses a bus dlq command line.
func parseDLQArgs(args []string, stderr io.Writer) (*dlqArgs, int, bool) {
	if len(args) == 0 || !slices.Contains([]string{"list", "show", "replay", "purge"}, args[0]) {
		fmt.Fprintln(stderr, dlqUsage)
		return nil, exitUsage, false
	}
	d := &dlqArgs{sub: args[0]}
	d.adminFlags = newAdminFlags("dlq "+d.sub, "bus dlq "+d.sub+" (--topic DLQ | --of TOPIC) [flags]", strings.SplitN(dlqUsage, "\n\n", 3)[2], stderr)
	topic := d.fs.String("topic", "", "the dead-letter topic, as it is")
	of := d.fs.String("of", "", "a topic whose default dead-letter topic (TOPIC.dlq) to use")
	switch d.sub {
	case "list":
		d.fs.IntVar(&d.limit, "limit", 100, "list at most this many (0: all)")
	case "replay", "purge":
		d.fs.BoolVar(&d.all, "all", false, "every dead letter of the topic")
		d.fs.Var(&d.ids, "id", "message ID (repeatable)")
	}
	if d.sub == "replay" {
		d.fs.StringVar(&d.events, "events", "", "the events topic (bus.WithEvents) to write each replayed event to (default "+defaultEventsTopic+" when it exists; - for none)")
	}
	if code, ok := parseFlags(d.fs, args[1:]); !ok {
		return nil, code, false
	}
	if (*topic == "") == (*of == "") {
		fmt.Fprintf(stderr, "bus dlq %s: give --topic DLQ or --of TOPIC\n", d.sub)
		return nil, exitUsage, false
	}
	d.dlq = *topic
	if *of != "" {
		d.dlq = *of + ".dlq" // the bus's default dead-letter topic
	}
	code, ok := checkDLQArgs(d, stderr)
	return d, code, ok
}

// checkDLQArgs checks the arguments of a subcommand; it returns the exit
// code and whether to go on.
func checkDLQArgs(d *dlqArgs, stderr io.Writer) (int, bool) {
	switch {
	case d.sub == "show" && d.fs.NArg() != 1:
		fmt.Fprintln(stderr, "bus dlq show: give one message ID")
		return exitUsage, false
	case d.sub == "show":
		d.ids = idList{d.fs.Arg(0)}
	case d.fs.NArg() > 0:
		fmt.Fprintf(stderr, "bus dlq %s: unexpected arguments %q\n", d.sub, d.fs.Args())
		return exitUsage, false
	case d.sub != "list" && d.all == (len(d.ids) > 0):
		fmt.Fprintf(stderr, "bus dlq %s: give either --all or --id\n", d.sub)
		return exitUsage, false
	}
	return 0, true
}

// showDeadLetter prints one dead letter whole.
func showDeadLetter(ctx context.Context, b *bus.Bus, d *dlqArgs, stdout, stderr io.Writer) int {
	dls, err := b.DeadLetters(ctx, d.dlq, 0)
	if err != nil {
		fmt.Fprintf(stderr, "bus dlq show: %v\n", err)
		return exitFailure
	}
	i := slices.IndexFunc(dls, func(dl bus.DeadLetter) bool { return dl.ID == d.ids[0] })
	if i < 0 {
		fmt.Fprintf(stderr, "bus dlq show: %q is not a dead letter of %s: %v\n", d.ids[0], d.dlq, bus.ErrNotFound)
		return exitFailure
	}
	dl := dls[i]
	p, enc := encodePayload(dl.Payload)
	j := deadLetterJSON{ID: dl.ID, Key: dl.Key, Headers: dl.Headers, Payload: p, Encoding: enc,
		Reason: dl.Reason, Code: string(dl.Code), Topic: dl.Topic, Group: dl.Group, Attempt: dl.Attempt, Time: dl.Time}
	if *d.asJSON {
		return exitCode(writeJSON(stdout, j), stderr, "dlq show")
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\nkey\t%s\nfrom\t%s\ngroup\t%s\nattempt\t%d\ntime\t%s\ncode\t%s\nreason\t%s\n",
		j.ID, orDash(j.Key), j.Topic, orDash(j.Group), j.Attempt, fmtTime(j.Time), orDash(j.Code), j.Reason)
	for _, k := range slices.Sorted(maps.Keys(j.Headers)) {
		fmt.Fprintf(tw, "header %s\t%s\n", k, j.Headers[k])
	}
	fmt.Fprintf(tw, "payload (%s)\t%s\n", j.Encoding, j.Payload)
	return exitCode(tw.Flush(), stderr, "dlq show")
}

func reportCount(stdout, stderr io.Writer, cmd, verb, dlq string, n int, err error, asJSON bool) int {
	if asJSON {
		out := map[string]any{"topic": dlq, verb: n}
		if err != nil {
			out["error"] = err.Error()
		}
		if werr := writeJSON(stdout, out); werr != nil && err == nil {
			err = werr
		}
	} else {
		fmt.Fprintf(stdout, "%s %d dead letter(s) of %s\n", verb, n, dlq)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bus %s: %v\n", cmd, err)
		return exitFailure
	}
	return exitOK
}

func printDeadLetters(w io.Writer, dls []bus.DeadLetter, asJSON bool) error {
	if asJSON {
		out := make([]deadLetterJSON, 0, len(dls))
		for _, d := range dls {
			p, enc := encodePayload(d.Payload)
			out = append(out, deadLetterJSON{
				ID: d.ID, Key: d.Key, Headers: d.Headers, Payload: p, Encoding: enc,
				Reason: d.Reason, Code: string(d.Code), Topic: d.Topic, Group: d.Group, Attempt: d.Attempt, Time: d.Time,
			})
		}
		return writeJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCODE\tTOPIC\tGROUP\tATTEMPT\tTIME\tREASON")
	for _, d := range dls {
		reason := d.Reason
		if len(reason) > 80 {
			reason = reason[:77] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.ID, orDash(string(d.Code)), d.Topic, orDash(d.Group), d.Attempt, fmtTime(d.Time), reason)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// idList collects repeated --id flags.
type idList []string

func (l *idList) String() string { return strings.Join(*l, ",") }
func (l *idList) Set(s string) error {
	if s == "" {
		return errors.New("empty id")
	}
	*l = append(*l, s)
	return nil
}

func exitCode(err error, stderr io.Writer, cmd string) int {
	if err != nil {
		fmt.Fprintf(stderr, "bus %s: %v\n", cmd, err)
		return exitFailure
	}
	return exitOK
}

// encodePayload returns the payload as text when it is valid UTF-8, else as
// standard base64, and which of the two it is ("text" or "base64").
func encodePayload(p []byte) (string, string) {
	if utf8.Valid(p) {
		return string(p), "text"
	}
	return base64.StdEncoding.EncodeToString(p), "base64"
}

func statsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("stats", "bus stats [--watch] [flags]", "Shows every topic with its groups; --watch refreshes and adds publish and consume rates.", stderr)
	watch := a.fs.Bool("watch", false, "refresh until interrupted, with rates")
	every := a.fs.Duration("interval", 2*time.Second, "refresh interval with --watch")
	if code, ok := parseFlags(a.fs, args); !ok {
		return code
	}
	if a.fs.NArg() > 0 || *every <= 0 {
		fmt.Fprintln(stderr, "bus stats: takes no arguments, and --interval must be > 0")
		return exitUsage
	}
	openCtx, cancelOpen := context.WithTimeout(ctx, *a.timeout)
	b, err := bus.Open(openCtx, *a.url)
	cancelOpen()
	if err != nil {
		fmt.Fprintf(stderr, "bus stats: %v\n", err)
		return exitFailure
	}
	defer func() {
		closeCtx, c := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer c()
		_ = b.Close(closeCtx)
	}()
	var prev *snapshot
	for {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		snap, err := takeSnapshot(sctx, b)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return exitOK
			}
			fmt.Fprintf(stderr, "bus stats: %v\n", err)
			return exitFailure
		}
		if *a.asJSON {
			if err := writeJSON(stdout, snap.withRates(prev)); err != nil {
				return exitCode(err, stderr, "stats")
			}
		} else {
			writeSnapshot(stdout, snap, prev)
		}
		if !*watch {
			return exitOK
		}
		prev = snap
		select {
		case <-ctx.Done():
			return exitOK
		case <-time.After(*every):
		}
	}
}

// snapshot is the state of every topic at one time.
type snapshot struct {
	At     time.Time   `json:"at"`
	Topics []topicStat `json:"topics"`
}

type topicStat struct {
	bus.TopicInfo
	// PublishRate is messages published per second since the previous
	// snapshot, from the growth of Published (null on the first, or when
	// Published is unknown).
	PublishRate *float64        `json:"publish_rate"`
	Groups      []bus.GroupInfo `json:"groups"`
	// Bounds are, by group, the in-flight bounds of its autoscaled
	// members (the dashboard, from the lifecycle events topic).
	Bounds map[string][]lifecycle.Bound `json:"bounds,omitempty"`
}

func takeSnapshot(ctx context.Context, b *bus.Bus) (*snapshot, error) {
	ts, err := b.Topics(ctx)
	if err != nil {
		return nil, err
	}
	s := &snapshot{At: time.Now(), Topics: make([]topicStat, 0, len(ts))}
	for _, t := range ts {
		gs, err := b.Groups(ctx, t.Name)
		if err != nil {
			return nil, err
		}
		if gs == nil {
			gs = []bus.GroupInfo{}
		}
		s.Topics = append(s.Topics, topicStat{TopicInfo: t, Groups: gs})
	}
	return s, nil
}

// withRates fills PublishRate from the growth of Published (the count
// of messages that entered the topic, which retention does not lower)
// since prev. Where the backend keeps no such count, or it went down
// (the topic was deleted and made again), the rate stays unknown (nil).
func (s *snapshot) withRates(prev *snapshot) *snapshot {
	if prev == nil {
		return s
	}
	dt := s.At.Sub(prev.At).Seconds()
	for i := range s.Topics {
		t := &s.Topics[i]
		for _, p := range prev.Topics {
			if p.Name == t.Name && p.Published.Known() && t.Published.Known() && t.Published >= p.Published && dt > 0 {
				r := float64(t.Published-p.Published) / dt
				t.PublishRate = &r
			}
		}
	}
	return s
}

func writeSnapshot(w io.Writer, s, prev *snapshot) {
	s.withRates(prev)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\n", s.At.UTC().Format(time.RFC3339))
	fmt.Fprintln(tw, "TOPIC\tMESSAGES\tRATE/S\tGROUP\tCONSUMERS\tPENDING\tLAG")
	for _, t := range s.Topics {
		rate := "-" // the first snapshot has no rate yet
		switch {
		case t.PublishRate != nil:
			rate = fmt.Sprintf("%.1f", *t.PublishRate)
		case !t.Published.Known():
			rate = "unknown"
		}
		if len(t.Groups) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\n", t.Name, t.Messages, rate)
		}
		for i, g := range t.Groups {
			name, msgs, r := t.Name, t.Messages.String(), rate
			if i > 0 {
				name, msgs, r = "", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, msgs, r, g.Name, g.Consumers, g.Pending, g.Lag)
		}
	}
	_ = tw.Flush()
}

func versionCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "bus version: unexpected arguments %q\n", args)
		return exitUsage
	}
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	schemes := registry.Schemes()
	slices.Sort(schemes)
	fmt.Fprintf(stdout, "bus %s\nbackends: %s\n", version, strings.Join(schemes, " "))
	return exitOK
}

// printGroups prints groups as a table; on a partitioned topic with a row
// per partition and its owner; with bounds, each autoscaled member's
// in-flight bound.
func printGroups(w io.Writer, gs []groupRow, bounds bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	parted := len(gs) > 0 && gs[0].Partitions > 0
	head := "GROUP\tCONSUMERS\tPENDING\tLAG\tOLDEST PENDING"
	if parted {
		head = "GROUP\tPARTITION\tOWNER\tCONSUMERS\tPENDING\tLAG\tOLDEST PENDING"
	}
	if bounds {
		head += "\tBOUND"
	}
	held := slices.ContainsFunc(gs, func(g groupRow) bool { return g.HeldKeys > 0 })
	if held {
		head += "\tHELD KEYS"
	}
	fmt.Fprintln(tw, head)
	for _, g := range gs {
		if parted {
			owner := g.Owner
			if owner == "" {
				owner = "-"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t", g.Name, g.Partition, owner)
		} else {
			fmt.Fprintf(tw, "%s\t", g.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s", g.Consumers, g.Pending, g.Lag, fmtTime(g.OldestPending))
		if bounds {
			fmt.Fprintf(tw, "\t%s", fmtBounds(g.Bounds, !parted))
		}
		if held {
			fmt.Fprintf(tw, "\t%d", g.HeldKeys)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
