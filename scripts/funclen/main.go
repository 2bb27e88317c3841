// Command funclen lists the functions and methods longer than a threshold,
// longest first: their length in lines (from the func keyword to the
// closing brace, comments and blank lines included), their name as
// <package dir>.<Receiver>.<Name> and their position.
//
//	go run ./scripts/funclen                 # every function over 80 lines, tests included
//	go run ./scripts/funclen -max 60 -tests=false ./pipeline ./gateway
//
// The arguments are directories, each walked recursively (default .);
// testdata, vendor, node_modules and hidden directories are skipped. The
// output is a list, not a verdict: it exits 0 whatever it finds (1 on a
// file it cannot parse).
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// function is one function or method declaration.
type function struct {
	name  string // <package dir>.<Receiver>.<Name>, e.g. persistence.Store.LockStockBatch
	pos   token.Position
	lines int
}

func main() {
	maxLines := flag.Int("max", 80, "list the functions longer than this many lines")
	tests := flag.Bool("tests", true, "include _test.go files")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "Usage: go run ./scripts/funclen [-max N] [-tests=false] [dir ...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	funcs, err := longFunctions(dirs, *maxLines, *tests)
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(1)
	}
	report(os.Stdout, funcs, *maxLines)
}

// longFunctions returns the functions of the Go files under dirs longer
// than maxLines, longest first (then by name).
func longFunctions(dirs []string, maxLines int, tests bool) ([]function, error) {
	var out []function
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := d.Name()
			if d.IsDir() {
				if path != dir && (name == "testdata" || name == "vendor" || name == "node_modules" || strings.HasPrefix(name, ".")) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(name, ".go") || !tests && strings.HasSuffix(name, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			pkg := filepath.ToSlash(filepath.Dir(filepath.Clean(path)))
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
				if n := end.Line - start.Line + 1; n > maxLines {
					out = append(out, function{name: pkg + "." + funcName(fd), pos: start, lines: n})
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].lines != out[j].lines {
			return out[i].lines > out[j].lines
		}
		return out[i].name < out[j].name
	})
	return out, nil
}

// funcName is Name, or Receiver.Name for a method (pointer and type
// parameters dropped).
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}

// report prints funcs as a table and a count.
func report(w io.Writer, funcs []function, maxLines int) {
	for _, f := range funcs {
		fmt.Fprintf(w, "%5d  %-50s %s:%d\n", f.lines, f.name, filepath.ToSlash(f.pos.Filename), f.pos.Line)
	}
	fmt.Fprintf(w, "%d functions over %d lines\n", len(funcs), maxLines)
}
