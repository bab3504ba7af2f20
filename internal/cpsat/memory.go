package cpsat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// statmPath is the kernel's memory counts of this process, in pages.
const statmPath = "/proc/self/statm"

// memoryPollInterval is how often a solve with a memory limit reads the process's resident
// memory: CP-SAT can allocate tens of MiB in that time, the margin a limit has to leave.
const memoryPollInterval = 20 * time.Millisecond

// errMemoryLimit is the cause of the cancellation that stops a solve at its memory limit.
var errMemoryLimit = errors.New("the process's resident memory reached the solver's memory limit")

// ResidentBytes returns the process's resident memory, which Params.MemoryLimit is compared
// with: the second field of /proc/self/statm, in pages.
func ResidentBytes() (int64, error) {
	content, err := os.ReadFile(statmPath)
	if err != nil {
		return 0, err
	}
	pages, err := parseStatmResident(string(content))
	if err != nil {
		return 0, err
	}
	return pages * int64(os.Getpagesize()), nil
}

// parseStatmResident reads the resident page count from the content of /proc/<pid>/statm
// ("size resident shared text lib data dt").
func parseStatmResident(content string) (int64, error) {
	fields := strings.Fields(content)
	if len(fields) < 2 {
		return 0, fmt.Errorf("statm %q has no resident field", content)
	}
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil || pages < 0 || pages > 1<<40 {
		return 0, fmt.Errorf("statm resident field %q is not a page count", fields[1])
	}
	return pages, nil
}

// watchMemory returns a context that is cancelled with errMemoryLimit once the process's
// resident memory exceeds limit, checked every memoryPollInterval until stop is called. The
// limit counts the whole process, Go heap and code included: that is what a container's
// memory limit counts. CP-SAT's own max_memory_in_mb does not serve here (docs/scale.md).
func watchMemory(ctx context.Context, limit int64) (watched context.Context, stop func(), err error) {
	if _, err := ResidentBytes(); err != nil {
		return nil, nil, fmt.Errorf("%w: MemoryLimit needs the process's resident memory: %w", ErrInvalidParams, err)
	}
	watched, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(memoryPollInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-watched.Done():
				return
			case <-tick.C:
				if rss, err := ResidentBytes(); err == nil && rss > limit {
					cancel(errMemoryLimit)
					return
				}
			}
		}
	}()
	return watched, func() { close(done); cancel(nil) }, nil
}
