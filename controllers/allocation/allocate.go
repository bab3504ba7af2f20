package allocation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/api/v1alpha1/decimal"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/controllers/internal/opmetrics"
	"github.com/cacheqos/cacheqos/internal/allocator"
	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/control"
)

// inputs is what one allocation reads from the API server.
type inputs struct {
	key     types.NamespacedName
	cluster *v1.CacheCluster
	// plans are the cluster's CacheNodePlans, sorted by node; nodes are the node names of
	// those in service, the only ones the allocator places partitions on.
	plans []v1.CacheNodePlan
	nodes []string
	// outOfService says, by node, why a node with a plan is out of service (outOfService):
	// its plan keeps only remote tenants, so its sidecar still forwards the clients it gets.
	outOfService map[string]string
	// tenants reference the cluster; admitted are those admitted and not being deleted,
	// sorted by ID.
	tenants  []v1.TenantSLO
	admitted []*v1.TenantSLO
	// sidecarHosts maps nodes to their sidecar's pod IP.
	sidecarHosts map[string]string
	// current is the allocation in force, read from the plans: partitions by tenant.
	current view
}

// view is an allocation: each tenant's partitions, sorted by node.
type view = control.Allocation

// outcome is what an allocation decided.
type outcome struct {
	// desired is the allocation to write.
	desired view
	// plan is the allocator's answer; nil when the plan in force was kept.
	plan *planning.Plan
	// summary is the new status.lastPlan; nil when the plan in force was kept unplanned.
	summary *v1.PlanSummary
	// problems are the reasons the cluster is Degraded, in order of importance.
	problems []problem
	// specHash identifies the specs the desired allocation was made for.
	specHash string
	// decisions say, by tenant, why its memory is what desired gives it.
	decisions map[string]control.TenantDecision
	// unpackable says, by tenant, why no plan can hold its memory minimum beside the others'
	// (set when the allocator found the minimums unpackable).
	unpackable map[string]string
}

// retryAfterError is when a cluster whose allocation could not even read it is tried again.
const retryAfterError = 5 * time.Second

// problem is one reason for Degraded=True.
type problem struct{ reason, message string }

// allocate runs one allocation of a cluster and returns when the next is due (0: never, the
// cluster is gone).
func (l *Loop) allocate(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	start := time.Now()
	cluster := &v1.CacheCluster{}
	err := l.client.Get(ctx, key, cluster)
	if apierrors.IsNotFound(err) || (err == nil && !cluster.DeletionTimestamp.IsZero()) {
		// An allocation under way when the cluster reconciler forgot the cluster's metrics
		// may have exported them again.
		opmetrics.ForgetCluster(key.String())
		return 0, nil
	}
	if err != nil {
		// The API server may be briefly unreachable: try again soon rather than lose the
		// cluster's allocations until something else triggers one.
		return retryAfterError, err
	}
	interval := cluster.Spec.Allocation.IntervalOrDefault()
	st := l.stateOf(key)
	awaiting, err := l.awaitingAdmission(ctx, key)
	if err != nil {
		return retryAfterError, err
	}
	if st.holdForAdmission(awaiting, cluster.Status.LastPlan != nil, interval, time.Now()) {
		return l.opts.Debounce, nil
	}
	in, err := l.gather(ctx, cluster)
	if err != nil {
		return interval, err
	}
	if len(in.nodes) == 0 {
		// No node, nothing to plan: the cluster reconciler reports NoMatchingNodes.
		opmetrics.PublishAllocation(key.String(), &cluster.Spec.Capacity, nil, publishedTenants(in, nil))
		return interval, nil
	}
	st.restore(in.admitted)
	metrics := l.measure(ctx, in, st)
	out := l.decide(ctx, in, metrics, st)
	if out.summary != nil {
		out.summary.Duration = metav1.Duration{Duration: time.Since(start)}
	}
	generations, planProblems, writeErr := l.writePlans(ctx, in, out.desired, out.specHash)
	out.problems = append(out.problems, planProblems...)
	counts, tenantErr := l.writeTenantStatuses(ctx, in, metrics, out, generations, st)
	clusterErr := l.writeClusterStatus(ctx, in, metrics, out, generations, counts)
	l.exportMetrics(in, out, start)
	return interval, errors.Join(writeErr, tenantErr, clusterErr)
}

