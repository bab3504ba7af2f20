package cpsat

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

const (
	// LibraryEnv names the environment variable holding the full path of
	// libortools.so.9. When it is unset or empty the dynamic loader searches
	// for DefaultLibrary the usual way (LD_LIBRARY_PATH, ld.so.cache, ...).
	LibraryEnv = "CACHEQOS_ORTOOLS_LIB"
	// DefaultLibrary is the soname looked up when LibraryEnv is unset.
	DefaultLibrary = "libortools.so.9"
)

// ErrUnavailable is wrapped by every error that comes from the OR-Tools
// library not being loadable; callers fall back to a heuristic on it.
var ErrUnavailable = errors.New("cpsat: OR-Tools CP-SAT library unavailable")

var (
	loadOnce  sync.Once
	loadedLib *nativeLib
	loadErr   error
)

// library loads OR-Tools once per process; later calls return the same
// outcome, so a missing library costs one failed dlopen, not one per solve.
func library() (*nativeLib, error) {
	loadOnce.Do(func() {
		name, source := DefaultLibrary, "default loader search"
		if p := os.Getenv(LibraryEnv); p != "" {
			name, source = p, "from "+LibraryEnv
		}
		lib, err := openLibrary(name)
		if err != nil {
			loadErr = fmt.Errorf("%w: loading %q (%s): %w", ErrUnavailable, name, source, err)
			return
		}
		loadedLib = lib
	})
	return loadedLib, loadErr
}

// Available reports whether CP-SAT can be used in this process. The error
// names the library path that was tried and the loader's reason, and wraps
// ErrUnavailable.
func Available() error {
	_, err := library()
	return err
}

// LibraryPath returns the file the dynamic loader opened for OR-Tools, or ""
// when the library is not loaded.
func LibraryPath() string {
	lib, err := library()
	if err != nil {
		return ""
	}
	return lib.path
}
