package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// The size rules that docs/architecture.md states for code outside tests.
const (
	maxFuncLines   = 80
	maxStructField = 30
)

// TestSizeRules checks every Go file of the module outside tests: no
// function (declared, from its func keyword to its closing brace) longer
// than maxFuncLines lines, no struct type with more than maxStructField
// fields.
func TestSizeRules(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, v := range sizeViolations(fset, f) {
			t.Error(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("checked only %d files: not run from test/docs?", files)
	}
}

// sizeViolations returns where f breaks the size rules, one line each.
func sizeViolations(fset *token.FileSet, f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if n.Body == nil {
				return true
			}
			if lines := fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1; lines > maxFuncLines {
				out = append(out, fmt.Sprintf("%s: func %s has %d lines, over %d", fset.Position(n.Pos()), funcName(n), lines, maxFuncLines))
			}
		case *ast.StructType:
			fields := 0
			for _, fl := range n.Fields.List {
				fields += max(1, len(fl.Names)) // an embedded field has no name
			}
			if fields > maxStructField {
				out = append(out, fmt.Sprintf("%s: a struct of %d fields, over %d", fset.Position(n.Pos()), fields, maxStructField))
			}
		}
		return true
	})
	return out
}

// funcName is a function's name, with its receiver's type for a method.
func funcName(f *ast.FuncDecl) string {
	if f.Recv == nil || len(f.Recv.List) == 0 {
		return f.Name.Name
	}
	typ := f.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if x, ok := typ.(*ast.IndexExpr); ok { // a generic type's method
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return "(" + id.Name + ")." + f.Name.Name
	}
	return f.Name.Name
}
