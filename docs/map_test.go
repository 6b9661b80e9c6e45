package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The repository's map of itself: docs/architecture.md is the one list of
// its files and of what its packages import, and the counts the prose
// gives of the fault scenarios are the code's.

// mappedDirs are the trees whose every non-test Go file architecture.md
// names.
var mappedDirs = []string{"internal", "embed", "cmd"}

// goFiles returns the non-test Go files under the mapped trees, by
// directory (relative to the repository).
func goFiles(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, top := range mappedDirs {
		err := filepath.WalkDir(filepath.Join("..", top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, err := filepath.Rel("..", path)
			if err != nil {
				return err
			}
			dir := filepath.ToSlash(filepath.Dir(rel))
			out[dir] = append(out[dir], filepath.Base(rel))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// section returns the lines of the markdown section of doc titled title
// (from its heading to the next heading of its level or above).
func section(t *testing.T, doc, title string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", doc))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	level := 0
	for _, line := range strings.Split(string(data), "\n") {
		if h := strings.TrimLeft(line, "#"); h != line && strings.HasPrefix(h, " ") {
			n := len(line) - len(h)
			switch {
			case level == 0 && strings.TrimSpace(h) == title:
				level = n
				continue
			case level > 0 && n <= level:
				return out
			}
		}
		if level > 0 {
			out = append(out, line)
		}
	}
	if level == 0 {
		t.Fatalf("%s has no section %q", doc, title)
	}
	return out
}

var backticked = regexp.MustCompile("`([^`]+)`")

// listItems returns the list items of lines ("- " and the lines indented
// under it), each as one string.
func listItems(lines []string) []string {
	var items []string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "- "):
			items = append(items, l[2:])
		case strings.HasPrefix(l, "  ") && len(items) > 0:
			items[len(items)-1] += " " + strings.TrimSpace(l)
		}
	}
	return items
}

// TestArchitectureNamesEveryFile: the section "Files" of
// docs/architecture.md lists, per package directory ("- `dir`: `a.go`
// (...), `b.go` ..."), every non-test Go file of internal/, embed/ and
// cmd/, and nothing else.
func TestArchitectureNamesEveryFile(t *testing.T) {
	have := goFiles(t)
	listed := map[string][]string{}
	for _, item := range listItems(section(t, "docs/architecture.md", "Files")) {
		names := backticked.FindAllStringSubmatch(item, -1)
		if len(names) == 0 || !strings.HasPrefix(item, "`") {
			continue
		}
		dir := names[0][1]
		if _, dup := listed[dir]; dup {
			t.Errorf("architecture.md lists %s twice", dir)
		}
		listed[dir] = []string{}
		for _, n := range names[1:] {
			if f := n[1]; strings.HasSuffix(f, ".go") && !strings.Contains(f, "/") {
				listed[dir] = append(listed[dir], f)
			}
		}
	}
	for dir, files := range have {
		got, ok := listed[dir]
		if !ok {
			t.Errorf("architecture.md, Files: no item for %s (%s)", dir, strings.Join(files, ", "))
			continue
		}
		for _, f := range files {
			if !slices.Contains(got, f) {
				t.Errorf("architecture.md, Files: %s/%s is not named", dir, f)
			}
		}
	}
	for dir, files := range listed {
		for _, f := range files {
			if !slices.Contains(have[dir], f) {
				t.Errorf("architecture.md, Files: %s/%s does not exist", dir, f)
			}
		}
		if _, ok := have[dir]; !ok {
			t.Errorf("architecture.md, Files: %s holds no Go file", dir)
		}
	}
}

// TestDocsNameOnlyFilesThatExist: every Go file the prose names (in
// backticks, in README.md and docs/*.md) exists: by its path from the
// repository's root, or, named alone, somewhere in the repository.
func TestDocsNameOnlyFilesThatExist(t *testing.T) {
	base := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".go") {
			base[d.Name()] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range append(docs, filepath.Join("..", "README.md")) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range backticked.FindAllStringSubmatch(string(data), -1) {
			name := m[1]
			if !strings.HasSuffix(name, ".go") || strings.ContainsAny(name, " *") {
				continue
			}
			if strings.Contains(name, "/") {
				if _, err := os.Stat(filepath.Join("..", name)); err != nil {
					t.Errorf("%s names %s, which does not exist", filepath.Base(doc), name)
				}
			} else if !base[name] {
				t.Errorf("%s names %s: no such file", filepath.Base(doc), name)
			}
		}
	}
}

