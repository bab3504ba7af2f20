// Command pause is the sandbox process of every pod in the local cluster (containerd's
// sandbox_image). It holds the pod's namespaces open until the sandbox is stopped, and reaps
// orphaned children when a pod shares its process namespace, so they never linger as zombies.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			return
		}
		reapChildren()
	}
}

// reapChildren collects every exited child; one SIGCHLD may stand for several exits.
func reapChildren() {
	for {
		pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
