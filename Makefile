# cacheqos — build, test, demo. `make help` lists the targets.
include hack/versions.env

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

LOCALBIN := $(CURDIR)/bin
CONTROLLER_GEN := $(LOCALBIN)/controller-gen
GOLANGCI_LINT := $(LOCALBIN)/golangci-lint
HELM := $(LOCALBIN)/helm

# The one place that says where OR-Tools and the test control plane live. internal/cpsat loads
# libortools at run time (dlopen), so binaries build without it and fall back to greedy when it
# is absent; tests get the pinned copy that bootstrap unpacked.
export CACHEQOS_ORTOOLS_LIB := $(LOCALBIN)/ortools/ortools/.libs/libortools.so.9
export KUBEBUILDER_ASSETS := $(LOCALBIN)/envtest
export PATH := $(LOCALBIN):$(LOCALBIN)/kube:$(PATH)

# Test layers (unit, envtest, integration, e2e) are defined by folder in hack/test.sh.
GO_TEST_FLAGS ?= -count=1 -timeout 20m

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: bootstrap
bootstrap: ## Install every tool, engine and library the project needs (idempotent, cached).
	hack/bootstrap.sh

.PHONY: generate
generate: ## Generate DeepCopy methods and protobuf code.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."
	go generate ./internal/...

.PHONY: manifests
manifests: ## Generate CRDs and RBAC into config/, and their copies in the chart.
	$(CONTROLLER_GEN) rbac:roleName=cacheqos-operator crd webhook paths="./api/..." paths="./controllers/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	$(MAKE) chart-sync

.PHONY: fmt
fmt: ## gofmt the tree.
	go fmt ./...

.PHONY: vet
vet: ## go vet the tree.
	go vet ./...

.PHONY: lint
lint: ## Run golangci-lint.
	$(GOLANGCI_LINT) run --timeout 10m ./...

.PHONY: build
build: ## Build every binary into bin/.
	go build -o $(LOCALBIN)/ ./cmd/...

.PHONY: release
release: ## Images (operator, sidecar, loadgen) as OCI archives and the packaged chart, one version (VERSION=x.y.z), in dist/.
	hack/release.sh dist

.PHONY: test
test: bootstrap ## Bootstrap, then run every test layer and print each layer's counts.
	hack/test.sh

.PHONY: demo
demo: bootstrap ## A cluster (kind, or the local one), the chart, three tenants under load converging to their SLOs.
	hack/demo.sh

.PHONY: demo-down
demo-down: ## Remove the demo and its cluster.
	hack/demo.sh down

.PHONY: test-unit
test-unit: ## Only the unit layer (no bootstrap).
	hack/test.sh unit

.PHONY: bench
bench: ## Allocator and sidecar benchmarks (ratios measured in one run).
	go test -run '^$$' -bench . -benchtime 1x ./internal/...

.PHONY: bench-sidecar
bench-sidecar: ## Sidecar proxy vs direct engine vs twemproxy: throughput, p50/p99 ratios (PROFILE=dir adds CPU hot spots); then the share of the proxy CPU the curve accounting adds (CURVES=only or skip).
	hack/bench-sidecar.sh

.PHONY: eval
eval: ## Simulate every scenario and 40 random fleets under every policy; regenerate docs/evaluation.md and docs/eval/ plots.
	hack/eval.sh

FUZZ_FLEETS ?= 50
.PHONY: eval-fuzz
eval-fuzz: ## Judge the optimal policy on FUZZ_FLEETS (50) random fleets, both cache models; print the fleets that miss.
	hack/eval.sh -fuzz-only -n $(FUZZ_FLEETS)

.PHONY: verify-generated
verify-generated: generate manifests ## Fail when generated files are out of date.
	git diff --exit-code -- api config internal charts

.PHONY: chart-sync
chart-sync: ## Copy the generated CRDs and operator RBAC rules into the Helm chart.
	rm -f charts/cacheqos/files/crds/*.yaml
	cp config/crd/bases/*.yaml charts/cacheqos/files/crds/
	cp config/rbac/role.yaml charts/cacheqos/files/rbac/role.yaml

.PHONY: chart-test
chart-test: ## Lint and render the Helm chart, check it against a real API server, the Dockerfile and the metrics.
	go test $(GO_TEST_FLAGS) ./test/chart/...

.PHONY: bench-operator
bench-operator: ## The operator at fleet scale (envtest, real Prometheus): 500 and 2,000 tenants, cold start and a 10% change (SIZE=500 or 2000 runs one).
	go test -run '^$$' -bench 'BenchmarkOperator/tenants=$(SIZE)' -benchtime 1x -timeout 60m -v ./test/scale/
