package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/eventbus-go/bus"
)

// keysCmd lists and releases the keys that key-ordered subscriptions
// hold (bus.WithKeyFailure(bus.KeyHold)).
func keysCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "bus keys: give a subcommand: list or release")
		return exitUsage
	}
	switch args[0] {
	case "list":
		return keysListCmd(ctx, args[1:], stdout, stderr)
	case "release":
		return keysReleaseCmd(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "bus keys: unknown subcommand %q (want list or release)\n", args[0])
	return exitUsage
}

// dlqOf is the dead-letter topic of topic: dlq when given, else the
// default "<topic>.dlq".
func dlqOf(topic, dlq string) string {
	if dlq != "" {
		return dlq
	}
	return topic + ".dlq"
}

func keysListCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("keys list", "bus keys list --topic T [--dlq D] [flags]",
		"Lists the keys that the groups of a topic hold (bus.WithKeyFailure(bus.KeyHold)): each\nheld key's dead-lettered head and how many messages are parked behind it,\nas the dead-letter topic shows them.", stderr)
	topic := a.fs.String("topic", "", "topic (required)")
	dlq := a.fs.String("dlq", "", "dead-letter topic (default <topic>.dlq)")
	if code, ok := parseFlags(a.fs, args); !ok {
		return code
	}
	if *topic == "" || a.fs.NArg() > 0 {
		fmt.Fprintln(stderr, "bus keys list: give --topic (and no arguments), for example: bus keys list --topic ledger")
		return exitUsage
	}
	b, ctx, done, err := a.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "bus keys list: %v\n", err)
		return exitFailure
	}
	defer done()
	keys, err := heldKeysOf(ctx, b, *topic, dlqOf(*topic, *dlq))
	if err != nil {
		fmt.Fprintf(stderr, "bus keys list: %v\n", err)
		return exitFailure
	}
	if *a.asJSON {
		out := make([]heldKeyJSON, len(keys))
		for i, k := range keys {
			out[i] = heldKeyJSON{Topic: k.Topic, Group: k.Group, Key: k.Key, Head: k.Head, Parked: k.Parked, Since: k.Since}
		}
		return exitCode(writeJSON(stdout, out), stderr, "keys list")
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tKEY\tHEAD\tPARKED\tSINCE")
	for _, k := range keys {
		head := k.Head
		if head == "" {
			head = "- (parked only)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", k.Group, k.Key, head, k.Parked, fmtTime(k.Since))
	}
	return exitCode(tw.Flush(), stderr, "keys list")
}

// heldKeyJSON is a held key as bus keys list --json prints it.
type heldKeyJSON struct {
	Topic  string    `json:"topic"`
	Group  string    `json:"group"`
	Key    string    `json:"key"`
	Head   string    `json:"head,omitempty"`
	Parked int       `json:"parked"`
	Since  time.Time `json:"since,omitzero"`
}

// heldKeysOf lists the keys held on topic, whose dead letters are on dlq.
func heldKeysOf(ctx context.Context, b *bus.Bus, topic, dlq string) ([]bus.HeldKey, error) {
	all, err := b.HeldKeys(ctx, dlq)
	if err != nil {
		return nil, err
	}
	keys := all[:0]
	for _, k := range all {
		if k.Topic == topic {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func keysReleaseCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("keys release", "bus keys release --topic T --group G --key K [--dlq D] [flags]",
		"Releases a held key: its dead-lettered head stays given up (code released), and the\nmessages parked behind it are handled, in their order. To handle the head too,\nreplay it instead: bus dlq replay --of T --id HEAD.", stderr)
	topic := a.fs.String("topic", "", "topic (required)")
	group := a.fs.String("group", "", "consumer group (required)")
	key := a.fs.String("key", "", "held key (required)")
	dlq := a.fs.String("dlq", "", "dead-letter topic (default <topic>.dlq)")
	if code, ok := parseFlags(a.fs, args); !ok {
		return code
	}
	if *topic == "" || *group == "" || *key == "" || a.fs.NArg() > 0 {
		fmt.Fprintln(stderr, "bus keys release: give --topic, --group and --key, for example: bus keys release --topic ledger --group billing --key acct-7")
		return exitUsage
	}
	b, ctx, done, err := a.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "bus keys release: %v\n", err)
		return exitFailure
	}
	defer done()
	n, err := b.ReleaseKey(ctx, dlqOf(*topic, *dlq), *topic, *group, *key)
	if err != nil {
		fmt.Fprintf(stderr, "bus keys release: %v\n", err)
		return exitFailure
	}
	if *a.asJSON {
		return exitCode(writeJSON(stdout, map[string]int{"replayed": n}), stderr, "keys release")
	}
	fmt.Fprintf(stdout, "released %s of group %s on %s: %d parked message(s) replayed\n", *key, *group, *topic, n)
	return exitOK
}

// withHeld counts the keys each group of rows holds on topic, whose dead
// letters are on dlq.
func withHeld(ctx context.Context, b *bus.Bus, topic, dlq string, rows []groupRow) error {
	keys, err := heldKeysOf(ctx, b, topic, dlq)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.Head == "" {
			continue
		}
		for i := range rows {
			if rows[i].Name == k.Group {
				rows[i].HeldKeys++
			}
		}
	}
	return nil
}
