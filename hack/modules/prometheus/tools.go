//go:build tools

// Package prometheus pins the Prometheus release hack/bootstrap.sh builds for the local
// cluster's monitoring stack. Debian's prometheus cannot serve there: it lacks Kubernetes
// service discovery, which every ServiceMonitor needs.
package prometheus

import _ "github.com/prometheus/prometheus/cmd/prometheus"