// gather reads the cluster's plans, tenants and sidecar pods.
func (l *Loop) gather(ctx context.Context, cluster *v1.CacheCluster) (*inputs, error) {
	in := &inputs{key: client.ObjectKeyFromObject(cluster), cluster: cluster}
	plans, err := objects.ClusterPlans(ctx, l.client, cluster.Namespace, cluster.Name)
	if err != nil {
		return nil, err
	}
	for _, p := range plans {
		if p.DeletionTimestamp.IsZero() {
			in.plans = append(in.plans, p)
		}
	}
	slices.SortFunc(in.plans, func(a, b v1.CacheNodePlan) int { return cmp.Compare(a.Spec.NodeName, b.Spec.NodeName) })
	var nodes corev1.NodeList
	if err := l.client.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	in.outOfService = outOfService(in.plans, nodes.Items)
	for _, p := range in.plans {
		if _, out := in.outOfService[p.Spec.NodeName]; !out {
			in.nodes = append(in.nodes, p.Spec.NodeName)
		}
	}
	var tenants v1.TenantSLOList
	if err := l.client.List(ctx, &tenants, client.MatchingFields{objects.TenantClusterIndex: in.key.String()}); err != nil {
		return nil, fmt.Errorf("listing TenantSLOs: %w", err)
	}
	in.tenants = tenants.Items
	slices.SortFunc(in.tenants, func(a, b v1.TenantSLO) int { return cmp.Compare(a.TenantID(), b.TenantID()) })
	for i := range in.tenants {
		t := &in.tenants[i]
		if t.DeletionTimestamp.IsZero() && meta.IsStatusConditionTrue(t.Status.Conditions, v1.ConditionAdmitted) {
			in.admitted = append(in.admitted, t)
		}
	}
	var pods corev1.PodList
	if err := l.client.List(ctx, &pods, client.InNamespace(cluster.Namespace), client.MatchingLabels(objects.SidecarLabels(cluster.Name))); err != nil {
		return nil, fmt.Errorf("listing sidecar pods: %w", err)
	}
	in.sidecarHosts = objects.SidecarHosts(pods.Items)
	in.current = currentView(in.plans)
	return in, nil
}

// outOfService says, by node, why a node that has a plan takes no partitions: cordoned
// (spec.unschedulable, as `kubectl cordon` and `kubectl drain` leave it), its Ready
// condition False or Unknown (the node controller sets Unknown once the kubelet has not
// reported for its grace period), or the Node is gone. The sidecar DaemonSet tolerates all
// of these, so a cordoned node's sidecar keeps running and serving the clients it gets by
// forwarding; draining cacheqos therefore means cordoning. A node whose kubelet has not
// reported any Ready condition yet is in service.
func outOfService(plans []v1.CacheNodePlan, nodes []corev1.Node) map[string]string {
	byName := make(map[string]*corev1.Node, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	out := map[string]string{}
	for i := range plans {
		name := plans[i].Spec.NodeName
		n := byName[name]
		switch {
		case n == nil:
			out[name] = "the Node is gone"
		case n.Spec.Unschedulable:
			out[name] = "cordoned"
		default:
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					out[name] = fmt.Sprintf("Ready is %s (%s)", c.Status, c.Reason)
				}
			}
		}
	}
	return out
}

// currentView reads the allocation in force from the plans. A partition's routing weight is
// the one its routes give its node; a node missing from the routes (its sidecar had no
// address yet) gets the share of the tenant's memory it holds.
func currentView(plans []v1.CacheNodePlan) view {
	out := view{}
	for i := range plans {
		p := &plans[i]
		for _, pp := range p.Spec.Partitions {
			part := planning.Partition{Node: p.Spec.NodeName, MemoryBytes: pp.Memory.Value()}
			for _, r := range pp.Routes {
				if r.NodeName == p.Spec.NodeName {
					part.RoutingWeight = r.Weight
				}
			}
			if pp.BandwidthLimit != nil {
				part.BandwidthLimitBytesPerSecond = pp.BandwidthLimit.Value()
			}
			if pp.OpsLimit != nil {
				part.OpsLimitPerSecond = *pp.OpsLimit
			}
			out[pp.Tenant] = append(out[pp.Tenant], part)
		}
	}
	for _, parts := range out {
		var total int64
		for _, p := range parts {
			total += p.MemoryBytes
		}
		for i := range parts {
			if parts[i].RoutingWeight == 0 && total > 0 {
				parts[i].RoutingWeight = int32(parts[i].MemoryBytes * routingWeightScale / total)
			}
		}
	}
	return out
}

