// Package allocation is the operator's allocation loop: a leader-only runnable that, for
// every CacheCluster, every allocation interval and shortly after relevant changes, reads the
// sidecars' metrics from Prometheus, builds a planning snapshot, runs the cluster's policy
// through the allocator, writes each node's CacheNodePlan (only when it changed, bumping its
// planGeneration) with every partition's routes, and reports the result in the TenantSLOs'
// and the CacheCluster's status.
//
// Faults keep what works: without fresh metrics the plan in force is kept (tenants that left
// still lose their partitions, new ones are placed without measurements); a solver failure
// falls back to the greedy plan; a sidecar that does not apply its plan is named in Degraded.
// The current plan is read back from the CacheNodePlans on every run, so a restarted operator
// continues from it and the allocator's movement term keeps the plan where it is.
package allocation

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/opmetrics"
	"github.com/cacheqos/cacheqos/controllers/internal/ssa"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/control"
)

// Defaults of Options.
const (
	DefaultDebounce               = 2 * time.Second
	DefaultApplyDeadlineIntervals = 3
	DefaultSolverWorkers          = 1
	// DefaultMaxRemoteTenants is the CacheNodePlan schema's bound on spec.remoteTenants: the
	// API server refuses a plan that lists more.
	DefaultMaxRemoteTenants = 4096
)

// Options tune the loop.
type Options struct {
	// DefaultPrometheusURL is used for clusters whose spec.monitoring.prometheusURL is empty.
	// Empty too: plans are made without measurements.
	DefaultPrometheusURL string
	// Debounce is how long after a trigger the allocation runs, so a burst of changes makes
	// one plan (DefaultDebounce when zero).
	Debounce time.Duration
	// ApplyDeadlineIntervals is how many allocation intervals a sidecar may take to apply a
	// new plan before the cluster is Degraded (DefaultApplyDeadlineIntervals when zero).
	ApplyDeadlineIntervals int
	// SolverWorkers is the number of CP-SAT workers (DefaultSolverWorkers when zero). One
	// worker makes plans reproducible, so an operator restart does not move memory.
	SolverWorkers int
	// SolverMemoryLimit is the process's resident memory at which a solve stops and keeps its
	// best plan so far (allocator.Options.MemoryLimit); zero: no limit.
	SolverMemoryLimit int64
	// MaxRemoteTenants is the most remote tenants a plan lists (DefaultMaxRemoteTenants when
	// zero, the schema's bound; the envtest suite sets fewer to reach it with a few tenants).
	// A plan over it lists the first ones by tenant ID, and the cluster is Degraded.
	MaxRemoteTenants int
	// HTTPClient queries DefaultPrometheusURL (nil: a client with a 30s timeout). It carries
	// the operator's credentials, so it is never used for another URL.
	HTTPClient *http.Client
}

func (o Options) withDefaults() Options {
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.ApplyDeadlineIntervals <= 0 {
		o.ApplyDeadlineIntervals = DefaultApplyDeadlineIntervals
	}
	if o.SolverWorkers <= 0 {
		o.SolverWorkers = DefaultSolverWorkers
	}
	if o.MaxRemoteTenants <= 0 {
		o.MaxRemoteTenants = DefaultMaxRemoteTenants
	}
	return o
}

// Loop allocates every CacheCluster, one at a time.
type Loop struct {
	client client.Client
	// secrets reads the Secrets that spec.monitoring.prometheusHTTPConfig names, which the
	// manager's cache does not hold.
	secrets  client.Reader
	writer   *ssa.Writer
	recorder record.EventRecorder
	opts     Options
	log      logr.Logger
	queue    workqueue.TypedDelayingInterface[types.NamespacedName]

	mu    sync.Mutex
	state map[types.NamespacedName]*clusterState
}

