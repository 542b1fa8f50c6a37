package watermill

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The library's doc test (internal/doccheck) cannot build code that
// imports Watermill, so docs/watermill.md marks its Go blocks
// "<!-- doccheck: skip -->" for it, and this test compiles every Go block
// of that guide in the same way: each block is a whole file ("package
// main ..."), built by one "go build" in a module of its own that
// replaces the library and this adapter with this checkout.
func TestWatermillGuideCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: compiling the guide's examples runs the go command")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	guide, err := os.ReadFile(filepath.Join(root, "docs", "watermill.md"))
	require.NoError(t, err)
	blocks := goBlocks(string(guide))
	require.NotEmpty(t, blocks, "docs/watermill.md has Go blocks")

	dir := t.TempDir()
	gomod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	mod := strings.Replace(string(gomod), "module github.com/eventbus-go/bus/contrib/watermill", "module doccheck", 1)
	mod += "\nrequire github.com/eventbus-go/bus/contrib/watermill v0.0.0\n" +
		"\nreplace github.com/eventbus-go/bus => " + root +
		"\n\nreplace github.com/eventbus-go/bus/contrib/watermill => " + filepath.Join(root, "contrib", "watermill") + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	sum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	for i, b := range blocks {
		require.True(t, strings.HasPrefix(strings.TrimSpace(b.code), "package "), "docs/watermill.md:%d: a Go block is a whole file", b.line)
		pkg := filepath.Join(dir, fmt.Sprintf("b%02d", i+1))
		require.NoError(t, os.MkdirAll(pkg, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(pkg, "main.go"), []byte(b.code), 0o644))
		t.Logf("b%02d is docs/watermill.md:%d", i+1, b.line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", os.DevNull, "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "the guide's Go blocks compile (see the b<N> lines above for where each is):\n%s", out.String())
}

type guideBlock struct {
	code string
	line int
}

var fence = regexp.MustCompile("^```(\\w*)\\s*$")

// goBlocks returns the ```go blocks of a Markdown document.
func goBlocks(doc string) []guideBlock {
	var out []guideBlock
	var cur *guideBlock
	inGo := false
	for i, line := range strings.Split(doc, "\n") {
		switch m := fence.FindStringSubmatch(line); {
		case cur == nil && !inGo && m != nil && m[1] != "":
			inGo = m[1] == "go"
			if inGo {
				cur = &guideBlock{line: i + 2}
			} else {
				cur = &guideBlock{}
			}
		case cur != nil && strings.TrimSpace(line) == "```":
			if inGo {
				out = append(out, *cur)
			}
			cur, inGo = nil, false
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	return out
}
