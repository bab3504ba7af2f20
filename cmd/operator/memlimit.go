package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// cgroupMemoryMax is the cgroup v2 file with the container's memory limit.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// goMemoryShare is the part of the container's memory limit given to the Go runtime as its
// soft limit: the rest is for memory Go does not count, chiefly CP-SAT's C++ heap during a
// solve, and the code's resident pages.
const goMemoryShare = 0.7

// applyMemoryLimit sets the Go runtime's soft memory limit to goMemoryShare of the limit in
// the cgroup file memoryMax, unless GOMEMLIMIT (goMemLimit) sets one already or the container
// has no limit. Without a soft limit the heap grows to twice its live size before a
// collection, whatever the container allows. It returns the limit it set (0: none).
func applyMemoryLimit(goMemLimit, memoryMax string) (int64, error) {
	if goMemLimit != "" {
		return 0, nil
	}
	content, err := os.ReadFile(memoryMax)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	limit, err := parseMemoryMax(string(content))
	if err != nil || limit == 0 {
		return 0, err
	}
	soft := int64(float64(limit) * goMemoryShare)
	debug.SetMemoryLimit(soft)
	return soft, nil
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
