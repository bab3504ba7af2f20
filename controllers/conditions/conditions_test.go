package conditions_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// constants reads the string constants of a Go file, by name.
func constants(t *testing.T, path string) map[string]string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					out[name.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return out
}

// documented reads the first column of the table under the header starting with header, in
// docs/api.md's Conditions section.
func documented(t *testing.T, section, header string) []string {
	t.Helper()
	var out []string
	in := false
	cell := regexp.MustCompile("^\\| `([A-Za-z]+)` \\|")
	for _, line := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(line, header):
			in = true
		case in && !strings.HasPrefix(line, "|"):
			return out
		case in:
			if m := cell.FindStringSubmatch(line); m != nil {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// TestConditionsDocumented: docs/api.md lists exactly the condition types and reasons the
// code defines (every one of them is written somewhere), no more and no fewer.
func TestConditionsDocumented(t *testing.T) {
	var types, reasons []string
	for _, file := range []string{"../../api/v1alpha1/conditions.go", "conditions.go"} {
		for name, value := range constants(t, file) {
			switch {
			case strings.HasPrefix(name, "Reason"):
				reasons = append(reasons, value)
			case strings.HasPrefix(name, "Condition"), file == "conditions.go":
				types = append(types, value)
			}
		}
	}
	raw, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(raw), "\n## Conditions\n")
	if !found {
		t.Fatal("docs/api.md has no Conditions section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, tc := range []struct {
		what       string
		code, docs []string
	}{
		{"condition types", types, documented(t, section, "| Type |")},
		{"reasons", reasons, documented(t, section, "| Reason |")},
	} {
		code, docs := uniqueSorted(tc.code), uniqueSorted(tc.docs)
		if len(code) < 5 {
			t.Fatalf("found only %d %s in the code: %v", len(code), tc.what, code)
		}
		for _, c := range code {
			if !slices.Contains(docs, c) {
				t.Errorf("%s: %q is in the code but not in docs/api.md", tc.what, c)
			}
		}
		for _, d := range docs {
			if !slices.Contains(code, d) {
				t.Errorf("%s: %q is in docs/api.md but not in the code", tc.what, d)
			}
		}
	}
}

func uniqueSorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}
