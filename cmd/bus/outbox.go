package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/outbox"
)

// defaultDB is $BUS_OUTBOX_DB: the PostgreSQL URL of the outbox.
func defaultDB() string { return os.Getenv("BUS_OUTBOX_DB") }

// outboxCmd runs "bus outbox migrate", "relay" and "requeue".
func outboxCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "migrate":
			return outboxMigrateCmd(ctx, args[1:], stdout, stderr)
		case "relay":
			return outboxRelayCmd(ctx, args[1:], stdout, stderr)
		case "requeue":
			return outboxRequeueCmd(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprint(stderr, "Usage: bus outbox migrate --db URL\n       bus outbox relay --db URL --url BUSURL\n       bus outbox requeue --db URL (--seq N[,N...] | --all)\n\n"+
		"migrate creates the outbox tables in PostgreSQL (idempotent); relay publishes\ncommitted outbox rows to the bus until interrupted; requeue moves dead rows\nback to the outbox. See docs/outbox.md.\n")
	return exitUsage
}

func outboxFlags(name, usageLine, about string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("bus outbox "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", defaultDB(), "PostgreSQL URL of the outbox (default $BUS_OUTBOX_DB)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s\n\n%s\n\nFlags:\n", usageLine, about)
		fs.PrintDefaults()
	}
	return fs, db
}

func outboxMigrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, db := outboxFlags("migrate", "bus outbox migrate --db URL",
		"Creates the outbox tables (bus_outbox, bus_outbox_dead), their index and the\ntrigger that wakes relays; does nothing when they exist.", stderr)
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || *db == "" {
		fmt.Fprintln(stderr, "bus outbox migrate: give --db URL and no arguments")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, *db)
	if err != nil {
		fmt.Fprintf(stderr, "bus outbox migrate: %v\n", err)
		return exitFailure
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := outbox.Migrate(ctx, conn); err != nil {
		fmt.Fprintf(stderr, "bus outbox migrate: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, "bus outbox migrate: the outbox tables are in place")
	return exitOK
}

func outboxRelayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, db := outboxFlags("relay", "bus outbox relay --db URL --url BUSURL [--batch N] [--poll D]",
		"Publishes the committed rows of the outbox to the bus until interrupted.\nSeveral relays may run at once: they share the partitions. Errors are logged\non stderr.", stderr)
	rawURL := fs.String("url", defaultURL(), "backend URL (default $BUS_URL, else mem://)")
	batch := fs.Int("batch", outbox.DefaultBatchSize, "rows read and published at a time")
	poll := fs.Duration("poll", outbox.DefaultPollInterval, "how often to look for rows when no notification came")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || *db == "" {
		fmt.Fprintln(stderr, "bus outbox relay: give --db URL and no arguments")
		return exitUsage
	}
	obs := observer.Slog(slog.New(slog.NewTextHandler(stderr, nil)))
	b, err := bus.Open(ctx, *rawURL, bus.WithObserver(obs))
	if err != nil {
		fmt.Fprintf(stderr, "bus outbox relay: %v\n", err)
		return exitFailure
	}
	r, err := outbox.NewRelay(*db, b, outbox.WithBatchSize(*batch), outbox.WithPollInterval(*poll), outbox.WithObserver(obs))
	if err != nil {
		fmt.Fprintf(stderr, "bus outbox relay: %v\n", err)
		_ = b.Close(context.WithoutCancel(ctx))
		return exitUsage
	}
	fmt.Fprintln(stdout, "bus outbox relay: relaying until interrupted")
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = r.Close(cctx)
	if cerr := b.Close(cctx); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "bus outbox relay: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// outboxReport is the outbox part of "bus topics --db" and of the
// dashboard.
type outboxReport struct {
	Stats outbox.Stats     `json:"stats"`
	Dead  []outbox.DeadRow `json:"dead"`
}

// readOutbox reads the outbox's counts and its latest dead rows.
func readOutbox(ctx context.Context, db string, limit int) (outboxReport, error) {
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return outboxReport{}, fmt.Errorf("outbox: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st, err := outbox.ReadStats(ctx, conn)
	if err != nil {
		return outboxReport{}, err
	}
	dead, err := outbox.Dead(ctx, conn, limit)
	if err != nil {
		return outboxReport{}, err
	}
	if dead == nil {
		dead = []outbox.DeadRow{}
	}
	return outboxReport{Stats: st, Dead: dead}, nil
}

// writeOutboxTable prints the outbox section of "bus topics --db".
func writeOutboxTable(w io.Writer, rep outboxReport) error {
	fmt.Fprintf(w, "\nOUTBOX: %d pending (oldest %s), %d dead\n", rep.Stats.Pending, fmtTime(rep.Stats.Oldest), rep.Stats.Dead)
	if len(rep.Dead) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTOPIC\tID\tFAILED\tREASON")
	for _, d := range rep.Dead {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", d.Seq, d.Topic, d.ID, fmtTime(d.FailedAt), d.Reason)
	}
	return tw.Flush()
}

// topicsWithOutbox prints the topics and the outbox of "bus topics --db":
// a table with an outbox section, or one JSON object {"topics", "outbox"}.
func topicsWithOutbox(ctx context.Context, ts []bus.TopicInfo, db string, asJSON bool, stdout, stderr io.Writer) int {
	rep, err := readOutbox(ctx, db, 50)
	if err != nil {
		fmt.Fprintf(stderr, "bus topics: %v\n", err)
		return exitFailure
	}
	if asJSON {
		return exitCode(writeJSON(stdout, map[string]any{"topics": ts, "outbox": rep}), stderr, "topics")
	}
	if err := writeTopicsTable(stdout, ts); err != nil {
		return exitCode(err, stderr, "topics")
	}
	return exitCode(writeOutboxTable(stdout, rep), stderr, "topics")
}

// outbox serves the dashboard's outbox panel: {"enabled": false} without
// --db, else the counts and the latest dead rows (or the error).
func (u *uiServer) outbox(w http.ResponseWriter, r *http.Request) {
	if u.outboxDB == "" {
		writeAPI(w, http.StatusOK, map[string]any{"enabled": false})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rep, err := readOutbox(ctx, u.outboxDB, 100)
	if err != nil {
		writeAPI(w, http.StatusOK, map[string]any{"enabled": true, "error": err.Error()})
		return
	}
	writeAPI(w, http.StatusOK, map[string]any{"enabled": true, "report": rep})
}
