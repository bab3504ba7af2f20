// Package chart tests the Helm chart (charts/cacheqos), the Dockerfile and the monitoring
// they ship, against the real things: `helm lint` and `helm template` for every toggle; the
// rendered manifests applied (server-side dry run) to a real kube-apiserver with the cacheqos
// CRDs and the prometheus-operator CRDs (generated at test time with controller-gen from the
// prometheus-operator module in go.mod); the operator's RBAC checked with SubjectAccessReviews
// against the rules controller-gen generated; the values schema fed bad values; the alerts
// and the dashboard's queries checked by promtool and against the metrics the operator and
// the sidecar register (their real collectors, in the registries they serve), the alerts
// evaluated by promtool's rule unit tests and the dashboard's joins of operator and sidecar
// series evaluated likewise; the Dockerfile parsed and compared with hack/images/build.sh.
//
// The tools are found at run time: helm, controller-gen and promtool on PATH or in the
// repository's bin/ (hack/bootstrap.sh), the control plane in $KUBEBUILDER_ASSETS or bin/envtest.
package chart
