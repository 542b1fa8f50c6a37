package importrules

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const module = "github.com/eventbus-go/bus"

const (
	otel    = "go.opentelemetry.io/"
	goRedis = "github.com/redis/go-redis/"
	natsGo  = "github.com/nats-io/"
	amqpGo  = "github.com/rabbitmq/amqp091-go"
	franzGo = "github.com/twmb/franz-go"
	testify = "github.com/stretchr/testify"
	awsSDK  = "github.com/aws/"
)

// TestImportRules lists each package's dependencies with `go list -deps`
// and fails when one of them is refused for that package.
func TestImportRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pkg        string
		stdlibOnly bool     // no third-party package at all
		refused    []string // import path prefixes it must not depend on
		// refusedExact are import paths it must not depend on.
		refusedExact []string
	}{
		{pkg: "backend", stdlibOnly: true},
		{pkg: "observer", stdlibOnly: true},
		{pkg: "inmemory", stdlibOnly: true},
		{pkg: "", refused: []string{awsSDK, otel, goRedis, natsGo, amqpGo, franzGo, testify}},
		{pkg: "middleware", refused: []string{awsSDK, otel, goRedis, natsGo, amqpGo, franzGo, testify}},
		{pkg: "conformance", refused: []string{awsSDK, otel, goRedis, natsGo, amqpGo, franzGo}},
		{pkg: "redisstream", refused: []string{awsSDK, otel, natsGo, amqpGo, franzGo, testify}},
		{pkg: "nats", refused: []string{awsSDK, otel, goRedis, amqpGo, franzGo, testify}},
		{pkg: "postgres", refused: []string{awsSDK, otel, goRedis, natsGo, amqpGo, franzGo, testify}},
		{pkg: "rabbitmq", refused: []string{awsSDK, otel, goRedis, natsGo, franzGo, testify}},
		{pkg: "kafka", refused: []string{awsSDK, otel, goRedis, natsGo, amqpGo, testify}},
		{pkg: "sqs", refused: []string{otel, goRedis, natsGo, amqpGo, franzGo, testify}},
		// What package bus shares with its internal packages (capacity,
		// the close budget) needs nothing else.
		{pkg: "internal/slots", stdlibOnly: true, refusedExact: []string{module}},
		{pkg: "internal/shutdown", stdlibOnly: true, refusedExact: []string{module}},
	}
	for _, tt := range tests {
		path := module
		if tt.pkg != "" {
			path += "/" + tt.pkg
		}
		deps := listDeps(t, path)
		require.NotEmpty(t, deps, "go list -deps %s printed nothing", path)
		for _, d := range deps {
			if tt.stdlibOnly && !isStdlib(d) && !strings.HasPrefix(d, module) {
				t.Errorf("%s must build with the standard library alone, but depends on %s", path, d)
			}
			for _, r := range tt.refusedExact {
				if d == r {
					t.Errorf("%s must not depend on %s", path, r)
				}
			}
			for _, r := range tt.refused {
				if strings.HasPrefix(d, r) {
					t.Errorf("%s must not depend on %s*, but depends on %s", path, r, d)
				}
			}
		}
	}
}

// isStdlib reports whether an import path is in the standard library: its
// first element has no dot.
func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func listDeps(t *testing.T, path string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command must be on PATH to list dependencies")
	cmd := exec.CommandContext(ctx, goBin, "list", "-deps", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list -deps %s: %s", path, stderr.String())
	var deps []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		deps = append(deps, sc.Text())
	}
	return deps
}

// TestLibraryModuleListsNoToolDependencies keeps the browser driver of the
// dashboard's test (and anything else only the command needs) out of the
// library's go.mod: the command is a module of its own.
func TestLibraryModuleListsNoToolDependencies(t *testing.T) {
	t.Parallel()
	mod, err := os.ReadFile("../../go.mod")
	require.NoError(t, err)
	for _, dep := range []string{"chromedp", "cdproto"} {
		require.NotContains(t, string(mod), dep, "the library's go.mod must not list %s (it belongs to cmd/bus/go.mod)", dep)
	}
	cmd, err := os.ReadFile("../../cmd/bus/go.mod")
	require.NoError(t, err)
	require.Contains(t, string(cmd), "module github.com/eventbus-go/bus/cmd/bus", "the command is a module of its own")
}
