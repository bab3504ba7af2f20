//go:build cgo

package cpsat

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

// The C API of the OR-Tools CP-SAT solver, resolved with dlsym at run time so
// that nothing links against the library.
typedef void* (*cpsat_new_env_fn)(void);
typedef void (*cpsat_env_fn)(void* env);
typedef void (*cpsat_solve_fn)(void* env, const void* req, int req_len,
                               const void* params, int params_len,
                               void** res, int* res_len);

// dlerror() is per thread and Go may move a goroutine between threads between
// two cgo calls, so each lookup copies the error text in the same C call.
static char* cpsat_copy_dlerror(void) {
	const char* e = dlerror();
	return e == NULL ? NULL : strdup(e);
}

static void* cpsat_dlopen(const char* path, char** err) {
	dlerror();
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) *err = cpsat_copy_dlerror();
	return h;
}

static void* cpsat_dlsym(void* handle, const char* name, char** err) {
	dlerror();
	void* p = dlsym(handle, name);
	if (p == NULL) *err = cpsat_copy_dlerror();
	return p;
}

// The file the loader actually opened (it may have searched for a bare name).
static const char* cpsat_loaded_path(void* handle) {
	struct link_map* lm = NULL;
	if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL) return NULL;
	return lm->l_name;
}

// glibc's malloc_trim, when the C library has it (RTLD_DEFAULT: the process's own symbols).
typedef int (*cpsat_malloc_trim_fn)(size_t pad);

static void* cpsat_find_malloc_trim(void) { return dlsym(RTLD_DEFAULT, "malloc_trim"); }

static void cpsat_malloc_trim(void* fn) { ((cpsat_malloc_trim_fn)fn)(0); }

static void* cpsat_new_env(void* fn) { return ((cpsat_new_env_fn)fn)(); }

static void cpsat_env_call(void* fn, void* env) { ((cpsat_env_fn)fn)(env); }

static void cpsat_solve(void* fn, void* env, const void* req, int req_len,
                        const void* params, int params_len,
                        void** res, int* res_len) {
	((cpsat_solve_fn)fn)(env, req, req_len, params, params_len, res, res_len);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// nativeLib holds the dlopen handle and the C API entry points.
type nativeLib struct {
	path        string // the file the loader opened
	newEnv      unsafe.Pointer
	destroyEnv  unsafe.Pointer
	stopSearch  unsafe.Pointer
	solveInterr unsafe.Pointer
	// mallocTrim is glibc's malloc_trim (nil with another C library). glibc keeps the heap a
	// solve freed resident for the next allocation; trimmed after each solve, it goes back to
	// the system instead of adding up in the process's resident memory (docs/scale.md).
	mallocTrim unsafe.Pointer
}

func openLibrary(name string) (*nativeLib, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var cerr *C.char
	handle := C.cpsat_dlopen(cname, &cerr)
	if handle == nil {
		return nil, errors.New(takeCString(cerr, "dlopen failed"))
	}
	// The handle is never closed: the library stays mapped for the life of the
	// process, and unloading C++ code with live static state is unsafe.
	lib := &nativeLib{path: name, mallocTrim: C.cpsat_find_malloc_trim()}
	if p := C.cpsat_loaded_path(handle); p != nil {
		lib.path = C.GoString(p)
	}
	for _, sym := range []struct {
		name string
		dst  *unsafe.Pointer
	}{
		{"SolveCpNewEnv", &lib.newEnv},
		{"SolveCpDestroyEnv", &lib.destroyEnv},
		{"SolveCpStopSearch", &lib.stopSearch},
		{"SolveCpInterruptible", &lib.solveInterr},
	} {
		csym := C.CString(sym.name)
		p := C.cpsat_dlsym(handle, csym, &cerr)
		C.free(unsafe.Pointer(csym))
		if p == nil {
			return nil, fmt.Errorf("%s: missing symbol %s: %s", lib.path, sym.name, takeCString(cerr, "dlsym failed"))
		}
		*sym.dst = p
	}
	return lib, nil
}

// takeCString converts and frees a strdup'ed C string.
func takeCString(s *C.char, fallback string) string {
	if s == nil {
		return fallback
	}
	defer C.free(unsafe.Pointer(s))
	return C.GoString(s)
}

// solve runs one interruptible solve on a fresh solver environment. While it
// runs, cancelling ctx asks the solver to stop; it then returns the best
// solution found so far. stopped reports whether such a stop was requested.
func (l *nativeLib) solve(ctx context.Context, req, params []byte) (resp []byte, stopped bool) {
	env := C.cpsat_new_env(l.newEnv)
	var stopRequested atomic.Bool
	var watcher sync.WaitGroup
	done := make(chan struct{})
	if ctxDone := ctx.Done(); ctxDone != nil {
		watcher.Add(1)
		go func() {
			defer watcher.Done()
			select {
			case <-ctxDone:
				stopRequested.Store(true)
				C.cpsat_env_call(l.stopSearch, env)
			case <-done:
			}
		}()
	}

	var out unsafe.Pointer
	var outLen C.int
	C.cpsat_solve(l.solveInterr, env,
		bytesPtr(req), C.int(len(req)),
		bytesPtr(params), C.int(len(params)),
		&out, &outLen)

	// The watcher may still be inside SolveCpStopSearch: the environment must
	// outlive it.
	close(done)
	watcher.Wait()
	C.cpsat_env_call(l.destroyEnv, env)

	resp = C.GoBytes(out, outLen)
	C.free(out)
	if l.mallocTrim != nil {
		C.cpsat_malloc_trim(l.mallocTrim)
	}
	return resp, stopRequested.Load()
}

// bytesPtr passes a Go byte slice to C without copying; the C side only reads
// it during the call. An empty slice (an empty message) becomes NULL.
func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}
