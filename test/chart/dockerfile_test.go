package chart

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined; a heredoc's body is
// kept apart.
type instruction struct {
	keyword string // upper case
	args    string
	heredoc string
}

// stage is one FROM and what follows it.
type stage struct {
	base, name   string
	instructions []instruction
}

// heredocStart matches a heredoc marker such as <<'EOF' or <<EOF.
var heredocStart = regexp.MustCompile(`<<-?'?"?([A-Za-z_]+)'?"?`)

// parseDockerfile splits a Dockerfile into stages. It handles comments, backslash line
// continuations and heredocs, which is all the project's Dockerfile uses.
func parseDockerfile(text string) (globalArgs map[string]string, stages []stage, err error) {
	globalArgs = map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				continue
			}
			line = strings.TrimSuffix(line, "\\") + " " + next
		}
		keyword, args, _ := strings.Cut(line, " ")
		ins := instruction{keyword: strings.ToUpper(keyword), args: strings.TrimSpace(args)}
		if m := heredocStart.FindStringSubmatch(args); m != nil {
			var body []string
			for i++; i < len(lines) && lines[i] != m[1]; i++ {
				body = append(body, lines[i])
			}
			if i == len(lines) {
				return nil, nil, fmt.Errorf("heredoc %s is not terminated", m[1])
			}
			ins.heredoc = strings.Join(body, "\n") + "\n"
		}
		switch {
		case ins.keyword == "FROM":
			fields := strings.Fields(ins.args)
			if len(fields) == 0 {
				return nil, nil, errors.New("FROM without an image")
			}
			s := stage{base: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				s.name = fields[2]
			}
			stages = append(stages, s)
		case len(stages) == 0 && ins.keyword == "ARG":
			name, value, _ := strings.Cut(ins.args, "=")
			globalArgs[name] = value
		case len(stages) == 0:
			return nil, nil, fmt.Errorf("%s before the first FROM", ins.keyword)
		default:
			stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, ins)
		}
	}
	return globalArgs, stages, nil
}

func stageNamed(t *testing.T, stages []stage, name string) stage {
	t.Helper()
	for _, s := range stages {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("the Dockerfile has no stage %q", name)
	return stage{}
}

// last returns the arguments of a stage's last instruction of a kind ("" when none).
func (s stage) last(keyword string) string {
	out := ""
	for _, ins := range s.instructions {
		if ins.keyword == keyword {
			out = ins.args
		}
	}
	return out
}

// copies returns the stage's COPY --from=SOURCE instructions as "SOURCE SRC DST".
func (s stage) copies() []string {
	var out []string
	for _, ins := range s.instructions {
		if ins.keyword != "COPY" {
			continue
		}
		fields := strings.Fields(ins.args)
		if len(fields) == 3 && strings.HasPrefix(fields[0], "--from=") {
			out = append(out, strings.TrimPrefix(fields[0], "--from=")+" "+fields[1]+" "+fields[2])
		}
	}
	return out
}

func readDockerfile(t *testing.T) (map[string]string, []stage) {
	t.Helper()
	args, stages, err := parseDockerfile(string(readRepoFile(t, "Dockerfile")))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return args, stages
}

// FuzzParseDockerfile checks that the parser never panics or loops, and that every stage it
// returns has a base image.
func FuzzParseDockerfile(f *testing.F) {
	for _, seed := range []string{
		"FROM a:1 AS b\nRUN x \\\n  y\n", "ARG V=1\nFROM s\nCOPY <<'E' /f\nbody\nE\n",
		"RUN before\n", "FROM\n", "FROM a\nCOPY <<EOF /x\nunterminated\n", "# c\n\\\n", "FROM a \\",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		_, stages, err := parseDockerfile(text)
		if err != nil {
			return
		}
		for _, s := range stages {
			if s.base == "" {
				t.Fatalf("parseDockerfile(%q) returned a stage without a base image", text)
			}
		}
	})
}

// pinnedTag matches an image reference with an exact version tag (at least major.minor, or
// a digest).
var pinnedTag = regexp.MustCompile(`^[a-z0-9./-]+(:[0-9]+\.[0-9]+[A-Za-z0-9._-]*|@sha256:[a-f0-9]{64})$`)

