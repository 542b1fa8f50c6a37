package doccheck

// How code blocks are checked:
//   - A ```go block that starts with "package" is a whole file, compiled as
//     it is.
//   - A block that starts with "import" is an import list, compiled with an
//     empty main.
//   - Any other ```go block is a fragment: declarations (it starts with
//     "func", "type", "var" or "const") go to file level; statements go
//     into a function whose parameters give the names a fragment may use
//     without declaring them (see fragmentParams). Imports are added for
//     the package names the fragment uses, and every name the fragment
//     declares at its top level with := is used once, so that an example
//     need not print everything it gets.
//   - A block right after the line <!-- doccheck: skip --> is not compiled
//     here: docs/watermill.md marks its blocks so, because they import
//     Watermill, which this module does not list; the adapter's module
//     compiles them (contrib/watermill, TestWatermillGuideCompiles).
//   - ```json blocks must parse; ```sh blocks may only name bus
//     subcommands that exist.
// All generated packages are built by one "go build" in a module of their
// own that replaces github.com/eventbus-go/bus with this checkout.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// block is one fenced code block of a document.
type block struct {
	file, lang, code string
	line             int
	skip             bool
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	require.NoError(t, err)
	return dir
}

func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root(t), "docs", "*.md"))
	require.NoError(t, err)
	return append([]string{filepath.Join(root(t), "README.md")}, docs...)
}

var fence = regexp.MustCompile("^```(\\w*)\\s*$")

func blocks(t *testing.T, path string) []block {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []block
	var cur *block
	skipNext := false
	for i, line := range strings.Split(string(data), "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "<!-- doccheck: skip -->":
			skipNext = true
		case cur == nil && fence.MatchString(line):
			cur = &block{file: filepath.Base(path), lang: fence.FindStringSubmatch(line)[1], line: i + 1, skip: skipNext}
			skipNext = false
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	require.Nil(t, cur, "%s: a code block is not closed", path)
	return out
}

func TestREADMEIsAFrontDoorOfAtMost300Lines(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	require.NoError(t, err)
	lines := strings.Count(string(data), "\n")
	assert.LessOrEqual(t, lines, 300, "README.md has %d lines; guides belong in docs/", lines)
}

var link = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)\s]*)?\)`)

func TestRelativeLinksPointToFiles(t *testing.T) {
	for _, doc := range documents(t) {
		data, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, `"`) {
				// A quoted target is Go code, such as NewTopic[T]("name").
				continue
			}
			_, err := os.Stat(filepath.Join(filepath.Dir(doc), target))
			assert.NoError(t, err, "%s links to %s, which does not exist", filepath.Base(doc), target)
		}
	}
}

func TestJSONBlocksParse(t *testing.T) {
	for _, doc := range documents(t) {
		for _, b := range blocks(t, doc) {
			if b.lang == "json" {
				var v any
				assert.NoError(t, json.Unmarshal([]byte(b.code), &v), "%s:%d: the JSON block parses", b.file, b.line)
			}
		}
	}
}

var busCommand = regexp.MustCompile(`(?:go run \./cmd/bus|^\s*bus)\s+([a-z]+)`)

func TestShellBlocksNameRealSubcommands(t *testing.T) {
	main, err := os.ReadFile(filepath.Join(root(t), "cmd", "bus", "main.go"))
	require.NoError(t, err)
	var known []string
	for _, m := range regexp.MustCompile(`case "([a-z]+)"`).FindAllStringSubmatch(string(main), -1) {
		known = append(known, m[1])
	}
	require.NotEmpty(t, known, "the subcommands of cmd/bus/main.go")
	for _, doc := range documents(t) {
		for _, b := range blocks(t, doc) {
			if b.lang != "sh" {
				continue
			}
			for _, line := range strings.Split(b.code, "\n") {
				if m := busCommand.FindStringSubmatch(line); m != nil {
					assert.Contains(t, known, m[1], "%s:%d: %q names a bus subcommand", b.file, b.line, line)
				}
			}
		}
	}
}

func TestGoBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: compiling the documents' examples runs the go command")
	}
	dir := t.TempDir()
	writeModule(t, dir)
	n := 0
	for _, doc := range documents(t) {
		for _, b := range blocks(t, doc) {
			if b.lang != "go" || b.skip {
				continue
			}
			n++
			pkgDir := filepath.Join(dir, fmt.Sprintf("b%02d", n))
			require.NoError(t, os.MkdirAll(pkgDir, 0o755))
			src := source(b)
			require.NoError(t, os.WriteFile(filepath.Join(pkgDir, "main.go"), []byte(src), 0o644))
			t.Logf("b%02d is %s:%d", n, b.file, b.line)
		}
	}
	require.Greater(t, n, 0, "the documents have Go blocks")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", os.DevNull, "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "the documents' Go blocks compile (see the b<N> lines above for where each is):\n%s", out.String())
}

