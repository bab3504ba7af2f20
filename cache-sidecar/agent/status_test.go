package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/cache-sidecar/engine"
)

func statusTestPlan(tenants ...string) *v1.CacheNodePlan {
	plan := &v1.CacheNodePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "c-node-a", Generation: 3},
		Spec:       v1.CacheNodePlanSpec{NodeName: "node-a", Engine: v1.EngineRedis, PlanGeneration: 7},
	}
	var parts []v1.PartitionPlan
	for _, t := range tenants {
		parts = append(parts, v1.PartitionPlan{Tenant: t, Memory: resource.MustParse("64Mi"), EvictionPolicy: v1.EvictionLRU})
	}
	plan.Spec.SetPartitions(parts)
	return plan
}

func running(tenant string, bytes int64) engine.Status {
	return engine.Status{Tenant: tenant, State: engine.Running, Applied: engine.PartitionSpec{Tenant: tenant, MemoryBytes: bytes}}
}

func TestBuildStatus(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	type want struct {
		applied        int64
		lastApplied    *metav1.Time
		appliedStatus  metav1.ConditionStatus
		appliedReason  string
		readyStatus    metav1.ConditionStatus
		readyReason    string
		messageHas     []string
		partitions     map[string]v1.PartitionState
		partitionNotes map[string]string
	}
	cases := []struct {
		name string
		prev v1.CacheNodePlanStatus
		plan *v1.CacheNodePlan
		r    passResult
		want want
	}{
		{
			name: "everything applied",
			prev: v1.CacheNodePlanStatus{AppliedGeneration: 6, LastAppliedTime: &earlier},
			plan: statusTestPlan("a/x", "b/y"),
			r: passResult{
				engines: []engine.Status{running("a/x", 64<<20), running("b/y", 64<<20)},
				stats:   map[string]engine.Stats{"a/x": {LimitBytes: 64 << 20, UsedBytes: 1000, RSSBytes: 5000, Evictions: 2}},
			},
			want: want{
				applied: 7, lastApplied: ptrTime(now),
				appliedStatus: metav1.ConditionTrue, appliedReason: v1.ReasonPlanApplied,
				readyStatus: metav1.ConditionTrue, readyReason: ReasonPartitionsRunning,
				partitions: map[string]v1.PartitionState{"a/x": v1.PartitionRunning, "b/y": v1.PartitionRunning},
			},
		},
		{
			name: "same generation again keeps the time",
			prev: v1.CacheNodePlanStatus{AppliedGeneration: 7, LastAppliedTime: &earlier},
			plan: statusTestPlan("a/x"),
			r:    passResult{engines: []engine.Status{running("a/x", 64<<20)}},
			want: want{
				applied: 7, lastApplied: &earlier,
				appliedStatus: metav1.ConditionTrue, appliedReason: v1.ReasonPlanApplied,
				readyStatus: metav1.ConditionTrue, readyReason: ReasonPartitionsRunning,
				partitions: map[string]v1.PartitionState{"a/x": v1.PartitionRunning},
			},
		},
		{
			name: "one partition failed",
			prev: v1.CacheNodePlanStatus{AppliedGeneration: 6, LastAppliedTime: &earlier},
			plan: statusTestPlan("a/x", "b/y"),
			r: passResult{
				engines:       []engine.Status{running("a/x", 64<<20), {Tenant: "b/y", State: engine.Failed, Message: "exited"}},
				partitionErrs: map[string]error{"b/y": errors.New("engine exited during start")},
			},
			want: want{
				applied: 6, lastApplied: &earlier,
				appliedStatus: metav1.ConditionFalse, appliedReason: v1.ReasonApplyFailed,
				readyStatus: metav1.ConditionFalse, readyReason: v1.ReasonApplyFailed,
				messageHas:     []string{"1 partitions not applied", "b/y (engine exited during start)"},
				partitions:     map[string]v1.PartitionState{"a/x": v1.PartitionRunning, "b/y": v1.PartitionFailed},
				partitionNotes: map[string]string{"b/y": "engine exited during start"},
			},
		},
		{
			name: "secret missing",
			plan: statusTestPlan("a/x"),
			r: passResult{
				engines:        []engine.Status{running("a/x", 64<<20)},
				credentialsErr: errors.New("credentials Secret creds: not found"),
			},
			want: want{
				appliedStatus: metav1.ConditionFalse, appliedReason: ReasonCredentialsMissing,
				readyStatus: metav1.ConditionFalse, readyReason: ReasonCredentialsMissing,
				messageHas: []string{"credentials Secret creds: not found"},
				partitions: map[string]v1.PartitionState{"a/x": v1.PartitionRunning},
			},
		},
		{
			name: "one tenant without credentials",
			plan: statusTestPlan("a/x", "b/y"),
			r: passResult{
				engines:        []engine.Status{running("a/x", 64<<20), running("b/y", 64<<20)},
				credentialErrs: map[string]error{"a/x": errors.New("credentials Secret creds has no key a.x")},
			},
			want: want{
				appliedStatus: metav1.ConditionFalse, appliedReason: ReasonCredentialsMissing,
				readyStatus: metav1.ConditionFalse, readyReason: ReasonCredentialsMissing,
				messageHas:     []string{"1 tenants without credentials", "a/x (credentials Secret creds has no key a.x)"},
				partitions:     map[string]v1.PartitionState{"a/x": v1.PartitionRunning, "b/y": v1.PartitionRunning},
				partitionNotes: map[string]string{"a/x": "has no key a.x"},
			},
		},
		{
			name: "wrong node keeps the previous partitions",
			prev: v1.CacheNodePlanStatus{Partitions: []v1.PartitionStatus{{Tenant: "old/z", State: v1.PartitionRunning}}},
			plan: statusTestPlan("a/x"),
			r:    passResult{planErr: &planError{ReasonWrongNode, errors.New("the plan is for node \"node-b\"")}},
			want: want{
				appliedStatus: metav1.ConditionFalse, appliedReason: ReasonWrongNode,
				readyStatus: metav1.ConditionFalse, readyReason: ReasonWrongNode,
				messageHas: []string{"node-b"},
				partitions: map[string]v1.PartitionState{"old/z": v1.PartitionRunning},
			},
		},
		{
			name: "applied but a partition restarts after a crash",
			plan: statusTestPlan("a/x"),
			r:    passResult{engines: []engine.Status{{Tenant: "a/x", State: engine.Starting}}},
			want: want{
				applied: 7, lastApplied: ptrTime(now),
				appliedStatus: metav1.ConditionTrue, appliedReason: v1.ReasonPlanApplied,
				readyStatus: metav1.ConditionFalse, readyReason: v1.ReasonReconciling,
				messageHas: []string{"a/x (Starting)"},
				partitions: map[string]v1.PartitionState{"a/x": v1.PartitionStarting},
			},
		},
		{
			name: "draining partition is listed",
			plan: statusTestPlan("a/x"),
			r: passResult{engines: []engine.Status{running("a/x", 64<<20),
				{Tenant: "gone/q", State: engine.Draining}}},
			want: want{
				applied: 7, lastApplied: ptrTime(now),
				appliedStatus: metav1.ConditionTrue, appliedReason: v1.ReasonPlanApplied,
				readyStatus: metav1.ConditionTrue, readyReason: ReasonPartitionsRunning,
				partitions: map[string]v1.PartitionState{"a/x": v1.PartitionRunning, "gone/q": v1.PartitionDraining},
			},
		},
		{
			name: "refused spec has no engine",
			plan: statusTestPlan("a/x"),
			r:    passResult{partitionErrs: map[string]error{"a/x": errors.New("memory below minimum")}},
			want: want{
				appliedStatus: metav1.ConditionFalse, appliedReason: v1.ReasonApplyFailed,
				readyStatus: metav1.ConditionFalse, readyReason: v1.ReasonApplyFailed,
				partitions:     map[string]v1.PartitionState{"a/x": v1.PartitionFailed},
				partitionNotes: map[string]string{"a/x": "memory below minimum"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := buildStatus(tc.prev, tc.plan, tc.r, now)
			if st.AppliedGeneration != tc.want.applied {
				t.Errorf("appliedGeneration = %d, want %d", st.AppliedGeneration, tc.want.applied)
			}
			if !timesEqual(st.LastAppliedTime, tc.want.lastApplied) {
				t.Errorf("lastAppliedTime = %v, want %v", st.LastAppliedTime, tc.want.lastApplied)
			}
			if st.ObservedGeneration != tc.plan.Generation {
				t.Errorf("observedGeneration = %d, want %d", st.ObservedGeneration, tc.plan.Generation)
			}
			applied := meta.FindStatusCondition(st.Conditions, v1.ConditionPlanApplied)
			ready := meta.FindStatusCondition(st.Conditions, v1.ConditionReady)
			if applied == nil || ready == nil {
				t.Fatalf("conditions %+v lack PlanApplied or Ready", st.Conditions)
			}
			if applied.Status != tc.want.appliedStatus || applied.Reason != tc.want.appliedReason {
				t.Errorf("PlanApplied = %s/%s (%s), want %s/%s", applied.Status, applied.Reason, applied.Message, tc.want.appliedStatus, tc.want.appliedReason)
			}
			if ready.Status != tc.want.readyStatus || ready.Reason != tc.want.readyReason {
				t.Errorf("Ready = %s/%s (%s), want %s/%s", ready.Status, ready.Reason, ready.Message, tc.want.readyStatus, tc.want.readyReason)
			}
			for _, s := range tc.want.messageHas {
				if !strings.Contains(applied.Message+" | "+ready.Message, s) {
					t.Errorf("condition messages %q / %q lack %q", applied.Message, ready.Message, s)
				}
			}
			got := map[string]v1.PartitionState{}
			for _, ps := range st.Partitions {
				got[ps.Tenant] = ps.State
				if note := tc.want.partitionNotes[ps.Tenant]; !strings.Contains(ps.Message, note) {
					t.Errorf("partition %s message %q lacks %q", ps.Tenant, ps.Message, note)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want.partitions) {
				t.Errorf("partition states = %v, want %v", got, tc.want.partitions)
			}
		})
	}
}

func TestBuildStatusCopiesEngineNumbers(t *testing.T) {
	plan := statusTestPlan("a/x")
	st := buildStatus(v1.CacheNodePlanStatus{}, plan, passResult{
		engines: []engine.Status{running("a/x", 64<<20)},
		stats:   map[string]engine.Stats{"a/x": {LimitBytes: 60 << 20, UsedBytes: 1234, RSSBytes: 5678, Evictions: 9}},
	}, time.Now())
	want := v1.PartitionStatus{Tenant: "a/x", MemoryLimitBytes: 60 << 20, UsedBytes: 1234, RSSBytes: 5678, Evictions: 9, State: v1.PartitionRunning}
	if len(st.Partitions) != 1 || st.Partitions[0] != want {
		t.Fatalf("partitions = %+v, want [%+v]", st.Partitions, want)
	}
}

func TestBuildStatusKeepsTransitionTime(t *testing.T) {
	plan := statusTestPlan("a/x")
	r := passResult{engines: []engine.Status{running("a/x", 64<<20)}}
	first := buildStatus(v1.CacheNodePlanStatus{}, plan, r, time.Now())
	// Transition times have second precision on the API server.
	for i := range first.Conditions {
		first.Conditions[i].LastTransitionTime = metav1.NewTime(first.Conditions[i].LastTransitionTime.Truncate(time.Second).Add(-time.Hour))
	}
	second := buildStatus(first, plan, r, time.Now())
	for i := range first.Conditions {
		if !first.Conditions[i].LastTransitionTime.Equal(&second.Conditions[i].LastTransitionTime) {
			t.Errorf("condition %s moved its transition time without changing", first.Conditions[i].Type)
		}
	}
}

func TestDescribeFailuresNamesTheFirstTen(t *testing.T) {
	errs := map[string]error{}
	for i := range 25 {
		errs[fmt.Sprintf("ns/t%02d", i)] = errors.New("boom")
	}
	msg := describeFailures("partitions not applied", errs)
	if !strings.HasPrefix(msg, "25 partitions not applied: ns/t00 (boom); ns/t01 (boom)") || !strings.HasSuffix(msg, "ns/t09 (boom) and 15 more") {
		t.Fatalf("message %q", msg)
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "0123456..."},
		{"ééééé", 8, "éé..."}, // never cuts a rune in half
	} {
		if got := truncate(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func ptrTime(t time.Time) *metav1.Time { mt := metav1.NewTime(t); return &mt }

func timesEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}
