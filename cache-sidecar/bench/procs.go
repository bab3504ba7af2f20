package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is a child process of the benchmark (engine, proxy), logging to a file in the work
// directory and stopped by its PID.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once the process exited; err is its exit error then
	err  error
}

// startProcess starts binary with args, its output in dir/name.log and env added to the
// driver's environment.
func startProcess(dir, name string, env []string, binary string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM and, after grace, SIGKILL.
func (p *process) stop(grace time.Duration) {
	if p == nil {
		return
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		<-p.done // it exited already
		return
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports an early exit, with the tail of the log.
func (p *process) exited() error {
	select {
	case <-p.done:
		data, _ := os.ReadFile(p.log)
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		return fmt.Errorf("%s exited (%w):\n%s", p.name, p.err, data)
	default:
		return nil
	}
}

// freePort returns a loopback port nothing listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitFor polls ready until it succeeds, p exits or the timeout passes.
func waitFor(p *process, timeout time.Duration, what string, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if exit := p.exited(); exit != nil {
			return exit
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready after %v: %w", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dialable(network, addr string) func() error {
	return func() error {
		c, err := net.DialTimeout(network, addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

func httpOK(url string) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
}

// cpuProfile records the sidecar's CPU profile for d into path, in the background; wait
// returns once it is written.
func cpuProfile(metricsAddr string, d time.Duration, path string) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", metricsAddr, max(1, int(d.Seconds())))
		resp, err := http.Get(url)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("profile: %s", resp.Status)
			return
		}
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = f.ReadFrom(resp.Body)
		done <- errors.Join(err, f.Close())
	}()
	return func() error { return <-done }
}