// TestDockerfileStages checks the image targets, their users, and that every base image is
// pinned.
func TestDockerfileStages(t *testing.T) {
	_, stages := readDockerfile(t)
	names := map[string]bool{}
	for _, s := range stages {
		if s.name != "" {
			names[s.name] = true
		}
	}
	for _, s := range stages {
		switch {
		case names[s.base], s.base == "scratch":
		case strings.Contains(s.base, "$"):
			t.Errorf("stage %s: base image %s comes from a build argument, which hides what is pinned", s.name, s.base)
		case strings.HasSuffix(s.base, ":latest") || !pinnedTag.MatchString(s.base):
			t.Errorf("stage %s: base image %s is not pinned to an exact version", s.name, s.base)
		}
	}
	for _, target := range []string{"operator", "cache-sidecar", "loadgen"} {
		s := stageNamed(t, stages, target)
		user := s.last("USER")
		uid, _, _ := strings.Cut(user, ":")
		if uid == "" || uid == "0" || uid == "root" {
			t.Errorf("target %s runs as %q, want a non-root USER", target, user)
		}
		if strings.Contains(s.base, "alpine") {
			t.Errorf("target %s is based on %s: OR-Tools and the engines need glibc", target, s.base)
		}
		if s.last("ENTRYPOINT") == "" {
			t.Errorf("target %s has no ENTRYPOINT", target)
		}
	}
}

// TestDockerfileCopiesEverySourceFolder checks that the build stage copies every top-level
// folder holding a package the binaries import (go list -deps), so the image build
// compiles what `go build` here compiles.
func TestDockerfileCopiesEverySourceFolder(t *testing.T) {
	_, stages := readDockerfile(t)
	copied := map[string]bool{}
	for _, ins := range stageNamed(t, stages, "build").instructions {
		fields := strings.Fields(ins.args)
		if ins.keyword == "COPY" && len(fields) == 2 && fields[0] == fields[1] {
			copied[strings.TrimSuffix(fields[0], "/")] = true
		}
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{if .Main}}{{$.ImportPath}}{{end}}{{end}}", "./cmd/operator", "./cmd/cache-sidecar", "./cmd/cacheqos-loadgen")
	cmd.Dir = fixture.repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", commandError(err))
	}
	module := strings.TrimSpace(string(readRepoFile(t, "go.mod")))
	module = strings.TrimPrefix(strings.SplitN(module, "\n", 2)[0], "module ")
	needed := map[string]bool{}
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(pkg, module+"/")
		needed[strings.SplitN(rel, "/", 2)[0]] = true
	}
	if len(needed) == 0 {
		t.Fatal("go list found no package of the module")
	}
	for _, dir := range sortedKeys(needed) {
		if !copied[dir] {
			t.Errorf("the binaries import packages under %s/, which the Dockerfile's build stage does not COPY (it copies %v)", dir, sortedKeys(copied))
		}
	}
}

// TestDockerfileOperatorImage checks the OR-Tools layout of the operator image: the wheel's
// pinned version, its two library folders side by side, and CACHEQOS_ORTOOLS_LIB pointing
// into them.
func TestDockerfileOperatorImage(t *testing.T) {
	args, stages := readDockerfile(t)
	versions := readVersions(t)
	if args["ORTOOLS_VERSION"] != versions["ORTOOLS_VERSION"] {
		t.Errorf("the Dockerfile's ORTOOLS_VERSION %q differs from hack/versions.env's %q", args["ORTOOLS_VERSION"], versions["ORTOOLS_VERSION"])
	}
	ortools := stageNamed(t, stages, "ortools")
	run := ortools.last("RUN")
	for _, want := range []string{`"ortools==${ORTOOLS_VERSION}"`, "/opt/ortools/ortools/.libs", "/opt/ortools/ortools.libs"} {
		if !strings.Contains(run, want) {
			t.Errorf("the ortools stage does not use %s", want)
		}
	}
	operator := stageNamed(t, stages, "operator")
	if !slices.Contains(operator.copies(), "ortools /opt/ortools/ /opt/ortools/") {
		t.Errorf("the operator image does not copy /opt/ortools/ from the ortools stage: %v", operator.copies())
	}
	if got := operator.last("ENV"); got != "CACHEQOS_ORTOOLS_LIB="+imageOrtoolsLib {
		t.Errorf("operator ENV %q, want CACHEQOS_ORTOOLS_LIB=%s", got, imageOrtoolsLib)
	}
}

// imageOrtoolsLib is where libortools lives in the operator image, in the wheel's layout.
const imageOrtoolsLib = "/opt/ortools/ortools/.libs/libortools.so.9"