// TestArchitectureListsWhatEachPackageImports: the section "Imports" of
// docs/architecture.md gives, per package ("- `pkg` imports `a`, `b`" or
// "imports no zketcd package"), exactly the zketcd packages its non-test
// files import.
func TestArchitectureListsWhatEachPackageImports(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./internal/...", "./embed/...", "./cmd/...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/zketcd/zketcd/"
	have := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(f[0], module)
		have[pkg] = []string{}
		for _, imp := range f[1:] {
			if p, ok := strings.CutPrefix(imp, module); ok && !strings.HasPrefix(p, "third_party/") {
				have[pkg] = append(have[pkg], p)
			}
		}
	}
	listed := map[string][]string{}
	for _, item := range listItems(section(t, "docs/architecture.md", "Imports")) {
		names := backticked.FindAllStringSubmatch(item, -1)
		if len(names) == 0 || !strings.HasPrefix(item, "`") {
			continue
		}
		var imports []string
		for _, n := range names[1:] {
			imports = append(imports, n[1])
		}
		listed[names[0][1]] = imports
	}
	for pkg, imports := range have {
		got, ok := listed[pkg]
		if !ok {
			t.Errorf("architecture.md, Imports: no item for %s (it imports %v)", pkg, imports)
			continue
		}
		slices.Sort(got)
		slices.Sort(imports)
		if !slices.Equal(got, imports) {
			t.Errorf("architecture.md, Imports: %s imports %v, not %v", pkg, imports, got)
		}
	}
	for pkg := range listed {
		if _, ok := have[pkg]; !ok {
			t.Errorf("architecture.md, Imports: no package %s", pkg)
		}
	}
}

// scenarioTable reads integration/faults' table of fault scenarios: their
// names, and how many run in the short variant.
func scenarioTable(t *testing.T) (names []string, short int) {
	t.Helper()
	path := filepath.Join("..", "integration", "faults", "faults_test.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "scenarios" || len(vs.Values) != 1 {
			return true
		}
		table, ok := vs.Values[0].(*ast.CompositeLit)
		if !ok {
			return true
		}
		for _, elt := range table.Elts {
			sc, ok := elt.(*ast.CompositeLit)
			if !ok {
				t.Fatalf("%s: a scenario that is not a literal", path)
			}
			for _, field := range sc.Elts {
				kv, ok := field.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				switch key := kv.Key.(*ast.Ident).Name; {
				case key == "name":
					name, err := strconv.Unquote(kv.Value.(*ast.BasicLit).Value)
					if err != nil {
						t.Fatal(err)
					}
					names = append(names, name)
				case key == "short" && fmt.Sprint(kv.Value) == "true":
					short++
				}
			}
		}
		return false
	})
	if len(names) == 0 {
		t.Fatalf("%s: no scenario table", path)
	}
	return names, short
}

var numberWords = map[string]int{"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}

// count reads "28" or "two".
func count(s string) int {
	if n, ok := numberWords[strings.ToLower(s)]; ok {
		return n
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// TestScenarioCountsMatchTheTable: every count of the fault scenarios the
// prose gives (README.md, docs/*.md, the Makefile: "the N fault
// scenarios", "N fault-injection scenarios", the short variant's "(two
// scenarios"), and reliability.md's table of scenarios, are those of the
// scenario table in integration/faults.
func TestScenarioCountsMatchTheTable(t *testing.T) {
	names, short := scenarioTable(t)
	t.Logf("%d fault scenarios, %d in the short variant", len(names), short)
	all := regexp.MustCompile(`\b(\d+|one|two|three|four|five|six) fault(?:-injection)? scenarios\b`)
	shortVariant := regexp.MustCompile(`short variant \((\d+|one|two|three|four|five|six) scenarios`)
	files, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, path := range append(files, filepath.Join("..", "README.md"), filepath.Join("..", "Makefile")) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(data)), " ") // a count may wrap
		for _, m := range all.FindAllStringSubmatch(text, -1) {
			checked++
			if count(m[1]) != len(names) {
				t.Errorf("%s says %q: the table has %d scenarios", filepath.Base(path), m[0], len(names))
			}
		}
		for _, m := range shortVariant.FindAllStringSubmatch(text, -1) {
			checked++
			if count(m[1]) != short {
				t.Errorf("%s says %q: the short variant runs %d", filepath.Base(path), m[0], short)
			}
		}
	}
	if checked == 0 {
		t.Error("no count of the fault scenarios found in the prose")
	}
	table := strings.Join(section(t, "docs/reliability.md", "The scenarios"), "\n")
	if m := regexp.MustCompile(`One test per scenario, (\d+) in all`).FindStringSubmatch(table); m == nil || count(m[1]) != len(names) {
		t.Errorf("reliability.md, The scenarios: %q, want %d in all", m, len(names))
	}
	// Each scenario is named in the table (in backticks), or a `Prefix*`
	// there covers it.
	var named, prefixes []string
	for _, m := range backticked.FindAllStringSubmatch(table, -1) {
		if p, ok := strings.CutSuffix(m[1], "*"); ok {
			prefixes = append(prefixes, p)
		} else {
			named = append(named, m[1])
		}
	}
	for _, name := range names {
		if !slices.Contains(named, name) && !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			t.Errorf("reliability.md, The scenarios: %s is not in the table", name)
		}
	}
}
