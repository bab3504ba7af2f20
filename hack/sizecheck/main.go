// Command sizecheck fails when the repository tracks a file larger than the limit that is not
// a documented fixture: build outputs and blobs must not be committed (they grow every clone
// and the Docker build context). The fixtures allowed to be larger are listed, each with why,
// in hack/large-files.txt; an entry for a file that is gone or no longer large fails too, so
// the list stays true.
//
//	go run ./hack/sizecheck [-limit bytes] [-allowed hack/large-files.txt]
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// defaultLimit is 1 MB.
const defaultLimit = 1_000_000

func main() {
	limit := flag.Int64("limit", defaultLimit, "largest size in bytes of a tracked file that is not a listed fixture")
	allowed := flag.String("allowed", "hack/large-files.txt", "the listed fixtures: one path per line, then # and why")
	flag.Parse()
	problems, err := check(".", *limit, *allowed)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sizecheck:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "sizecheck:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

// check compares the sizes of the files tracked in the git index of repo with the list of
// allowed fixtures (a path relative to repo) and describes every violation.
func check(repo string, limit int64, allowedPath string) ([]string, error) {
	allowedFile, err := os.ReadFile(filepath.Join(repo, allowedPath))
	if err != nil {
		return nil, err
	}
	allowed, err := parseAllowed(allowedFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", allowedPath, err)
	}
	sizes, err := trackedSizes(repo)
	if err != nil {
		return nil, err
	}
	var problems []string
	for path, size := range sizes {
		if size > limit && !allowed[path] {
			problems = append(problems, fmt.Sprintf("%s is %d bytes, over the %d byte limit: remove it, or list it in %s with why it must be tracked", path, size, limit, allowedPath))
		}
	}
	for path := range allowed {
		size, tracked := sizes[path]
		switch {
		case !tracked:
			problems = append(problems, fmt.Sprintf("%s lists %s, which is not tracked: remove the entry", allowedPath, path))
		case size <= limit:
			problems = append(problems, fmt.Sprintf("%s lists %s, which is %d bytes, within the limit: remove the entry", allowedPath, path, size))
		}
	}
	sort.Strings(problems)
	return problems, nil
}

// parseAllowed reads "path # why" lines; blank lines and lines starting with # are comments.
func parseAllowed(b []byte) (map[string]bool, error) {
	allowed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		path, why, found := strings.Cut(line, "#")
		path = strings.TrimSpace(path)
		if !found || strings.TrimSpace(why) == "" {
			return nil, fmt.Errorf("line %d: %q says no reason (path # why)", n, line)
		}
		if strings.ContainsAny(path, " \t") {
			return nil, fmt.Errorf("line %d: %q is not one path", n, path)
		}
		if allowed[path] {
			return nil, fmt.Errorf("line %d: %s is listed twice", n, path)
		}
		allowed[path] = true
	}
	return allowed, sc.Err()
}

// trackedSizes returns the size of every file in repo's git index, as staged: what a commit
// would hold, whatever the working tree has.
func trackedSizes(repo string) (map[string]int64, error) {
	out, err := git(repo, nil, "ls-files", "-z", "--stage")
	if err != nil {
		return nil, err
	}
	var paths []string
	var objects bytes.Buffer
	for _, entry := range bytes.Split(out, []byte{0}) {
		if len(entry) == 0 {
			continue
		}
		// <mode> <object> <stage>\t<path>
		meta, path, ok := bytes.Cut(entry, []byte{'\t'})
		fields := strings.Fields(string(meta))
		if !ok || len(fields) != 3 {
			return nil, fmt.Errorf("git ls-files: unexpected entry %q", entry)
		}
		if fields[0] == "160000" { // a submodule: its commit, not a file
			continue
		}
		paths = append(paths, string(path))
		objects.WriteString(fields[1] + "\n")
	}
	out, err = git(repo, &objects, "cat-file", "--batch-check=%(objectsize)")
	if err != nil {
		return nil, err
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(paths) {
		return nil, fmt.Errorf("git cat-file gave %d sizes for %d files", len(lines), len(paths))
	}
	sizes := make(map[string]int64, len(paths))
	for i, l := range lines {
		size, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("git cat-file: size of %s: %q", paths[i], l)
		}
		sizes[paths[i]] = size
	}
	return sizes, nil
}

func git(repo string, stdin *bytes.Buffer, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("git %s: %s", strings.Join(args, " "), strings.TrimSpace(stderr.String()))
		}
		return nil, fmt.Errorf("git %s: %w", args[0], err)
	}
	return out, nil
}
