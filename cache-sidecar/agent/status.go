package agent

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
)

// Condition reasons the agent sets besides the shared ones in api/v1alpha1.
const (
	// ReasonCredentialsMissing (PlanApplied=False, Ready=False): the credentials Secret the plan
	// names cannot be read, or lacks a valid hash for some tenant; those tenants cannot
	// authenticate. The message names the Secret, the keys and the cause.
	ReasonCredentialsMissing = "CredentialsMissing"
	// ReasonPartitionsRunning (Ready=True): every partition of the plan runs at its planned size.
	ReasonPartitionsRunning = "PartitionsRunning"
	// ReasonWrongNode (PlanApplied=False): the plan's spec.nodeName is not this sidecar's node;
	// nothing was applied.
	ReasonWrongNode = "WrongNode"
)

// Bounds of what goes into status, from the CRD's schema.
const (
	maxPartitionMessage = 1024
	maxConditionMessage = 4096 // far below metav1.Condition's 32768; a summary, not a log
	// maxNamedPartitions is how many failing partitions a condition message names.
	maxNamedPartitions = 10
)

// passResult is everything one pass learned, the input of buildStatus.
type passResult struct {
	// planErr is a failure of the whole plan (wrong node, engines unavailable); nothing
	// partition-specific was applied. Its reason goes into the conditions.
	planErr *planError
	// engines is every partition the engine manager runs, including draining ones.
	engines []engine.Status
	// stats of the partitions whose engines answered.
	stats map[string]engine.Stats
	// partitionErrs are partitions the pass could not apply: engine reconcile errors and
	// specs the agent refused.
	partitionErrs map[string]error
	// credentialErrs are tenants without a usable credential hash; credentialsErr is set when
	// the whole Secret is unusable.
	credentialErrs map[string]error
	credentialsErr error
	// proxyErr is a refused proxy update: no tenant of this plan is served as planned.
	proxyErr error
}

// planError is a failure of a whole pass, with the condition reason it reports.
type planError struct {
	reason string
	err    error
}

func (e *planError) Error() string { return e.err.Error() }

// applied reports whether the pass applied every partition of the plan.
func (r *passResult) applied() bool {
	return r.planErr == nil && len(r.partitionErrs) == 0 && len(r.credentialErrs) == 0 &&
		r.credentialsErr == nil && r.proxyErr == nil
}

// buildStatus is the plan's status after a pass: prev carried forward where the pass says
// nothing new (appliedGeneration, lastAppliedTime, condition transition times).
func buildStatus(prev v1.CacheNodePlanStatus, plan *v1.CacheNodePlan, r passResult, now time.Time) v1.CacheNodePlanStatus {
	st := v1.CacheNodePlanStatus{
		AppliedGeneration:  prev.AppliedGeneration,
		ObservedGeneration: plan.Generation,
		Conditions:         slices.Clone(prev.Conditions),
		LastAppliedTime:    prev.LastAppliedTime,
	}
	if r.planErr == nil {
		st.Partitions = partitionStatuses(plan, r)
	} else {
		st.Partitions = slices.Clone(prev.Partitions)
	}
	if r.applied() && (prev.AppliedGeneration != plan.Spec.PlanGeneration || prev.LastAppliedTime == nil) {
		st.AppliedGeneration = plan.Spec.PlanGeneration
		t := metav1.NewTime(now)
		st.LastAppliedTime = &t
	}
	setConditions(&st, plan, r)
	return st
}

// partitionStatuses lists every partition the node runs or was asked to run, by tenant.
func partitionStatuses(plan *v1.CacheNodePlan, r passResult) []v1.PartitionStatus {
	byTenant := make(map[string]v1.PartitionStatus, len(r.engines)+len(plan.Spec.Partitions))
	for _, es := range r.engines {
		ps := v1.PartitionStatus{
			Tenant:           es.Tenant,
			MemoryLimitBytes: es.Applied.MemoryBytes,
			State:            partitionState(es.State),
			Message:          es.Message,
		}
		if s, ok := r.stats[es.Tenant]; ok {
			ps.MemoryLimitBytes, ps.UsedBytes, ps.RSSBytes, ps.Evictions = s.LimitBytes, s.UsedBytes, s.RSSBytes, s.Evictions
		}
		byTenant[es.Tenant] = ps
	}
	for _, p := range plan.Spec.Partitions {
		ps, running := byTenant[p.Tenant]
		if !running {
			ps = v1.PartitionStatus{Tenant: p.Tenant, State: v1.PartitionFailed}
		}
		var problems []string
		if err := r.partitionErrs[p.Tenant]; err != nil {
			problems = append(problems, err.Error())
		}
		if err := r.credentialErrs[p.Tenant]; err != nil {
			problems = append(problems, err.Error())
		}
		if len(problems) > 0 {
			ps.Message = strings.Join(problems, "; ")
		}
		byTenant[p.Tenant] = ps
	}
	out := make([]v1.PartitionStatus, 0, len(byTenant))
	for _, tenant := range slices.Sorted(maps.Keys(byTenant)) {
		ps := byTenant[tenant]
		ps.Message = truncate(ps.Message, maxPartitionMessage)
		out = append(out, ps)
	}
	// The status list is capped like the plan's; draining partitions beyond the cap go unlisted.
	if len(out) > v1.MaxPartitionsPerNode {
		out = out[:v1.MaxPartitionsPerNode]
	}
	return out
}