// TestDockerfileSidecarImage checks the sidecar image's contract with the operator's
// DaemonSet (controllers/cachecluster): the sidecar binary where the init container runs it,
// and both engines on PATH.
func TestDockerfileSidecarImage(t *testing.T) {
	_, stages := readDockerfile(t)
	sidecar := stageNamed(t, stages, "cache-sidecar")
	binary := goStringConst(t, "controllers/cachecluster/daemonset.go", "sidecarBinary")
	copies := sidecar.copies()
	for _, want := range []string{"build /out/cache-sidecar " + binary, "redis /out/ /", "memcached /out/ /"} {
		if !slices.Contains(copies, want) {
			t.Errorf("the cache-sidecar image lacks COPY --from=%s (it has %v)", want, copies)
		}
	}
	if got := sidecar.last("ENTRYPOINT"); got != fmt.Sprintf("[%q]", binary) {
		t.Errorf("cache-sidecar ENTRYPOINT %s, want [%q]", got, binary)
	}
	for _, engine := range []struct{ stage, image, binary string }{
		{"redis", "redis:7.0.", "redis-server"}, {"memcached", "memcached:1.6.", "memcached"},
	} {
		s := stageNamed(t, stages, engine.stage)
		if !strings.HasPrefix(s.base, engine.image) {
			t.Errorf("stage %s is based on %s, want the official %s* image", engine.stage, s.base, engine.image)
		}
		if run := s.last("RUN"); !strings.HasSuffix(run, "collect-engine.sh "+engine.binary) {
			t.Errorf("stage %s does not collect %s: RUN %s", engine.stage, engine.binary, run)
		}
	}
}

// TestCollectEngineScript runs the Dockerfile's collect-engine.sh on this machine's engines
// (Debian's, the same release as the images'): it must copy the engine to /usr/bin with every
// library ldd resolves for it, at resolved paths, and not the C library's own.
func TestCollectEngineScript(t *testing.T) {
	_, stages := readDockerfile(t)
	var script string
	for _, ins := range stageNamed(t, stages, "collect-engine").instructions {
		if ins.keyword == "COPY" && strings.HasSuffix(ins.args, "/collect-engine.sh") {
			script = ins.heredoc
		}
	}
	if script == "" {
		t.Fatal("the collect-engine stage has no collect-engine.sh heredoc")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "collect-engine.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, engine := range []string{"redis-server", "memcached"} {
		t.Run(engine, func(t *testing.T) {
			hostBinary, err := exec.LookPath(engine)
			if err != nil {
				t.Fatalf("%s is not installed (hack/bootstrap.sh apt): %v", engine, err)
			}
			out := filepath.Join(dir, engine)
			cmd := exec.Command("sh", path, engine)
			cmd.Env = append(os.Environ(), "OUT="+out)
			if output, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("collect-engine.sh %s: %v\n%s", engine, err, output)
			}
			if _, err := os.Stat(filepath.Join(out, "usr", "bin", engine)); err != nil {
				t.Fatalf("the engine was not copied to /usr/bin: %v", err)
			}
			libs, err := exec.Command("ldd", hostBinary).Output()
			if err != nil {
				t.Fatal(err)
			}
			copied := 0
			for _, line := range strings.Split(string(libs), "\n") {
				fields := strings.Fields(line)
				if len(fields) < 3 || fields[1] != "=>" || !strings.HasPrefix(fields[2], "/") {
					continue
				}
				resolvedDir, err := filepath.EvalSymlinks(filepath.Dir(fields[2]))
				if err != nil {
					t.Fatal(err)
				}
				target := filepath.Join(out, resolvedDir, filepath.Base(fields[2]))
				_, statErr := os.Stat(target)
				libc := cLibrary.MatchString(filepath.Base(fields[2]))
				switch {
				case libc && statErr == nil:
					t.Errorf("%s was copied, but the image's own C library must be used", fields[0])
				case !libc && statErr != nil:
					t.Errorf("%s (%s) was not copied to %s", fields[0], fields[2], target)
				case !libc:
					copied++
				}
			}
			if copied == 0 {
				t.Error("no library was copied: is the engine static?")
			}
		})
	}
}

// cLibrary matches the C library's own shared objects, which collect-engine.sh leaves out.
var cLibrary = regexp.MustCompile(`^(libc|libm|libdl|libpthread|librt)\.so`)

// readVersions reads hack/versions.env.
func readVersions(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(string(readRepoFile(t, "hack/versions.env")), "\n") {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(name, "#") {
			out[name] = value
		}
	}
	return out
}

// goBuild is one `go build` of a cacheqos binary: its package, cgo setting and flags, with
// the version variable's name normalized.
type goBuild struct {
	pkg, cgo, flags string
}