// writeModule writes a module that builds the blocks against this checkout.
func writeModule(t *testing.T, dir string) {
	t.Helper()
	gomod, err := os.ReadFile(filepath.Join(root(t), "go.mod"))
	require.NoError(t, err)
	mod := strings.Replace(string(gomod), "module github.com/eventbus-go/bus", "module doccheck", 1)
	mod += "\nrequire github.com/eventbus-go/bus v0.0.0\n\nreplace github.com/eventbus-go/bus => " + root(t) + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root(t), "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
}

// imports maps the package names a fragment may use to their paths.
var imports = map[string]string{
	"atomic": "sync/atomic",
	"bus":    "github.com/eventbus-go/bus", "backend": "github.com/eventbus-go/bus/backend",
	"observer": "github.com/eventbus-go/bus/observer", "middleware": "github.com/eventbus-go/bus/middleware",
	"otelbus": "github.com/eventbus-go/bus/middleware/otelbus", "bustest": "github.com/eventbus-go/bus/bustest",
	"conformance": "github.com/eventbus-go/bus/conformance", "inmemory": "github.com/eventbus-go/bus/inmemory",
	"redisstream": "github.com/eventbus-go/bus/redisstream", "busnats": "github.com/eventbus-go/bus/nats",
	"context": "context", "errors": "errors", "fmt": "fmt", "log": "log", "slog": "log/slog", "time": "time",
	"os": "os", "url": "net/url", "testing": "testing", "strings": "strings", "http": "net/http", "bytes": "bytes",
	"backoff": "github.com/cenkalti/backoff/v4", "rate": "golang.org/x/time/rate",
	"redis": "github.com/redis/go-redis/v9",
	"otel":  "go.opentelemetry.io/otel", "propagation": "go.opentelemetry.io/otel/propagation",
	"trace": "go.opentelemetry.io/otel/trace", "sdktrace": "go.opentelemetry.io/otel/sdk/trace",
	"tracetest": "go.opentelemetry.io/otel/sdk/trace/tracetest",
}

// fragmentParams are the names a statement fragment may use undeclared.
const fragmentParams = "ctx context.Context, b *bus.Bus, url string, logger *slog.Logger, " +
	"handler bus.Handler, otelObs observer.Observer, meterProvider metric.MeterProvider"

var declared = regexp.MustCompile(`(?m)^([A-Za-z_][\w]*(?:\s*,\s*[A-Za-z_][\w]*)*)\s*:=`)

// source makes a compilable file of b.
func source(b block) string {
	code := b.code
	if strings.HasPrefix(strings.TrimSpace(code), "package ") {
		return code
	}
	if strings.HasPrefix(strings.TrimSpace(code), "import ") {
		return "package main\n\n" + code + "\nfunc main() {}\n"
	}
	used := usedPackages(code)
	var body string
	trimmed := strings.TrimSpace(code)
	if strings.HasPrefix(trimmed, "func ") || strings.HasPrefix(trimmed, "type ") || strings.HasPrefix(trimmed, "var ") || strings.HasPrefix(trimmed, "const ") {
		body = code + "\nfunc main() {}\n"
	} else {
		var uses []string
		for _, m := range declared.FindAllStringSubmatch(code, -1) {
			for _, name := range strings.Split(m[1], ",") {
				if name = strings.TrimSpace(name); name != "_" {
					uses = append(uses, "_ = "+name)
				}
			}
		}
		used = append(used, "context", "bus", "slog", "observer", "metric")
		body = "func example(" + fragmentParams + ") error {\n{\n" + code + "\n" + strings.Join(uses, "\n") + "\n}\nreturn nil\n}\n\nfunc main() { _ = example }\n"
	}
	sort.Strings(used)
	used = slices.Compact(used)
	var imp strings.Builder
	for _, name := range used {
		path := imports[name]
		if name == "metric" {
			path = "go.opentelemetry.io/otel/metric"
		}
		fmt.Fprintf(&imp, "\t%s %q\n", name, path)
	}
	return "package main\n\nimport (\n" + imp.String() + ")\n\n" + body
}

// usedPackages lists the known package names code uses as qualifiers,
// ignoring comments and strings.
func usedPackages(code string) []string {
	var s scanner.Scanner
	fset := token.NewFileSet()
	src := []byte(code)
	s.Init(fset.AddFile("", fset.Base(), len(src)), src, nil, 0)
	var used []string
	prev := ""
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.PERIOD && imports[prev] != "" {
			used = append(used, prev)
		}
		prev = ""
		if tok == token.IDENT {
			prev = lit
		}
	}
	return used
}
