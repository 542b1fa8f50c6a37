package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventbus-go/bus/outbox"
)

// outboxRequeueCmd runs "bus outbox requeue": dead rows back to the outbox.
func outboxRequeueCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, db := outboxFlags("requeue", "bus outbox requeue --db URL (--seq N[,N...] | --all)",
		"Moves dead rows back to the outbox, after what made them fail was fixed,\nfor the relays to publish again (see bus topics --db for the rows).", stderr)
	seqList := fs.String("seq", "", "comma-separated sequence numbers of the dead rows to requeue")
	all := fs.Bool("all", false, "requeue every dead row (at most 10000)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	seqs, err := parseSeqs(*seqList)
	if err != nil {
		fmt.Fprintf(stderr, "bus outbox requeue: %v\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 || *db == "" || (len(seqs) == 0) == !*all {
		fmt.Fprintln(stderr, "bus outbox requeue: give --db URL and either --seq N[,N...] or --all")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, *db)
	if err != nil {
		fmt.Fprintf(stderr, "bus outbox requeue: %v\n", err)
		return exitFailure
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if *all {
		dead, err := outbox.Dead(ctx, conn, 10000)
		if err != nil {
			fmt.Fprintf(stderr, "bus outbox requeue: %v\n", err)
			return exitFailure
		}
		for _, d := range dead {
			seqs = append(seqs, d.Seq)
		}
		if len(seqs) == 0 {
			fmt.Fprintln(stdout, "bus outbox requeue: no dead rows")
			return exitOK
		}
	}
	n, err := outbox.Requeue(ctx, conn, seqs...)
	if err != nil {
		fmt.Fprintf(stderr, "bus outbox requeue: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "bus outbox requeue: %d dead row(s) requeued\n", n)
	return exitOK
}

// parseSeqs parses "3,7,12" (empty: none).
func parseSeqs(s string) ([]int64, error) {
	var seqs []int64
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--seq %q: want positive integers", f)
		}
		seqs = append(seqs, n)
	}
	return seqs, nil
}