// routingWeightScale is the allocator's unit of routing weights: parts per million.
const routingWeightScale = 1_000_000

// admittedIDs returns the IDs of the admitted tenants.
func (in *inputs) admittedIDs() []string {
	ids := make([]string, len(in.admitted))
	for i, t := range in.admitted {
		ids[i] = t.TenantID()
	}
	return ids
}

// kept is the allocation in force without the tenants that are no longer admitted.
func (in *inputs) kept() view {
	out := view{}
	for _, id := range in.admittedIDs() {
		if parts, ok := in.current[id]; ok {
			out[id] = parts
		}
	}
	return out
}

// outOfServiceMessage names the nodes out of service and why, sorted by node.
func outOfServiceMessage(out map[string]string) string {
	nodes := slices.Sorted(maps.Keys(out))
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = n + ": " + out[n]
	}
	return "nodes out of service, planned without partitions (their sidecars forward the clients they get): " + strings.Join(parts, "; ")
}

// holdsOutOfService reports whether the allocation in force has memory on a node out of
// service.
func (in *inputs) holdsOutOfService() bool {
	for _, parts := range in.kept() {
		for _, p := range parts {
			if _, out := in.outOfService[p.Node]; out && p.MemoryBytes > 0 {
				return true
			}
		}
	}
	return false
}

// decide plans, or keeps the plan in force when metrics are missing and no spec changed
// (tenants that came or went change the specs). Without metrics (or with a cluster that names
// no Prometheus) a plan is made from the specs and the current allocation only. The control
// loop (internal/control) shapes what the allocator is fed and decides whether the new plan
// replaces the plan in force.
func (l *Loop) decide(ctx context.Context, in *inputs, mr metricsResult, st *clusterState) outcome {
	hash := specHash(in)
	// A partition on a node out of service is replaced even when nothing else changed (an
	// earlier plan for this node set may have failed and kept it there).
	changed := specsChanged(in, hash) || in.holdsOutOfService()
	var problems []problem
	if len(in.outOfService) > 0 {
		problems = append(problems, problem{conditions.ReasonNodesOutOfService, outOfServiceMessage(in.outOfService)})
	}
	if mr.err != nil {
		problems = append(problems, problem{mr.reason, "metrics: " + mr.err.Error()})
		if mr.reason != conditions.ReasonPrometheusNotConfigured && !changed {
			return outcome{desired: in.kept(), problems: problems, specHash: hash}
		}
	}
	if mr.m != nil {
		recordHistory(st, in, mr.m)
	}
	snap := buildSnapshot(in, mr.m, st)
	spec := in.cluster.Spec.Allocation
	minPartition := in.cluster.Spec.Engine.MinPartitionBytes()
	cfg := control.Config{
		Allocator: allocator.Options{
			Policy:        string(spec.Policy),
			TimeLimit:     spec.SolverTimeLimitOrDefault(),
			Workers:       l.opts.SolverWorkers,
			MemoryLimit:   l.opts.SolverMemoryLimit,
			MaxChurnBytes: maxChurnBytes(in),
		},
		MinChangeBytes: int64(memoryFloorShare * float64(in.cluster.Spec.Capacity.PartitionableMemory())),
		Quantize:       func(p *planning.Plan) control.Allocation { return viewOf(p, minPartition) },
		Mechanisms:     control.DefaultMechanisms(),
	}
	planCtx, cancel := context.WithTimeout(ctx, spec.IntervalOrDefault())
	defer cancel()
	d, err := st.control.Decide(planCtx, cfg, control.Input{Snapshot: snap, Current: in.kept(), SpecsChanged: changed, Measured: measured(in, mr)})
	if err != nil {
		msg := truncate("no plan: "+err.Error(), maxPlanMessage)
		var unpackable *allocator.UnpackableError
		errors.As(err, &unpackable)
		return outcome{
			desired:    in.kept(),
			summary:    &v1.PlanSummary{Time: metav1.Now(), Policy: policyOf(spec), SolverStatus: v1.SolverStatusInfeasible, Message: msg},
			problems:   append(problems, problem{conditions.ReasonPlanInfeasible, msg}),
			specHash:   hash,
			unpackable: unpackableMessages(snap, unpackable),
		}
	}
	summary := summarize(d.Proposed, d.Fallback)
	if d.Fallback != "" {
		problems = append(problems, problem{v1.ReasonSolverFallback, "the plan came from the greedy fallback: " + d.Fallback})
	}
	plan := d.Proposed
	if !d.Taken {
		summary.MovedMemory = resource.Quantity{}
		if d.Plan != nil {
			plan = d.Plan
			summary.Objective = summarize(d.Plan, "").Objective
		}
		summary.Message = truncate(d.Kept+"; "+summary.Message, maxPlanMessage)
	}
	for _, tp := range plan.Tenants {
		st.isolated[tp.ID] = tp.Isolated
	}
	return outcome{desired: d.Desired, plan: plan, summary: summary, problems: problems, specHash: hash, decisions: d.Tenants}
}

