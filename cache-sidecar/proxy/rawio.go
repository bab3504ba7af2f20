package proxy

import (
	"syscall"
	"unsafe"
)

// A client socket is non-blocking, so a read or write on it returns at once. The proxy makes
// the ones a request costs (its read, its reply's write) with syscall.RawSyscall, which does not
// tell the runtime that the goroutine is in a system call. That saves entering and leaving
// the runtime's system call state around each call, and keeps sysmon from handing the
// thread's P to another thread (a futex wake and thread switches) when a busy machine
// stalls the call past sysmon's tick, which it does for a call it sees twice: the sidecar
// runs one thread per core it requested (GOMAXPROCS), and another thread would only compete
// with it for that core.

// maxRawIO bounds the bytes a raw call moves: the P stays with the call meanwhile, and a large
// copy (a long reply) takes long enough for the runtime to be told.
const maxRawIO = 64 << 10

// rawRead reads from a non-blocking socket (see above).
func rawRead(fd int, p []byte) (int, error) { return rawIO(syscall.SYS_READ, fd, p) }

// rawWrite writes to a non-blocking socket (see above); a large write is an ordinary one.
func rawWrite(fd int, p []byte) (int, error) {
	if len(p) > maxRawIO {
		return syscall.Write(fd, p)
	}
	return rawIO(syscall.SYS_WRITE, fd, p)
}

func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	for {
		n, _, errno := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		switch errno {
		case 0:
			return int(n), nil
		case syscall.EINTR:
			continue
		}
		return 0, errno
	}
}
