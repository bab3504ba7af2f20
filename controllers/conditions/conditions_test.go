package conditions_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
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
				if i >= len(vs.Values) {
					break // iota and implicit repetition: not a string literal
				}
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

// moduleRoot is the repository root, from this package's directory.
const moduleRoot = "../.."

// eventReasons are Reason constants the operator gives to no condition of its own objects: to
// events, or to the Issuing condition of a cert-manager Certificate it asks to issue now;
// docs/api.md mentions them beside the tables.
var eventReasons = map[string]bool{
	"Undecodable":        true, // controllers/setup.go: a stored object the operator cannot decode
	"CertificateIssued":  true, // controllers/cachecluster/tls.go: new sidecar serving certificates
	"NotFromCertManager": true, // controllers/cachecluster/certmanager.go: on the Certificate
	"SignerRotated":      true, // controllers/cachecluster/certmanager.go: on the Certificate
}

// reasonConstants reads every string constant named Reason... in the module's non-test Go
// files (the operator's, the sidecar's and the allocator's), so that a reason defined in a new
// place cannot go undocumented.
func reasonConstants(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(moduleRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != moduleRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for name, value := range constants(t, path) {
			if strings.HasPrefix(name, "Reason") {
				out[path+": "+name] = value
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConditionsDocumented: docs/api.md lists exactly the condition types and reasons the
// code defines (every one of them is written somewhere), no more and no fewer. Types come from
// the two condition files; reasons from every Reason constant of the module, including the
// sidecar's (cache-sidecar/agent) and the Allocated condition's (internal/control).
func TestConditionsDocumented(t *testing.T) {
	var types, reasons []string
	for _, file := range []string{"../../api/v1alpha1/conditions.go", "conditions.go"} {
		for name, value := range constants(t, file) {
			if strings.HasPrefix(name, "Condition") || (file == "conditions.go" && !strings.HasPrefix(name, "Reason")) {
				types = append(types, value)
			}
		}
	}
	seenEvents := map[string]bool{}
	for where, value := range reasonConstants(t) {
		if eventReasons[value] {
			seenEvents[value] = true
		} else {
			reasons = append(reasons, value)
		}
		t.Logf("%s = %q", where, value)
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
		if tc.what == "reasons" {
			for reason := range eventReasons {
				if !seenEvents[reason] {
					t.Errorf("event reason %q is no Reason constant of the module any more", reason)
				}
				if !strings.Contains(section, "`"+reason+"`") {
					t.Errorf("event reason %q is not mentioned in docs/api.md's Conditions section", reason)
				}
			}
		}
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
