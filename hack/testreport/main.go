// Command testreport turns `go test -json` output into a readable log with per-layer counts.
//
//	go test -json ./... | testreport -layer unit -counts counts.txt
//	testreport -total counts.txt
//
// The first form prints every package's verdict, the full output of failed tests and builds,
// each skipped test or subtest with its output (the reason), and a closing "unit: N passed, N failed, N skipped" line; it appends the counts to the counts
// file. The second prints a table of all layers and the overall closing line. Both exit 1 when
// anything failed; -total also when no test ran at all, so CI can never pass on an empty run.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Output     string
	Elapsed    float64
}

type counts struct {
	layer                             string
	passed, failed, skipped, pkgFails int
}

func main() {
	layer := flag.String("layer", "", "name of the layer whose go test -json output arrives on stdin")
	countsFile := flag.String("counts", "", "file the layer's counts are appended to")
	total := flag.String("total", "", "counts file to summarize")
	flag.Parse()

	var err error
	var ok bool
	switch {
	case *total != "":
		ok, err = summarize(os.Stdout, *total)
	case *layer != "":
		ok, err = report(os.Stdin, os.Stdout, *layer, *countsFile)
	default:
		err = fmt.Errorf("give -layer NAME or -total FILE")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// report reads one layer's JSON stream and prints it; ok is false when a test or build failed.
func report(in io.Reader, out io.Writer, layer, countsFile string) (bool, error) {
	c := counts{layer: layer}
	outputs := map[string][]string{} // package/test -> output lines, printed only on failure
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	for scanner.Scan() {
		line := scanner.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// go itself printed this (a module or build error outside the JSON stream).
			fmt.Fprintln(out, string(line))
			c.pkgFails++
			continue
		}
		pkg := e.Package
		if pkg == "" {
			pkg = e.ImportPath
		}
		key := pkg + " " + e.Test
		switch e.Action {
		case "output", "build-output":
			outputs[key] = append(outputs[key], e.Output)
		case "build-fail":
			fmt.Fprintf(out, "BUILD FAILED %s\n%s", pkg, strings.Join(outputs[key], ""))
			c.pkgFails++
		case "pass":
			if e.Test == "" {
				fmt.Fprintf(out, "ok    %s (%.1fs)\n", pkg, e.Elapsed)
			} else if !strings.Contains(e.Test, "/") {
				c.passed++
			}
			delete(outputs, key)
		case "skip":
			if e.Test != "" {
				// Subtests are not counted, so each skip is named with its reason: a skipped
				// subtest would otherwise hide inside a passing test.
				fmt.Fprintf(out, "--- SKIP %s %s\n%s", pkg, e.Test, indent(strings.Join(outputs[key], "")))
				if !strings.Contains(e.Test, "/") {
					c.skipped++
				}
			}
			delete(outputs, key)
		case "fail":
			if e.Test == "" {
				fmt.Fprintf(out, "FAIL  %s (%.1fs)\n", pkg, e.Elapsed)
				if rest := strings.Join(outputs[key], ""); rest != "" {
					fmt.Fprint(out, indent(rest))
				}
				c.pkgFails++
			} else {
				fmt.Fprintf(out, "--- FAIL %s %s\n%s", pkg, e.Test, indent(strings.Join(outputs[key], "")))
				if !strings.Contains(e.Test, "/") {
					c.failed++
				}
			}
			delete(outputs, key)
		}
	}
	if err := scanner.Err(); err != nil {
		return false, err
	}
	fmt.Fprintf(out, "%s: %d passed, %d failed, %d skipped\n", layer, c.passed, c.failed, c.skipped)
	if countsFile != "" {
		f, err := os.OpenFile(countsFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return false, err
		}
		defer f.Close()
		if _, err := fmt.Fprintf(f, "%s %d %d %d %d\n", c.layer, c.passed, c.failed, c.skipped, c.pkgFails); err != nil {
			return false, err
		}
	}
	return c.failed == 0 && c.pkgFails == 0, nil
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

func summarize(out io.Writer, countsFile string) (bool, error) {
	data, err := os.ReadFile(countsFile)
	if err != nil {
		return false, err
	}
	var layers []counts
	for _, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var c counts
		if _, err := fmt.Sscanf(line, "%s %d %d %d %d", &c.layer, &c.passed, &c.failed, &c.skipped, &c.pkgFails); err != nil {
			return false, fmt.Errorf("counts line %q: %w", line, err)
		}
		layers = append(layers, c)
	}
	var sum counts
	fmt.Fprintln(out, "== test layers")
	for _, c := range layers {
		fmt.Fprintf(out, "  %-12s %5d passed %4d failed %4d skipped %3d package failures\n",
			c.layer, c.passed, c.failed, c.skipped, c.pkgFails)
		sum.passed += c.passed
		sum.failed += c.failed
		sum.skipped += c.skipped
		sum.pkgFails += c.pkgFails
	}
	fmt.Fprintf(out, "total: %d passed, %d failed, %d skipped\n", sum.passed, sum.failed, sum.skipped)
	if sum.passed == 0 {
		fmt.Fprintln(out, "no test ran: that is a failure, not a pass")
		return false, nil
	}
	return sum.failed == 0 && sum.pkgFails == 0, nil
}