// unpackableMessages says, to each tenant of an unpackable set, which other tenants' minimums
// its own cannot be placed beside, with every minimum, placement and the nodes' memory. The
// operator's nodes all have the same memory. nil when err is nil.
func unpackableMessages(snap *planning.Snapshot, err *allocator.UnpackableError) map[string]string {
	if err == nil {
		return nil
	}
	tenants := map[string]*planning.Tenant{}
	for i := range snap.Tenants {
		tenants[snap.Tenants[i].ID] = &snap.Tenants[i]
	}
	minimum := func(id string) string {
		t := tenants[id]
		if t == nil {
			return id
		}
		return fmt.Sprintf("%s (memory.min %s, %s)", id, planning.FormatBytes(t.Memory.MinBytes), placementText(t.Spread, len(snap.Nodes)))
	}
	var nodeMemory int64
	if len(snap.Nodes) > 0 {
		nodeMemory = snap.Nodes[0].MemoryBytes
	}
	verb, how := "cannot", "proven by the solver"
	if !err.Proven {
		verb, how = "could not", err.Why
	}
	out := make(map[string]string, len(err.Tenants))
	for _, id := range err.Tenants {
		var others []string
		for _, other := range err.Tenants {
			if other != id {
				others = append(others, minimum(other))
			}
		}
		beside := "on its own"
		if n := len(others); n > 0 {
			beside = "beside those of " + strings.Join(others, ", ")
			if n > 1 {
				beside = "beside those of " + strings.Join(others[:n-1], ", ") + " and " + others[n-1]
			}
		}
		out[id] = fmt.Sprintf("no plan: the memory minimum of %s %s be placed %s on %d nodes of %s partitionable memory each (%s); the plan in force is kept until one of these tenants or the cluster changes",
			minimum(id), verb, beside, len(snap.Nodes), planning.FormatBytes(nodeMemory), how)
	}
	return out
}

// placementText says on how many of the cluster's nodes a tenant may be placed.
func placementText(s planning.Spread, nodes int) string {
	lo, hi := max(1, int(s.MinNodes)), nodes
	if s.MaxNodes > 0 {
		hi = min(hi, int(s.MaxNodes))
	}
	switch {
	case lo == hi && hi == 1:
		return "on 1 node"
	case lo == hi:
		return fmt.Sprintf("on %d nodes", lo)
	default:
		return fmt.Sprintf("on %d to %d nodes", lo, hi)
	}
}

// measured is the control loop's view of last interval's judgements: whether each tenant met
// its objective, and how many reads its hit ratio was measured on.
func measured(in *inputs, mr metricsResult) map[string]control.Measurement {
	out := map[string]control.Measurement{}
	if mr.m == nil {
		return out
	}
	fairShare := in.cluster.Spec.Capacity.PartitionableMemory() * int64(len(in.nodes)) / int64(max(1, len(in.admitted)))
	for _, t := range in.admitted {
		tm := mr.m.Tenants[t.TenantID()]
		if tm == nil {
			continue
		}
		j := judge(t, tm, in.nodes, fairShare)
		out[t.TenantID()] = control.Measurement{
			Met:   j.met != nil && *j.met,
			Reads: int64((tm.HitsPerSecond + tm.MissesPerSecond) * mr.window.Seconds()),
		}
	}
	return out
}

// maxChurnBytes turns maxChurnPercent (memory moved, counted once: the sum of |new - old|
// halved) into the allocator's movement cap (the sum of |new - old|).
func maxChurnBytes(in *inputs) int64 {
	total := in.cluster.Spec.Capacity.PartitionableMemory() * int64(len(in.nodes))
	return control.MaxChurnBytes(total, int64(in.cluster.Spec.Allocation.MaxChurnPercent))
}

func policyOf(a v1.AllocationSettings) v1.AllocationPolicy {
	if a.Policy == "" {
		return v1.PolicyOptimal
	}
	return a.Policy
}

