package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// How the files of internal/engine depend on each other.
//
// A reference is a file's use of a function, method or type defined in
// another file of the same package (fields, variables and constants are
// not counted), counted once per ordered pair of files. A layering orders
// the files from the bottom up; a reference runs back up when a file uses
// a file above it. The layering is the one that leaves the fewest
// references running back up (found exactly for up to maxExactLayer files
// on a common cycle, by local search beyond), so the share measures how far the
// package is from any layering, not from one chosen by hand.

// maxEngineBackShare bounds the share of internal/engine's references that
// run back up (see above): 18% before the engine was organised by type
// (31 of 171 references, 145 of them on a cycle of files), none after it
// (0 of 187, none on a cycle). The bound leaves room for a few; the
// layering the test prints says where a new file belongs.
const maxEngineBackShare = 0.10

// TestEngineFilesAreLayered measures how far internal/engine's files are
// from a layering (see above) and fails past maxEngineBackShare.
func TestEngineFilesAreLayered(t *testing.T) {
	g, err := fileGraph(filepath.Join("..", "internal", "engine"))
	if err != nil {
		t.Fatal(err)
	}
	order, back := g.layering()
	share := float64(len(back)) / float64(max(1, len(g.edges)))
	t.Logf("internal/engine: %d files, %d references between them, %d run back up (%.0f%%); %d on a cycle of files",
		len(g.files), len(g.edges), len(back), 100*share, g.onCycles())
	t.Logf("layering, bottom up: %s", strings.Join(order, " "))
	for _, e := range back {
		t.Logf("back up: %s uses %s (%s)", e.from, e.to, strings.Join(g.names[e], ", "))
	}
	if share > maxEngineBackShare {
		t.Errorf("%.0f%% of internal/engine's file-to-file references run back up (at most %.0f%%): give the concern a type of its own in its file, used from above",
			100*share, 100*maxEngineBackShare)
	}
}

// edge is one reference: from uses something defined in to.
type edge struct{ from, to string }

// graph is the references between the files of one package.
type graph struct {
	files []string
	edges []edge
	names map[edge][]string // what from uses of to
}

// fileGraph type-checks the package in dir (its non-test files, with the
// export data `go list -export` gives for its imports) and returns the
// references between its files.
func fileGraph(dir string) (*graph, error) {
	exports, err := exportData(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, err := (&types.Config{Importer: imp}).Check(dir, fset, files, info)
	if err != nil {
		return nil, err
	}
	g := &graph{names: map[edge][]string{}}
	for _, f := range files {
		g.files = append(g.files, filepath.Base(fset.Position(f.Pos()).Filename))
	}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg || !obj.Pos().IsValid() {
			continue
		}
		switch o := obj.(type) {
		case *types.Func:
		case *types.TypeName:
			if o.Parent() != pkg.Scope() {
				continue // a type parameter, or a type local to a function
			}
		default:
			continue
		}
		e := edge{filepath.Base(fset.Position(id.Pos()).Filename), filepath.Base(fset.Position(obj.Pos()).Filename)}
		if e.from == e.to {
			continue
		}
		if _, ok := g.names[e]; !ok {
			g.edges = append(g.edges, e)
		}
		if !slices.Contains(g.names[e], obj.Name()) {
			g.names[e] = append(g.names[e], obj.Name())
		}
	}
	slices.Sort(g.files)
	slices.SortFunc(g.edges, func(a, b edge) int { return strings.Compare(a.from+" "+a.to, b.from+" "+b.to) })
	for _, n := range g.names {
		slices.Sort(n)
	}
	return g, nil
}

// exportData returns the export data file of every package the package in
// dir imports, directly or not.
func exportData(dir string) (map[string]string, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export in %s: %v: %s", dir, err, stderr.String())
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			m[path] = file
		}
	}
	return m, sc.Err()
}

// maxExactLayer is the largest cycle of files (strongly connected
// component) layered exactly; a larger one is layered by local search.
const maxExactLayer = 25

// layering returns the files bottom up in the order that leaves the
// fewest references running back up, and those references. Components of
// the graph (files on a common cycle) are ordered after what they use;
// inside one, the order is exact up to maxExactLayer files.
func (g *graph) layering() ([]string, []edge) {
	uses := map[string][]string{}
	for _, e := range g.edges {
		uses[e.from] = append(uses[e.from], e.to)
	}
	var order []string
	for _, comp := range components(g.files, uses) {
		order = append(order, orderComponent(comp, g.edges)...)
	}
	pos := map[string]int{}
	for i, f := range order {
		pos[f] = i
	}
	var back []edge
	for _, e := range g.edges {
		if pos[e.to] > pos[e.from] {
			back = append(back, e)
		}
	}
	return order, back
}

