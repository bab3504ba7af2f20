package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on every Linux
// architecture).
const userHZ = 100

// cpuUse is the CPU a target's processes spent per request during a test, in microseconds: a
// measure of efficiency that other work on a shared machine disturbs much less than
// throughput. Load and Machine say how much CPU was left: when Machine is close to the cores'
// capacity for the test's duration, throughput is bounded by the CPU each request costs.
type cpuUse struct {
	Engine float64 // the engine process
	Proxy  float64 // the proxy in front of it (0 for the direct target)
	Load   float64 // the load generator (this process, or the redis-benchmark it ran)
	// Machine is every core's busy time per request, whoever spent it (the kernel's network
	// work included).
	Machine float64
	// Busy is the share of the machine's cores that were busy during the test (0-1).
	Busy float64
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

// loadCPU returns the CPU this process and its reaped children have used: the memcached load
// generator runs in this process, and each redis-benchmark run is a child waited for.
func loadCPU() (time.Duration, error) {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			return 0, err
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total, nil
}

// machineCPU returns the busy and total time of all the machine's cores from /proc/stat.
func machineCPU() (busy, total time.Duration, err error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseMachineStat(raw)
}

// parseMachineStat reads the "cpu" line of /proc/stat: user nice system idle iowait irq softirq
// steal ..., in USER_HZ ticks. Idle and iowait are not busy; guest time is already in user.
func parseMachineStat(stat []byte) (busy, total time.Duration, err error) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat starts with %q, want the cpu line with at least 8 counters", line)
	}
	var ticks [8]int64
	for i := range ticks {
		n, err := strconv.ParseInt(fields[i+1], 10, 64)
		if err != nil || n < 0 {
			return 0, 0, fmt.Errorf("/proc/stat counter %q is not a number of ticks", fields[i+1])
		}
		ticks[i] = n
	}
	const idle, iowait = 3, 4
	var busyTicks, totalTicks int64
	for i, n := range ticks {
		totalTicks += n
		if i != idle && i != iowait {
			busyTicks += n
		}
	}
	tick := time.Second / userHZ
	return time.Duration(busyTicks) * tick, time.Duration(totalTicks) * tick, nil
}

// cpuMeter measures the CPU of a target's engine and proxy processes (0: none), of the load
// generator and of the whole machine across a test.
type cpuMeter struct {
	engine, proxy                   int
	engineCPU0, proxyCPU0, loadCPU0 time.Duration
	busy0, total0                   time.Duration
}

func startCPUMeter(engine, proxy int) (*cpuMeter, error) {
	m := &cpuMeter{engine: engine, proxy: proxy}
	var err error
	if engine != 0 {
		if m.engineCPU0, err = processCPU(engine); err != nil {
			return nil, err
		}
	}
	if m.loadCPU0, err = loadCPU(); err != nil {
		return nil, err
	}
	if m.busy0, m.total0, err = machineCPU(); err != nil {
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
	var engine time.Duration
	if m.engine != 0 {
		var err error
		if engine, err = processCPU(m.engine); err != nil {
			return cpuUse{}, err
		}
	}
	load, err := loadCPU()
	if err != nil {
		return cpuUse{}, err
	}
	busy, total, err := machineCPU()
	if err != nil {
		return cpuUse{}, err
	}
	use := cpuUse{
		Engine:  micros(engine-m.engineCPU0) / float64(requests),
		Load:    micros(load-m.loadCPU0) / float64(requests),
		Machine: micros(busy-m.busy0) / float64(requests),
		Busy:    ratio(float64(busy-m.busy0), float64(total-m.total0)),
	}
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
	var engine, proxy, load, machine, busy []float64
	for _, u := range rounds {
		engine, proxy, load = append(engine, u.Engine), append(proxy, u.Proxy), append(load, u.Load)
		machine, busy = append(machine, u.Machine), append(busy, u.Busy)
	}
	return cpuUse{Engine: median(engine), Proxy: median(proxy), Load: median(load), Machine: median(machine), Busy: median(busy)}
}
