// Package e2e holds the end-to-end tests that run against the local cluster of
// hack/local-cluster.sh: a real single-node Kubernetes on this machine, running images built by
// hack/images without a registry. TestMain brings the cluster up once, imports the images the
// tests use, and purges the cluster at the end, also on failure, interrupt or test timeout.
//
// The tests need root (the cluster changes host networking) and the binaries of
// `hack/bootstrap.sh`. Environment:
//
//	CACHEQOS_E2E_KEEP_CLUSTER=1  leave the cluster running afterwards (inspect it with
//	                             eval "$(hack/local-cluster.sh env)"; kubectl get pods -A)
//	CACHEQOS_CLUSTER_DIR         the cluster's state directory, as for hack/local-cluster.sh
//
// A cluster that was already running when the tests started is reused and left running.
// `go test -short` skips the package.
package e2e
