package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// cgroupMemoryMax is the cgroup v2 file with the container's memory limit.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// goMemoryShare is the part of the container's memory limit given to the Go runtime as its
// soft limit: the rest is for memory Go does not count, chiefly CP-SAT's C++ heap during a
// solve, and the code's resident pages.
const goMemoryShare = 0.7

// solverMemoryShare is the part of the container's memory limit at which a solve stops when
// --solver-memory-limit is not given: the process's resident memory, C++ included, past
// which a solve would bring the container near its limit. The rest leaves room for what the
// process allocates until the solver notices (it reads the memory every 20 ms).
const solverMemoryShare = 0.9

// applyMemoryLimit sets the Go runtime's soft memory limit to goMemoryShare of the limit in
// the cgroup file memoryMax, unless GOMEMLIMIT (goMemLimit) sets one already or the container
// has no limit. Without a soft limit the heap grows to twice its live size before a
// collection, whatever the container allows. It returns the limit it set (0: none).
func applyMemoryLimit(goMemLimit, memoryMax string) (int64, error) {
	if goMemLimit != "" {
		return 0, nil
	}
	limit, err := containerMemoryLimit(memoryMax)
	if err != nil || limit == 0 {
		return 0, err
	}
	soft := int64(float64(limit) * goMemoryShare)
	debug.SetMemoryLimit(soft)
	return soft, nil
}

// solverMemoryLimit is the process memory at which a solve stops (0: none): the flag's
// quantity when given (0 turning the limit off), else solverMemoryShare of the container's
// limit in the cgroup file memoryMax, none without one.
func solverMemoryLimit(flag *resource.Quantity, memoryMax string) (int64, error) {
	if flag != nil {
		return flag.Value(), nil
	}
	limit, err := containerMemoryLimit(memoryMax)
	if err != nil {
		return 0, err
	}
	return int64(float64(limit) * solverMemoryShare), nil
}

// containerMemoryLimit reads the container's memory limit from the cgroup v2 file memoryMax:
// 0 when there is none, or no such file (no cgroup v2).
func containerMemoryLimit(memoryMax string) (int64, error) {
	content, err := os.ReadFile(memoryMax)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return parseMemoryMax(string(content))
}

// parseMemoryMax reads a cgroup v2 memory.max: a byte count, or "max" for no limit (0).
func parseMemoryMax(content string) (int64, error) {
	v := strings.TrimSpace(content)
	if v == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("memory.max %q is neither a positive byte count nor max", v)
	}
	return n, nil
}
