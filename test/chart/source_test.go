package chart

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// readRepoFile reads a file by its path in the repository.
func readRepoFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixture.repo, filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// repoFiles lists the names of a repository folder's files ending in suffix, sorted.
func repoFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(fixture.repo, filepath.FromSlash(dir)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), suffix) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// parseGo parses a Go file of the repository.
func parseGo(t *testing.T, path string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(fixture.repo, filepath.FromSlash(path)), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// goStringConst returns the value of a string constant declared in a Go file of the
// repository, so the tests follow the code instead of copying its names.
func goStringConst(t *testing.T, path, name string) string {
	t.Helper()
	for _, decl := range parseGo(t, path).Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, ident := range vs.Names {
				if ident.Name != name || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s: constant %s is not a string literal", path, name)
				}
				value, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				return value
			}
		}
	}
	t.Fatalf("%s declares no constant %s", path, name)
	return ""
}

// flagDefiners are the functions of package flag that define a flag, with the index of the
// flag name among their arguments.
var flagDefiners = map[string]int{
	"Bool": 0, "Duration": 0, "Float64": 0, "Int": 0, "Int64": 0, "String": 0, "Uint": 0, "Uint64": 0, "Func": 0, "BoolFunc": 0,
	"BoolVar": 1, "DurationVar": 1, "Float64Var": 1, "IntVar": 1, "Int64Var": 1, "StringVar": 1, "UintVar": 1, "Uint64Var": 1,
	"TextVar": 1, "Var": 1,
}

// operatorFlags returns the flags cmd/operator defines with package flag.
func operatorFlags(t *testing.T) map[string]bool {
	t.Helper()
	flags := map[string]bool{}
	for _, name := range repoFiles(t, "cmd/operator", ".go") {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		ast.Inspect(parseGo(t, "cmd/operator/"+name), func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			index, defines := flagDefiners[sel.Sel.Name]
			// Package flag's functions, or the methods of the FlagSet parseFlags names fs.
			if !ok || (pkg.Name != "flag" && pkg.Name != "fs") || !defines || index >= len(call.Args) {
				return true
			}
			if lit, ok := call.Args[index].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if name, err := strconv.Unquote(lit.Value); err == nil {
					flags[name] = true
				}
			}
			return true
		})
	}
	if len(flags) == 0 {
		t.Fatal("found no flag definitions in cmd/operator")
	}
	return flags
}

// jsonDiff compares two JSON-like values and describes the first difference ("" when equal).
func jsonDiff(want, got any) string {
	normalize := func(v any) any {
		data, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprintf("unencodable: %v", err)
		}
		var out any
		if err := json.Unmarshal(data, &out); err != nil {
			return fmt.Sprintf("undecodable: %v", err)
		}
		return out
	}
	return firstDifference("", normalize(want), normalize(got))
}

func firstDifference(path string, want, got any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want an object, got %v", orRoot(path), got)
		}
		for _, k := range sortedKeys(w) {
			if _, present := g[k]; !present {
				return fmt.Sprintf("%s.%s: missing", path, k)
			}
			if d := firstDifference(path+"."+k, w[k], g[k]); d != "" {
				return d
			}
		}
		for _, k := range sortedKeys(g) {
			if _, present := w[k]; !present {
				return fmt.Sprintf("%s.%s: unexpected", path, k)
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: want %d items, got %v", orRoot(path), len(w), got)
		}
		for i := range w {
			if d := firstDifference(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Sprintf("%s: want %v, got %v", orRoot(path), want, got)
	}
	return ""
}

func orRoot(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}