// onCycles counts the references that lie on a cycle of files: those no
// layering can make all run down.
func (g *graph) onCycles() int {
	uses := map[string][]string{}
	for _, e := range g.edges {
		uses[e.from] = append(uses[e.from], e.to)
	}
	comp := map[string]int{}
	for i, c := range components(g.files, uses) {
		for _, f := range c {
			comp[f] = i
		}
	}
	n := 0
	for _, e := range g.edges {
		if comp[e.from] == comp[e.to] {
			n++
		}
	}
	return n
}

// components returns the strongly connected components of the files
// (Tarjan's algorithm), each after every component it uses.
func components(files []string, uses map[string][]string) [][]string {
	index, low := map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var out [][]string
	var visit func(f string)
	visit = func(f string) {
		index[f], low[f] = len(index), len(index)
		stack = append(stack, f)
		onStack[f] = true
		for _, u := range uses[f] {
			if _, seen := index[u]; !seen {
				visit(u)
				low[f] = min(low[f], low[u])
			} else if onStack[u] {
				low[f] = min(low[f], index[u])
			}
		}
		if low[f] == index[f] {
			var comp []string
			for {
				top := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[top] = false
				comp = append(comp, top)
				if top == f {
					break
				}
			}
			slices.Sort(comp)
			out = append(out, comp)
		}
	}
	for _, f := range files {
		if _, seen := index[f]; !seen {
			visit(f)
		}
	}
	return out
}

// orderComponent orders one component's files bottom up, leaving the
// fewest of its references running back up.
func orderComponent(comp []string, edges []edge) []string {
	if len(comp) == 1 {
		return comp
	}
	idx := map[string]int{}
	for i, f := range comp {
		idx[f] = i
	}
	// usedBy[v]: the files of comp that use v.
	usedBy := make([]uint64, len(comp))
	for _, e := range edges {
		i, okFrom := idx[e.from]
		j, okTo := idx[e.to]
		if okFrom && okTo {
			usedBy[j] |= 1 << i
		}
	}
	if len(comp) <= maxExactLayer {
		return exactOrder(comp, usedBy)
	}
	return searchOrder(comp, usedBy)
}

// exactOrder is orderComponent by dynamic programming over the sets of
// files placed at the bottom: placing v on top of the set s costs the
// files of s that use v.
func exactOrder(comp []string, usedBy []uint64) []string {
	n := len(comp)
	full := uint64(1)<<n - 1
	cost := make([]uint8, 1<<n)
	for s := uint64(1); s <= full; s++ {
		best := 255
		for rest := s; rest != 0; rest &= rest - 1 {
			v := bits.TrailingZeros64(rest)
			below := s &^ (1 << v)
			if c := int(cost[below]) + bits.OnesCount64(usedBy[v]&below); c < best {
				best = c
			}
		}
		cost[s] = uint8(min(best, 255))
	}
	order := make([]string, n)
	for s, i := full, n-1; s != 0; i-- {
		for rest := s; rest != 0; rest &= rest - 1 {
			v := bits.TrailingZeros64(rest)
			below := s &^ (1 << v)
			if int(cost[below])+bits.OnesCount64(usedBy[v]&below) == int(cost[s]) {
				order[i] = comp[v]
				s = below
				break
			}
		}
	}
	return order
}

// searchOrder is orderComponent by local search: from the files ordered
// by how much they use minus how much they are used, move one file at a
// time to the place that leaves the fewest references back up, until no
// move helps.
func searchOrder(comp []string, usedBy []uint64) []string {
	n := len(comp)
	uses := make([]uint64, n)
	for v, by := range usedBy {
		for rest := by; rest != 0; rest &= rest - 1 {
			uses[bits.TrailingZeros64(rest)] |= 1 << v
		}
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return (bits.OnesCount64(uses[a]) - bits.OnesCount64(usedBy[a])) - (bits.OnesCount64(uses[b]) - bits.OnesCount64(usedBy[b]))
	})
	backOf := func(o []int) int {
		below, n := uint64(0), 0
		for _, v := range o {
			n += bits.OnesCount64(usedBy[v] & below)
			below |= 1 << v
		}
		return n
	}
	best := backOf(order)
	for improved := true; improved; {
		improved = false
		for i := 0; i < n && !improved; i++ {
			v := order[i]
			rest := slices.Delete(slices.Clone(order), i, i+1)
			for j := 0; j <= len(rest); j++ {
				cand := slices.Insert(slices.Clone(rest), j, v)
				if c := backOf(cand); c < best {
					best, order, improved = c, cand, true
					break
				}
			}
		}
	}
	out := make([]string, n)
	for i, v := range order {
		out[i] = comp[v]
	}
	return out
}