// viewOf is the plan's allocation in whole MiB (an engine's limit needs no finer grain, and
// kubectl then shows 27Mi, not 28142944), every partition at least minPartition bytes: a tenant
// spread over several nodes may get a sliver on one, which the engine cannot run. Rounding and
// raising cost at most half a MiB and minPartition per partition, which the node's headroom
// absorbs. Routing weights follow the memory the partitions get (a raised sliver would
// otherwise keep the small weight of its planned size: 2, 2 and 4 MiB raised to three 4 MiB
// partitions routed 25/25/50).
func viewOf(plan *planning.Plan, minPartition int64) view {
	const mib = 1 << 20
	out := view{}
	for _, tp := range plan.Tenants {
		parts := slices.Clone(tp.Partitions)
		for i := range parts {
			if parts[i].MemoryBytes > 0 {
				parts[i].MemoryBytes = max((parts[i].MemoryBytes+mib/2)/mib*mib, minPartition)
			}
		}
		weighByMemory(parts)
		out[tp.ID] = parts
	}
	return out
}

// routingPPM is the total of a tenant's routing weights (planning.Partition.RoutingWeight).
const routingPPM = 1_000_000

// weighByMemory sets the routing weight of every routed partition (memory and a positive
// weight) in proportion to its memory. Partitions the plan routes nothing to (weight 0: draining)
// and routing-only entries without memory keep their weights.
func weighByMemory(parts []planning.Partition) {
	var routed float64
	for _, p := range parts {
		if p.MemoryBytes > 0 && p.RoutingWeight > 0 {
			routed += float64(p.MemoryBytes)
		}
	}
	for i, p := range parts {
		if p.MemoryBytes > 0 && p.RoutingWeight > 0 {
			parts[i].RoutingWeight = max(1, int32(math.Round(routingPPM*float64(p.MemoryBytes)/routed)))
		}
	}
}

// maxPlanMessage is the API's bound on status.lastPlan.message.
const maxPlanMessage = 1024

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// summarize is status.lastPlan for a plan.
func summarize(plan *planning.Plan, fallback string) *v1.PlanSummary {
	status := v1.SolverStatusNotUsed
	switch {
	case fallback != "":
		status = v1.SolverStatusFallback
	case plan.Solver != nil && plan.Solver.Status == v1.SolverStatusOptimal:
		status = v1.SolverStatusOptimal
	case plan.Solver != nil:
		status = v1.SolverStatusFeasible
	}
	objective, err := decimal.Format(plan.Summary.ExpectedHitsPerSecond)
	if err != nil {
		objective = ""
	}
	var notes []string
	if fallback != "" {
		notes = append(notes, "greedy fallback: "+fallback)
	}
	notes = append(notes, plan.Notes...)
	return &v1.PlanSummary{
		Time:         metav1.Now(),
		Policy:       v1.AllocationPolicy(plan.Policy),
		SolverStatus: status,
		Objective:    objective,
		MovedMemory:  *resource.NewQuantity(plan.Summary.MovementBytes/2, resource.BinarySI),
		Message:      truncate(strings.Join(notes, "; "), maxPlanMessage),
	}
}

// exportMetrics updates the operator's metrics for the cluster.
func (l *Loop) exportMetrics(in *inputs, out outcome, start time.Time) {
	cluster := in.key.String()
	opmetrics.PlanDuration.WithLabelValues(cluster).Observe(time.Since(start).Seconds())
	if out.summary != nil {
		opmetrics.SetSolverStatus(cluster, out.summary.SolverStatus)
	}
	if out.plan != nil {
		opmetrics.PlanObjective.WithLabelValues(cluster).Set(out.plan.Summary.ExpectedHitsPerSecond)
	}
	opmetrics.PublishAllocation(cluster, &in.cluster.Spec.Capacity, in.nodes, publishedTenants(in, out.desired))
}

// publishedTenants are the admitted tenants' objectives and the memory an allocation gives
// each of their partitions, for the operator's metrics.
func publishedTenants(in *inputs, allocation view) []opmetrics.TenantAllocation {
	out := make([]opmetrics.TenantAllocation, len(in.admitted))
	for i, t := range in.admitted {
		memory := map[string]int64{}
		for _, p := range allocation[t.TenantID()] {
			memory[p.Node] += p.MemoryBytes
		}
		out[i] = opmetrics.TenantAllocation{ID: t.TenantID(), Objective: &t.Spec.Objective, MemoryBytes: memory}
	}
	return out
}
