package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's top directory, seen from this package.
const root = "../.."

// codeDocs are the documents whose names of files, directories and Go
// identifiers (in backticks) must be the code's.
var codeDocs = []string{"docs/architecture.md", "docs/protocol.md"}

// treeDoc holds the package tree: the fenced block after the line with
// treeMark, one line per package (or several, comma-separated), its
// paths first and a description after two spaces or more.
const (
	treeDoc  = "docs/protocol.md"
	treeMark = "one line per package"
)

// code is what the repository holds, as the documents may name it.
type code struct {
	files    []string        // every file, slash-separated, from the top
	dirs     map[string]bool // every directory
	packages []string        // directories with .go files, outside testdata
	names    map[string]bool // Go names declared, package names, and string and rune literals
}

// readCode walks the repository and parses its Go files.
func readCode(t *testing.T) code {
	t.Helper()
	c := code{dirs: map[string]bool{}, names: map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(p, root), "/"))
		if d.IsDir() {
			if rel != "" && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			c.dirs[rel] = true
			return nil
		}
		c.files = append(c.files, rel)
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		if dir := path.Dir(rel); !slices.Contains(c.packages, dir) {
			c.packages = append(c.packages, dir)
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		c.addNames(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// addNames adds what f declares, its package name and its literals.
func (c code) addNames(f *ast.File) {
	c.names[f.Name.Name] = true
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			c.names[n.Name.Name] = true
		case *ast.TypeSpec:
			c.names[n.Name.Name] = true
		case *ast.ValueSpec:
			for _, id := range n.Names {
				c.names[id.Name] = true
			}
		case *ast.Field:
			for _, id := range n.Names {
				c.names[id.Name] = true
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING || n.Kind == token.CHAR {
				if s, err := strconv.Unquote(n.Value); err == nil {
					c.names[s] = true
				}
			}
		}
		return true
	})
}

// TestPackageTree checks the package tree of treeDoc against the
// repository: every directory with Go files (outside testdata) is on a
// line of its own or in a line's list, and every path there is such a
// directory.
func TestPackageTree(t *testing.T) {
	c := readCode(t)
	tree := packageTree(t, treeDoc)
	for _, p := range c.packages {
		if p != "" && !tree[p] {
			t.Errorf("%s: the package tree has no line for %s", treeDoc, p)
		}
	}
	for p := range tree {
		if !slices.Contains(c.packages, p) {
			t.Errorf("%s: the package tree names %s, which is no directory with Go files", treeDoc, p)
		}
	}
}

// packageTree returns the paths that the package tree of file names.
func packageTree(t *testing.T, file string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), treeMark)
	if !ok {
		t.Fatalf("%s: no line says %q before the package tree", file, treeMark)
	}
	_, after, _ = strings.Cut(after, "```\n")
	block, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatalf("%s: no fenced block after %q", file, treeMark)
	}
	tree := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		paths, _, _ := strings.Cut(line, "  ")
		for _, p := range strings.Split(paths, ",") {
			tree[strings.TrimSpace(p)] = true
		}
	}
	return tree
}

var (
	fileName   = regexp.MustCompile(`^[\w./-]*\w\.(go|c|h|sh|awk)$`)
	dirPath    = regexp.MustCompile(`^\w+(/\w+)+$`)
	identifier = regexp.MustCompile(`^\*?([A-Za-z_]\w*(\.[A-Za-z_]\w*)*)(\(\))?$`)
)

// TestNamesInCode checks what codeDocs name in backticks: a file name
// (a path, or a base name) is a file of the repository, a path under one
// of its top directories is a directory there, and a Go identifier, or
// each part of a dotted one (pkg.Type.Method), is a name the Go code
// declares, a package's name, or a string or rune literal of the code
// (a message type such as `D`).
func TestNamesInCode(t *testing.T) {
	c := readCode(t)
	for _, file := range codeDocs {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range codeSpan.FindAllStringSubmatch(string(data), -1) {
			if why := c.check(m[1]); why != "" {
				t.Errorf("%s: `%s`: %s", file, m[1], why)
			}
		}
	}
}

// check says why a name in backticks is not the code's, or returns "".
func (c code) check(name string) string {
	switch {
	case fileName.MatchString(name):
		for _, f := range c.files {
			if f == name || strings.HasSuffix(f, "/"+name) {
				return ""
			}
		}
		return "no such file"
	case dirPath.MatchString(name):
		top, _, _ := strings.Cut(name, "/")
		if c.dirs[top] && !c.dirs[name] && !slices.Contains(c.files, name) {
			return "no such directory"
		}
	case identifier.MatchString(name):
		for _, part := range strings.Split(identifier.FindStringSubmatch(name)[1], ".") {
			if !c.names[part] {
				return "the code declares no " + part
			}
		}
	}
	return ""
}