// partitionState maps the engine manager's states to the API's.
func partitionState(s engine.State) v1.PartitionState {
	switch s {
	case engine.Starting:
		return v1.PartitionStarting
	case engine.Running:
		return v1.PartitionRunning
	case engine.Resizing:
		return v1.PartitionResizing
	case engine.Draining:
		return v1.PartitionDraining
	default:
		return v1.PartitionFailed
	}
}

// setConditions sets PlanApplied and Ready from the pass.
func setConditions(st *v1.CacheNodePlanStatus, plan *v1.CacheNodePlan, r passResult) {
	gen := plan.Generation
	applied := metav1.Condition{Type: v1.ConditionPlanApplied, ObservedGeneration: gen}
	switch {
	case r.planErr != nil:
		applied.Status, applied.Reason, applied.Message = metav1.ConditionFalse, r.planErr.reason, r.planErr.Error()
	case r.credentialsErr != nil:
		applied.Status, applied.Reason = metav1.ConditionFalse, ReasonCredentialsMissing
		applied.Message = r.credentialsErr.Error()
	case r.proxyErr != nil:
		applied.Status, applied.Reason = metav1.ConditionFalse, v1.ReasonApplyFailed
		applied.Message = "the proxy refused the tenant table: " + r.proxyErr.Error()
	case len(r.partitionErrs) > 0:
		applied.Status, applied.Reason = metav1.ConditionFalse, v1.ReasonApplyFailed
		applied.Message = describeFailures("partitions not applied", r.partitionErrs)
		if len(r.credentialErrs) > 0 {
			applied.Message += "; " + describeFailures("tenants without credentials", r.credentialErrs)
		}
	case len(r.credentialErrs) > 0:
		applied.Status, applied.Reason = metav1.ConditionFalse, ReasonCredentialsMissing
		applied.Message = describeFailures("tenants without credentials", r.credentialErrs)
	default:
		applied.Status, applied.Reason = metav1.ConditionTrue, v1.ReasonPlanApplied
		applied.Message = fmt.Sprintf("plan generation %d applied: %d partitions", plan.Spec.PlanGeneration, len(plan.Spec.Partitions))
	}
	applied.Message = truncate(applied.Message, maxConditionMessage)
	meta.SetStatusCondition(&st.Conditions, applied)

	ready := metav1.Condition{Type: v1.ConditionReady, ObservedGeneration: gen}
	notRunning := notRunningPartitions(plan, st.Partitions)
	switch {
	case applied.Status != metav1.ConditionTrue:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, applied.Reason, applied.Message
	case len(notRunning) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, v1.ReasonReconciling
		ready.Message = truncate(describeFailures("partitions not running", notRunning), maxConditionMessage)
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, ReasonPartitionsRunning
		ready.Message = fmt.Sprintf("%d partitions running", len(plan.Spec.Partitions))
	}
	meta.SetStatusCondition(&st.Conditions, ready)
}

// notRunningPartitions are the plan's partitions that do not serve at their planned size.
func notRunningPartitions(plan *v1.CacheNodePlan, partitions []v1.PartitionStatus) map[string]error {
	byTenant := make(map[string]v1.PartitionStatus, len(partitions))
	for _, ps := range partitions {
		byTenant[ps.Tenant] = ps
	}
	out := make(map[string]error)
	for _, p := range plan.Spec.Partitions {
		if ps := byTenant[p.Tenant]; ps.State != v1.PartitionRunning {
			out[p.Tenant] = fmt.Errorf("%s", cmp.Or(string(ps.State), "unknown"))
		}
	}
	return out
}

// describeFailures names failing tenants and why, the first maxNamedPartitions of them in
// tenant order, and counts the rest.
func describeFailures(what string, errs map[string]error) string {
	tenants := slices.Sorted(maps.Keys(errs))
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s:", len(tenants), what)
	for i, tenant := range tenants {
		if i == maxNamedPartitions {
			fmt.Fprintf(&b, " and %d more", len(tenants)-i)
			break
		}
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, " %s (%v)", tenant, errs[tenant])
	}
	return b.String()
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
