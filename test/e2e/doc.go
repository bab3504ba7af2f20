// Package e2e holds the end-to-end tests: the product installed the way users install it, on a
// real cluster. TestMain builds the images (hack/images/build.sh, no registry), brings up the
// local cluster of hack/local-cluster.sh (a real three-node Kubernetes on this machine,
// CACHEQOS_CLUSTER_NODES=3) and imports them into every node, installs the monitoring stack of
// hack/monitoring (prometheus-operator and a Prometheus) and the chart with
// hack/demo/values.yaml, runs the tests, and purges the cluster at the end, also on failure,
// interrupt or test timeout. On failure it prints every cacheqos object and the last log lines
// of the operator, the sidecars and the monitoring.
//
// TestProduct is the product's story: the demo's three tenants meet their SLOs under load; a
// noisy neighbour is isolated (LACS) while its mouse keeps its SLO; under the default policy a
// strict tenant keeps its hit-ratio objective while a best-effort tenant floods a tight node,
// and no plan moves more than the movement budget (a per-interval table in the output);
// tenants are isolated from each other; a user with only the built-in edit role manages its
// namespace's TenantSLOs but not their status, and a cluster's namespaceSelector refuses the
// namespaces it does not select; a cluster whose nodeSelector matches two of the three nodes
// runs sidecars only there; tenants spread over two and three nodes have every key written and
// read through any node's sidecar, forwarded to its owner and held in proportion to the
// routing weights; a plan reaches every sidecar of a tenant on three nodes (median and maximum
// over 20 TenantSLO changes, printed); an InPlace upgrade of the sidecar image under load
// patches one node at a time and keeps the keys and the hit ratio (failures counted and
// bounded); a drained (cordoned) node and a killed node (hack/local-cluster.sh node-stop) lose
// their partitions and routes within three allocation intervals while clients keep being
// served (per-second tables), and come back; the plans survive a sidecar pod deletion, an operator restart and a
// Prometheus outage, and an infeasible SLO becomes a condition; deleting tenants and clusters
// frees everything; uninstalling the chart leaves nothing but the kept CRDs. The other tests
// check the cluster itself (pods, Services, a DaemonSet) from local images. The noisy-neighbour
// and flood scenarios pin their cluster to one node: their numbers are one node's capacity.
//
// The tests need root (the cluster changes host networking) and the binaries of
// `hack/bootstrap.sh`. Environment:
//
//	CACHEQOS_E2E_KEEP_CLUSTER=1  leave the cluster running afterwards (inspect it with
//	                             eval "$(hack/local-cluster.sh env)"; kubectl get pods -A)
//	CACHEQOS_CLUSTER_DIR         the cluster's state directory, as for hack/local-cluster.sh
//	CACHEQOS_E2E_KUBECONFIG      run against this cluster instead (kind: hack/kind-e2e.sh);
//	                             its nodes must have the images already, and this host must
//	                             reach its pod and Service addresses
//
// A local cluster that was already running when the tests started is reused and left running;
// the suite refuses a cluster without exactly three Ready schedulable nodes.
// `go test -short` skips the package.
package e2e
