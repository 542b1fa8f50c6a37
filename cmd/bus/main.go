package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `bus is the command-line tool of the bus event library.

Usage:
  bus bench   [flags]               measure throughput, latency and delivery
  bus publish [flags] [payload...]  publish each argument (or stdin line)
  bus tail    [flags]               print deliveries until interrupted
  bus topics  [--dead-letters] [--db URL]  list topics with retained counts (and the outbox)
  bus topics  delete TOPIC --yes    remove a topic with its messages and groups
  bus groups  --topic T [flags]     list a topic's groups with lag and in flight
  bus groups  reset --topic T --group G --to oldest|newest|TIME
                                    move a group to a point of its topic
  bus dlq     list|show|replay|purge  list, show, replay or purge dead letters
  bus keys    list|release --topic T  list the held keys (bus.KeyHold), or release one
  bus history --id ID | --key K     a message's timeline from the lifecycle events
  bus stats   [--watch] [flags]     topics and groups, refreshed with rates
  bus ui      [flags]               live web dashboard (loopback by default)
  bus outbox  migrate|relay --db URL  create the outbox tables, or relay them to the bus
  bus postgres migrate --url URL    create the PostgreSQL backend's tables
  bus version                       module version and linked backends

Backends are chosen with --url (default $BUS_URL, else mem://):
  mem://  mem://name  redis://host:6379  rediss://...  nats://host:4222  tls://...  nats+tls://...
  postgres://user@host:5432/db  postgresql://...

Flags may come before or after arguments; "--" ends them.
Run "bus <command> -h" for the flags of a command.
`

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed (lost messages, I/O error)
	exitUsage   = 2 // bad command line
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "bench":
		return benchCmd(ctx, args[1:], stdout, stderr)
	case "publish":
		return publishCmd(ctx, args[1:], stdin, stdout, stderr)
	case "tail":
		return tailCmd(ctx, args[1:], stdout, stderr)
	case "topics":
		return topicsCmd(ctx, args[1:], stdout, stderr)
	case "groups":
		return groupsCmd(ctx, args[1:], stdout, stderr)
	case "dlq":
		return dlqCmd(ctx, args[1:], stdout, stderr)
	case "keys":
		return keysCmd(ctx, args[1:], stdout, stderr)
	case "history":
		return historyCmd(ctx, args[1:], stdout, stderr)
	case "stats":
		return statsCmd(ctx, args[1:], stdout, stderr)
	case "ui":
		return uiCmd(ctx, args[1:], stdout, stderr)
	case "outbox":
		return outboxCmd(ctx, args[1:], stdout, stderr)
	case "postgres":
		return postgresCmd(ctx, args[1:], stdout, stderr)
	case "version":
		return versionCmd(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "bus: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

// defaultURL is $BUS_URL, else mem://.
func defaultURL() string {
	if u := os.Getenv("BUS_URL"); u != "" {
		return u
	}
	return "mem://"
}
