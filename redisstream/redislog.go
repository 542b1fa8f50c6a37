package redisstream

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// go-redis logs some events of its own (a failed dial while it retries, a
// pool that cannot refill) straight to stderr. The bus reports the
// outcome once, as an error or an observer event, so at init this package
// sends go-redis's lines to slog.Default() at Debug level instead: they
// stay out of a program's output unless it asks for debug logs. A program
// that installs its own logger with redis.SetLogger after this package's
// init keeps it.
func init() {
	redis.SetLogger(debugLogger{})
}

type debugLogger struct{}

func (debugLogger) Printf(ctx context.Context, format string, v ...any) {
	if !slog.Default().Enabled(ctx, slog.LevelDebug) {
		return
	}
	slog.Default().DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
