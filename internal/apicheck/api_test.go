package apicheck

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite api/*.txt from the code")

// root is the module's directory, relative to this package.
const root = "../.."

// publicPackages are the module's importable packages and those of the
// modules under contrib/ (the Protobuf codec, the Watermill adapter), by
// directory; each
// has its API file api/<file>.txt.
var publicPackages = []struct{ dir, file string }{
	{".", "bus"},
	{"backend", "backend"},
	{"bustest", "bustest"},
	{"conformance", "conformance"},
	{"conformance/tracing", "conformance-tracing"},
	{"contrib/protobuf", "contrib-protobuf"},
	{"contrib/watermill", "contrib-watermill"},
	{"inbox", "inbox"},
	{"inmemory", "inmemory"},
	{"kafka", "kafka"},
	{"middleware", "middleware"},
	{"middleware/otelbus", "middleware-otelbus"},
	{"middleware/redisdedup", "middleware-redisdedup"},
	{"nats", "nats"},
	{"observer", "observer"},
	{"outbox", "outbox"},
	{"postgres", "postgres"},
	{"rabbitmq", "rabbitmq"},
	{"redisstream", "redisstream"},
	{"sqs", "sqs"},
}

// TestAPIFilesListThePublicFace compares each public package's exported
// names with its API file.
func TestAPIFilesListThePublicFace(t *testing.T) {
	for _, p := range publicPackages {
		t.Run(p.file, func(t *testing.T) {
			got := apiOf(t, filepath.Join(root, p.dir))
			require.NotEmpty(t, got, "%s exports names", p.dir)
			path := filepath.Join(root, "api", p.file+".txt")
			text := strings.Join(got, "\n") + "\n"
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./internal/apicheck -update to write it")
			require.Equal(t, string(want), text,
				"the public face of %s changed; review the diff and run go test ./internal/apicheck -update", p.dir)
		})
	}
}

// TestAPIFilesCoverEveryPublicPackage fails when a directory outside
// internal/ and cmd/ holds a Go package that has no API file.
func TestAPIFilesCoverEveryPublicPackage(t *testing.T) {
	known := map[string]bool{}
	for _, p := range publicPackages {
		known[filepath.Clean(p.dir)] = true
	}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case rel == "internal", rel == "cmd", rel == "api", rel == "docs", rel == "scripts",
				strings.HasPrefix(d.Name(), "."), d.Name() == "testdata":
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			require.True(t, known[filepath.Dir(rel)], "%s is in a public package with no API file: add it to publicPackages", rel)
		}
		return nil
	})
	require.NoError(t, err)
}

// apiOf lists the exported names of the package in dir, one a line, in
// the form "pkg name, kind signature", sorted.
func apiOf(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var lines []string
	pkg := ""
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		if !buildsByDefault(f) {
			continue
		}
		pkg = f.Name.Name
		lines = append(lines, declLines(fset, f)...)
	}
	for i, l := range lines {
		lines[i] = "pkg " + pkg + ", " + l
	}
	slices.Sort(lines)
	return slices.Compact(lines)
}

// buildsByDefault reports whether f has no build constraint that leaves
// it out of a default build (ignore tags, tool files).
func buildsByDefault(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if strings.HasPrefix(c.Text, "//go:build") && strings.Contains(c.Text, "ignore") {
				return false
			}
		}
	}
	return true
}

func declLines(fset *token.FileSet, f *ast.File) []string {
	var lines []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			sig := d.Name.Name + signature(fset, d.Type)
			if d.Recv == nil {
				lines = append(lines, "func "+sig)
				continue
			}
			recv := d.Recv.List[0].Type
			base := recv
			if star, ok := base.(*ast.StarExpr); ok {
				base = star.X
			}
			if idx, ok := base.(*ast.IndexExpr); ok {
				base = idx.X
			}
			if idx, ok := base.(*ast.IndexListExpr); ok {
				base = idx.X
			}
			if id, ok := base.(*ast.Ident); ok && id.IsExported() {
				lines = append(lines, "method ("+node(fset, recv)+") "+sig)
			}
		case *ast.GenDecl:
			lines = append(lines, genLines(fset, d)...)
		}
	}
	return lines
}

func genLines(fset *token.FileSet, d *ast.GenDecl) []string {
	var lines []string
	for _, s := range d.Specs {
		switch s := s.(type) {
		case *ast.ValueSpec:
			kind := "var"
			if d.Tok == token.CONST {
				kind = "const"
			}
			for i, n := range s.Names {
				if !n.IsExported() {
					continue
				}
				l := kind + " " + n.Name
				if s.Type != nil {
					l += " " + node(fset, s.Type)
				}
				// A re-export shows what it names, so that its one
				// meaning is in the file.
				if i < len(s.Values) {
					if sel, ok := s.Values[i].(*ast.SelectorExpr); ok {
						l += " = " + node(fset, sel)
					}
				}
				lines = append(lines, l)
			}
		case *ast.TypeSpec:
			if !s.Name.IsExported() {
				continue
			}
			head := "type " + s.Name.Name
			if s.TypeParams != nil {
				head += "[" + fieldList(fset, s.TypeParams, true) + "]"
			}
			switch tt := s.Type.(type) {
			case *ast.StructType:
				lines = append(lines, head+" struct")
				for _, fld := range tt.Fields.List {
					for _, n := range fld.Names {
						if n.IsExported() {
							lines = append(lines, head+" struct, "+n.Name+" "+node(fset, fld.Type))
						}
					}
					if len(fld.Names) == 0 {
						lines = append(lines, head+" struct, embedded "+node(fset, fld.Type))
					}
				}
			case *ast.InterfaceType:
				lines = append(lines, head+" interface { "+interfaceMethods(fset, tt)+" }")
				for _, m := range tt.Methods.List {
					for _, n := range m.Names {
						if ft, ok := m.Type.(*ast.FuncType); ok && n.IsExported() {
							lines = append(lines, head+" interface, "+n.Name+signature(fset, ft))
						}
					}
				}
			default:
				if s.Assign.IsValid() {
					lines = append(lines, head+" = "+node(fset, s.Type))
				} else {
					lines = append(lines, head+" "+node(fset, s.Type))
				}
			}
		}
	}
	return lines
}

// interfaceMethods names an interface's methods and embedded types.
func interfaceMethods(fset *token.FileSet, it *ast.InterfaceType) string {
	var parts []string
	for _, m := range it.Methods.List {
		if len(m.Names) == 0 {
			parts = append(parts, node(fset, m.Type))
		}
		for _, n := range m.Names {
			parts = append(parts, n.Name)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// signature prints a func type without parameter names.
func signature(fset *token.FileSet, ft *ast.FuncType) string {
	s := ""
	if ft.TypeParams != nil {
		s += "[" + fieldList(fset, ft.TypeParams, true) + "]"
	}
	s += "(" + fieldList(fset, ft.Params, false) + ")"
	if ft.Results != nil {
		res := fieldList(fset, ft.Results, false)
		if len(ft.Results.List) == 1 && len(ft.Results.List[0].Names) <= 1 {
			s += " " + res
		} else {
			s += " (" + res + ")"
		}
	}
	return s
}

// fieldList prints a list of types, one per name; withNames keeps the
// names (type parameters).
func fieldList(fset *token.FileSet, fl *ast.FieldList, withNames bool) string {
	if fl == nil {
		return ""
	}
	var parts []string
	for _, f := range fl.List {
		typ := node(fset, f.Type)
		if withNames {
			for _, n := range f.Names {
				parts = append(parts, n.Name+" "+typ)
			}
			continue
		}
		for range max(len(f.Names), 1) {
			parts = append(parts, typ)
		}
	}
	return strings.Join(parts, ", ")
}

func node(fset *token.FileSet, n ast.Node) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, fset, n); err != nil {
		panic(fmt.Sprintf("print %T: %v", n, err))
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