var (
	dockerGoBuild = regexp.MustCompile(`CGO_ENABLED=([01]) go build (.+) -o /out/([a-z-]+) (\./cmd/[a-z-]+)$`)
	scriptGoBuild = regexp.MustCompile(`CGO_ENABLED=\$1 go build (.+) -o "\$3" "\$2"`)
	scriptRelease = regexp.MustCompile(`(?m)^\s*go_release ([01]) (\./cmd/[a-z-]+) "\$work/([a-z-]+)"$`)
	versionVar    = regexp.MustCompile(`\$\{VERSION\}|\$version`)
)

// TestLocalImagesBuildTheSameBinaries checks that hack/images/build.sh builds the operator
// and the sidecar as the Dockerfile does (same packages, cgo settings and flags), and puts
// them, the OR-Tools library and the engines at the same paths with the same user.
func TestLocalImagesBuildTheSameBinaries(t *testing.T) {
	_, stages := readDockerfile(t)
	docker := map[string]goBuild{}
	for _, ins := range stageNamed(t, stages, "build").instructions {
		if m := dockerGoBuild.FindStringSubmatch(ins.args); ins.keyword == "RUN" && m != nil {
			docker[m[3]] = goBuild{pkg: m[4], cgo: m[1], flags: versionVar.ReplaceAllString(m[2], "VERSION")}
		}
	}
	script := string(readRepoFile(t, "hack/images/build.sh"))
	flags := scriptGoBuild.FindStringSubmatch(script)
	if flags == nil {
		t.Fatal("hack/images/build.sh has no go_release function building with CGO_ENABLED=$1")
	}
	local := map[string]goBuild{}
	for _, m := range scriptRelease.FindAllStringSubmatch(script, -1) {
		local[m[3]] = goBuild{pkg: m[2], cgo: m[1], flags: versionVar.ReplaceAllString(flags[1], "VERSION")}
	}
	for _, binary := range []string{"operator", "cache-sidecar", "cacheqos-loadgen"} {
		d, ok := docker[binary]
		if !ok {
			t.Errorf("the Dockerfile's build stage does not build %s", binary)
			continue
		}
		if l := local[binary]; l != d {
			t.Errorf("%s: hack/images/build.sh builds %+v, the Dockerfile %+v", binary, l, d)
		}
	}

	operator := stageNamed(t, stages, "operator")
	sidecar := stageNamed(t, stages, "cache-sidecar")
	loadgen := stageNamed(t, stages, "loadgen")
	recipes := map[string][]string{
		"operator": {
			`-add "$work/operator:/operator"`,
			"-env " + operator.last("ENV"),
			"-user " + operator.last("USER"),
			"-entrypoint '" + compactJSON(t, operator.last("ENTRYPOINT")) + "'",
			`-add "$file:/opt/ortools/${file#"$wheel"/}"`,
			`find "$wheel/ortools/.libs" "$wheel/ortools.libs"`,
		},
		"cache-sidecar": {
			`-add "$work/cache-sidecar:/cache-sidecar"`,
			`-add "$(engine redis-server):/usr/bin/redis-server"`,
			`-add "$(engine memcached):/usr/bin/memcached" -libs`,
			"-user " + sidecar.last("USER"),
			"-entrypoint '" + compactJSON(t, sidecar.last("ENTRYPOINT")) + "'",
		},
		"loadgen": {
			`-add "$work/cacheqos-loadgen:/cacheqos-loadgen"`,
			"-user " + loadgen.last("USER"),
			"-entrypoint '" + compactJSON(t, loadgen.last("ENTRYPOINT")) + "'",
		},
	}
	for name, wants := range recipes {
		recipe := shellFunction(t, script, "image_"+name)
		for _, want := range wants {
			if !strings.Contains(recipe, want) {
				t.Errorf("hack/images/build.sh image_%s lacks %s", name, want)
			}
		}
	}
}

// compactJSON re-encodes a JSON array as mkimage's flags spell it (no spaces).
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// shellFunction returns the body of a function of a shell script.
func shellFunction(t *testing.T, script, name string) string {
	t.Helper()
	start := strings.Index(script, "\n"+name+"() {\n")
	if start < 0 {
		t.Fatalf("hack/images/build.sh has no function %s", name)
	}
	body := script[start:]
	end := strings.Index(body, "\n}\n")
	if end < 0 {
		t.Fatalf("function %s is not terminated", name)
	}
	return body[:end]
}
