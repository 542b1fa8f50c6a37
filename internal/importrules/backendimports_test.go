package importrules

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const backendPkg = module + "/backend"

// backendSide are the directories (with what is under them) whose code
// implements or checks the SPI and so may import package backend.
var backendSide = []string{
	".", // the root package: the bus, which drives a backend (its own files only)
	"backend",
	"inmemory",
	"redisstream",
	"nats",
	"postgres",
	"rabbitmq",
	"kafka",
	"sqs",
	"conformance",
	"internal",
}

// commandSPIFiles are the command's files that work on the SPI: they read
// a topic's retained messages through backend.Inspector.Peek, which the
// bus does not offer (bus history, the dashboard's message history).
var commandSPIFiles = []string{"cmd/bus/history.go", "cmd/bus/ui.go"}

// TestUsersNeverImportBackend keeps package backend for backend authors:
// every other package of the module (middleware, bustest, outbox,
// observer, the command), every example and the docs other than
// docs/writing-a-backend.md name what they need through package bus.
func TestUsersNeverImportBackend(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(rel, ".md"):
			if rel == "docs/writing-a-backend.md" {
				return nil
			}
			text, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			checked++
			if strings.Contains(string(text), strconv.Quote(backendPkg)) {
				t.Errorf("%s imports %s in a code block; use the names of package bus", rel, backendPkg)
			}
			return nil
		case !strings.HasSuffix(rel, ".go"):
			return nil
		}
		isTest := strings.HasSuffix(rel, "_test.go")
		isExample := isTest && strings.HasPrefix(filepath.Base(rel), "example")
		if isTest && !isExample {
			return nil
		}
		if !isExample && allowedToImportBackend(rel) {
			return nil
		}
		if isExample && exampleMayImportBackend(rel) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == backendPkg {
				t.Errorf("%s imports %s; only backends, the conformance suite and internal packages may (use the names of package bus)", rel, backendPkg)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, checked, 50, "the walk found the module's files")
}

// allowedToImportBackend reports whether the non-test file rel is on the
// backend side.
func allowedToImportBackend(rel string) bool {
	dir := filepath.ToSlash(filepath.Dir(rel))
	for _, s := range backendSide {
		if dir == s || (s != "." && strings.HasPrefix(dir, s+"/")) {
			return true
		}
	}
	for _, f := range commandSPIFiles {
		if rel == f {
			return true
		}
	}
	return false
}

// exampleMayImportBackend reports whether the example file rel shows the
// SPI: the backends' and the conformance suite's own examples.
func exampleMayImportBackend(rel string) bool {
	dir := filepath.ToSlash(filepath.Dir(rel))
	for _, s := range []string{"backend", "inmemory", "redisstream", "nats", "postgres", "rabbitmq", "kafka", "sqs", "conformance"} {
		if dir == s || strings.HasPrefix(dir, s+"/") {
			return true
		}
	}
	return false
}

// userFacing are the backends' files that serve users rather than the
// bus: postgres.PublishTx takes bus.Messages inside the caller's
// transaction and validates them as bus.Publish does (msgcheck), as the
// outbox does.
var userFacing = map[string]bool{"../../postgres/publishtx.go": true}

// TestBackendsUseTheRootOnlyToRegister keeps the arrows from the backends
// pointing at package backend: a backend's non-test files name nothing
// of the root package but Register (as a database/sql driver registers
// itself), and reach no internal package of the bus's delivery.
func TestBackendsUseTheRootOnlyToRegister(t *testing.T) {
	t.Parallel()
	refused := []string{module + "/internal/slots", module + "/internal/shutdown", module + "/internal/msgcheck"}
	for _, dir := range []string{"inmemory", "redisstream", "nats", "postgres", "rabbitmq", "kafka", "sqs"} {
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, "%s has Go files", dir)
		fset := token.NewFileSet()
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") || userFacing[filepath.ToSlash(path)] {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			rootName := ""
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, r := range refused {
					if p == r {
						t.Errorf("%s imports %s; the errors a backend returns live in package backend", path, p)
					}
				}
				if p == module {
					rootName = "bus"
					if imp.Name != nil {
						rootName = imp.Name.Name
					}
				}
			}
			if rootName == "" {
				continue
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == rootName && sel.Sel.Name != "Register" {
					t.Errorf("%s: %s uses %s.%s; a backend uses the root package only to register", fset.Position(sel.Pos()), path, rootName, sel.Sel.Name)
				}
				return true
			})
		}
	}
}
