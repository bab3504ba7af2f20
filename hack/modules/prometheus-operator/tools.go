//go:build tools

// Package prometheusoperator pins the prometheus-operator release whose operator and
// config-reloader hack/bootstrap.sh builds for the local cluster's monitoring stack; the
// module also carries the CRD manifests hack/monitoring installs.
package prometheusoperator

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
	_ "github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
)