// New returns a loop that reads and writes through c (the manager's client), reads Secrets
// through secrets (the manager's API reader) and records events with recorder. Add it to the
// manager; reconcilers call Trigger.
func New(c client.Client, secrets client.Reader, recorder record.EventRecorder, log logr.Logger, opts Options) *Loop {
	return &Loop{
		client:   c,
		secrets:  secrets,
		writer:   ssa.NewWriter(c, objects.FieldOwnerAllocator),
		recorder: recorder,
		opts:     opts.withDefaults(),
		log:      log,
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[types.NamespacedName]{
			Name: "allocation",
		}),
		state: map[types.NamespacedName]*clusterState{},
	}
}

// NeedLeaderElection makes the loop run on the leader only: one writer of plans.
func (l *Loop) NeedLeaderElection() bool { return true }

// Trigger asks for an allocation of cluster after the debounce delay; triggers that come
// while one is pending coalesce.
func (l *Loop) Trigger(cluster types.NamespacedName) {
	l.queue.AddAfter(cluster, l.opts.Debounce)
}

// Forget drops what the loop remembers of a deleted cluster.
func (l *Loop) Forget(cluster types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.state, cluster)
}

// Start runs the loop until ctx ends: every cluster is allocated once right away, then again
// every interval after its last allocation, and after triggers.
func (l *Loop) Start(ctx context.Context) error {
	var clusters v1.CacheClusterList
	if err := l.client.List(ctx, &clusters); err != nil {
		return err
	}
	for i := range clusters.Items {
		l.queue.Add(client.ObjectKeyFromObject(&clusters.Items[i]))
	}
	go func() {
		<-ctx.Done()
		l.queue.ShutDown()
	}()
	for {
		key, shutdown := l.queue.Get()
		if shutdown {
			return nil
		}
		next, err := l.allocate(ctx, key)
		opmetrics.CountError(opmetrics.ControllerAllocation, err)
		if err != nil && ctx.Err() == nil {
			l.log.Error(err, "allocation failed", "cacheCluster", key)
		}
		l.queue.Done(key)
		if next > 0 {
			l.queue.AddAfter(key, next)
		}
	}
}

// clusterState is what the loop remembers about a cluster between allocations. It is soft
// state that only refines the next plans; what LACS needs to keep an elephant isolated across
// a restart (isolated, demand) is also written to the tenants' statuses and restored from them.
type clusterState struct {
	// restored is set once isolated and demand were taken from the tenants' statuses.
	restored bool
	// history holds each tenant's observed (total size, hit ratio) points, oldest first, for
	// a curve fit while no miss-ratio curve exists.
	history map[string][]planning.HitRatioPoint
	// isolated records the tenants the last plan throttled as LACS elephants.
	isolated map[string]bool
	// demand holds each tenant's rates per node as last measured while its limits held none
	// of its requests back: a throttled tenant's served rate is its limit, not its demand.
	demand map[string][]planning.NodeRate
	// control is the control loop's per-tenant state (damped corrections, feedback).
	control *control.Loop
	// prometheus is the client spec.monitoring.prometheusHTTPConfig configured last.
	prometheus *secretHTTPClient
	// admission is how long allocations have waited for admissions under way.
	admission admissionWait
}

// restore takes, once after the operator starts, the isolated tenants and their demand from
// the statuses the previous operator wrote. Without it a restart would release every elephant
// (while throttled, its traffic is its limit and looks like a mouse's) only for the next plan
// to throttle it again.
func (s *clusterState) restore(tenants []*v1.TenantSLO) {
	if s.restored {
		return
	}
	s.restored = true
	for _, t := range tenants {
		a := t.Status.Allocation
		if a == nil || !a.Isolated {
			continue
		}
		id := t.TenantID()
		s.isolated[id] = true
		if len(a.Demand) > 0 {
			s.demand[id] = ratesOf(a.Demand)
		}
	}
}

// maxHistory bounds each tenant's history.
const maxHistory = 32

// stateOf returns what the loop remembers about a cluster between allocations.
func (l *Loop) stateOf(cluster types.NamespacedName) *clusterState {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state[cluster]
	if s == nil {
		s = &clusterState{history: map[string][]planning.HitRatioPoint{}, isolated: map[string]bool{}, demand: map[string][]planning.NodeRate{}, control: control.New()}
		l.state[cluster] = s
	}
	return s
}
