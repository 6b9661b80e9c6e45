package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds a function declaration in internal/, embed/ and cmd/
// (tests included), from its func keyword to its closing brace: a longer
// one is a type or a few steps waiting to be named.
const maxFuncLines = 120

// TestNoFunctionIsTooLong: no function of internal/, embed/ or cmd/, tests
// included, is longer than maxFuncLines.
func TestNoFunctionIsTooLong(t *testing.T) {
	fset := token.NewFileSet()
	long := 0
	for _, dir := range mappedDirs {
		err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
					long++
					t.Errorf("%s: %s is %d lines (at most %d)", strings.TrimPrefix(path, "../"), fd.Name.Name, n, maxFuncLines)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d functions over %d lines", long, maxFuncLines)
}
