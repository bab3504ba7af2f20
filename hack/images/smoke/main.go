// Command smoke is the workload of the local cluster's end-to-end smoke tests: an HTTP server
// that answers /healthz with "ok" and / with its host name, which inside a pod is the pod's
// name, so a test can tell which backend of a Service answered.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", ":8080", "address to serve HTTP on")
	flag.Parse()

	hostname, err := os.Hostname()
	if err != nil {
		log.Fatalf("smoke: reading the host name: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok") // a failed write means the client left
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, hostname)
	})
	server := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	// As PID 1 of its container the process gets no default SIGTERM action: handle it, so a
	// pod stops at once instead of after its grace period.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}()
	log.Printf("smoke: %s serving on %s", hostname, *listen)
	if err := server.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("smoke: %v", err)
	}
}
