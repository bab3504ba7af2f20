package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one running engine: either a child we started or one a previous manager started
// and we adopted. exited is closed once it is gone; reason then says why.
type process struct {
	pid     int
	started time.Time
	exited  chan struct{}
	reason  string

	// child is set for processes we started; nil for adopted ones, which are not our children,
	// so we watch them through /proc and re-check their command line before signalling, in case
	// the PID has been reused.
	child   *exec.Cmd
	matches func() bool
}

// launch starts an engine as a child in its own process group (so a terminal's Ctrl-C aimed at
// the sidecar does not reach it) with its output appended to logPath.
func launch(binary string, args []string, dir, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own copy
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{pid: cmd.Process.Pid, started: time.Now(), exited: make(chan struct{}), child: cmd}
	go func() {
		err := cmd.Wait()
		var exitErr *exec.ExitError
		switch {
		case errors.As(err, &exitErr):
			p.reason = exitErr.String()
		case err != nil:
			p.reason = err.Error()
		default:
			p.reason = "exited with status 0"
		}
		if last := lastLogLine(logPath); last != "" {
			p.reason += "; last log line: " + last
		}
		close(p.exited)
	}()
	return p, nil
}

// adopt watches a running engine that is not our child by polling until it is gone or quit is
// closed (then it stops watching and leaves the process alone).
func adopt(pid int, matches func() bool, interval time.Duration, quit <-chan struct{}) *process {
	p := &process{pid: pid, started: time.Now(), exited: make(chan struct{}), matches: matches}
	go func() {
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ticker.C:
				if !matches() {
					p.reason = "adopted engine process is gone (not our child, so its exit status is unknown)"
					close(p.exited)
					return
				}
			}
		}
	}()
	return p
}

// signal sends sig unless the process is known to be gone.
func (p *process) signal(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	// Signalling fails only when the process already exited, which exited reports.
	if p.child != nil {
		_ = p.child.Process.Signal(sig)
		return
	}
	if p.matches() {
		_ = syscall.Kill(p.pid, sig)
	}
}

// waitGone waits until the process is gone or ctx ends and reports whether it is gone. It
// works after the manager closed, when adopted processes are no longer watched.
func (p *process) waitGone(ctx context.Context) bool {
	if p.child != nil {
		select {
		case <-p.exited:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for p.matches() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pollEvery):
		}
	}
	return true
}

// stop sends SIGTERM, then SIGKILL after grace, and waits for the process to be gone.
func (p *process) stop(grace, killWait time.Duration) error {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	p.signal(syscall.SIGKILL)
	select {
	case <-p.exited:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("engine process %d still running %s after SIGKILL", p.pid, killWait)
	}
}

// cmdlineMatches reports whether pid is a live engine process named processName serving socket:
// its first argument's base name starts with processName and some argument is the socket path,
// or, for redis, whose process title becomes "redis-server unixsocket:<path>", ends with
// ":<path>". Zombies have an empty command line and do not match.
func cmdlineMatches(pid int, processName, socket string) bool {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(raw) == 0 {
		return false
	}
	args := strings.Fields(strings.ReplaceAll(string(raw), "\x00", " "))
	if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), processName) {
		return false
	}
	for _, a := range args[1:] {
		if a == socket || strings.HasSuffix(a, ":"+socket) {
			return true
		}
	}
	return false
}

// rssBytes reads a process's resident set size from /proc/<pid>/statm.
func rssBytes(pid int) (int64, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "statm"))
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(raw))
	if len(fields) < 2 {
		return 0, fmt.Errorf("unexpected /proc/%d/statm: %q", pid, raw)
	}
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("unexpected /proc/%d/statm: %q", pid, raw)
	}
	return pages * int64(os.Getpagesize()), nil
}

// writePidfile records pid atomically.
func writePidfile(path string, pid int) error {
	return writeFileAtomic(path, []byte(strconv.Itoa(pid)+"\n"))
}

func readPidfile(path string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pidfile %s does not hold a PID: %q", path, raw)
	}
	return pid, nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// lastLogLine returns the last non-empty line of an engine log, cut to a readable length, for
// status messages about why an engine failed.
func lastLogLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 4096
	if info, err := f.Stat(); err == nil && info.Size() > tail {
		if _, err := f.Seek(info.Size()-tail, io.SeekStart); err != nil {
			return ""
		}
	}
	buf, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(buf, "\r\n "), []byte("\n"))
	last := strings.TrimSpace(string(lines[len(lines)-1]))
	if len(last) > 200 {
		last = last[:200] + "..."
	}
	return last
}
