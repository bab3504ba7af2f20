package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on every Linux
// architecture).
const userHZ = 100

// cpuUse is the CPU a target's processes spent per request during a test, in microseconds: a
// measure of efficiency that other work on a shared machine disturbs much less than
// throughput.
type cpuUse struct {
	Engine float64 // the engine process
	Proxy  float64 // the proxy in front of it (0 for the direct target)
}

func (u cpuUse) total() float64 { return u.Engine + u.Proxy }

// processCPU returns the user and system CPU time process pid has used, all its threads
// together.
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(raw)
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may contain spaces, so fields are counted from
// the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	fields := strings.Fields(string(stat[end+1:]))
	const utime = 14 - 3 // fields[0] is field 3 (state)
	if len(fields) <= utime+1 {
		return 0, fmt.Errorf("%d fields after the command name, want at least %d", len(fields), utime+2)
	}
	var ticks int64
	for _, f := range fields[utime : utime+2] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("CPU time %q is not a number of ticks", f)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// cpuMeter measures the CPU of a target's engine and proxy processes (proxy 0: none) across
// a test.
type cpuMeter struct {
	engine, proxy         int
	engineCPU0, proxyCPU0 time.Duration
}

func startCPUMeter(engine, proxy int) (*cpuMeter, error) {
	m := &cpuMeter{engine: engine, proxy: proxy}
	var err error
	if m.engineCPU0, err = processCPU(engine); err != nil {
		return nil, err
	}
	if proxy != 0 {
		if m.proxyCPU0, err = processCPU(proxy); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// per returns the CPU used since the start per request, for requests requests.
func (m *cpuMeter) per(requests int) (cpuUse, error) {
	engine, err := processCPU(m.engine)
	if err != nil {
		return cpuUse{}, err
	}
	use := cpuUse{Engine: micros(engine-m.engineCPU0) / float64(requests)}
	if m.proxy != 0 {
		proxy, err := processCPU(m.proxy)
		if err != nil {
			return cpuUse{}, err
		}
		use.Proxy = micros(proxy-m.proxyCPU0) / float64(requests)
	}
	return use, nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// medianCPU is the median of each part over the rounds.
func medianCPU(rounds []cpuUse) cpuUse {
	var engine, proxy []float64
	for _, u := range rounds {
		engine, proxy = append(engine, u.Engine), append(proxy, u.Proxy)
	}
	return cpuUse{Engine: median(engine), Proxy: median(proxy)}
}
