package allocation_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
	"github.com/cacheqos/cacheqos/internal/promquery"
	"github.com/cacheqos/cacheqos/internal/promquery/promtest"
)

// TestLACSIsolationSurvivesRestart: under policy lacs a tenant sending six times its 1/K share
// is isolated (its status says so, with the demand it was measured at) and throttled to 1/K.
// Held at its limit, it serves less than 1/K; an operator restarted then still plans it by the
// demand in its status and keeps it isolated, instead of releasing it only to throttle it
// again once it floods.
func TestLACSIsolationSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus process")
	}
	const node, elephantID = "lacs-a", "lacs-team/elephant"
	sidecar := promtest.NewSidecar(t, node)
	traffic := func(rps, throttled float64) promtest.Traffic {
		return promtest.Traffic{RequestsPerSecond: rps, HitRatio: 0.5, BytesInPerSecond: 50 * rps, BytesOutPerSecond: 50 * rps,
			HitLatency: 200 * time.Microsecond, MissLatency: 2 * time.Millisecond, ThrottledPerSecond: throttled}
	}
	sidecar.SetTraffic(elephantID, traffic(3000, 0))
	sidecar.SetTraffic("lacs-team/mouse", traffic(100, 0))
	sidecar.SetPlanGeneration(0)
	prom := promtest.Start(t, []string{sidecar.Address()}, time.Second)
	prom.WaitFor(t, `count_over_time(`+promquery.MetricRequests+`[8s]) >= 7`, 2, 30*time.Second)

	cacheNS, teamNS := env.Namespace(t, "lacs-cache"), env.Namespace(t, "lacs-team")
	create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"pool": "lacs"}}})
	sidecarPod(t, cacheNS, "shared", node, "10.3.0.1")
	cluster := sharedCluster(cacheNS, "lacs", prom.URL, 1000, v1.PolicyLACS)
	create(t, cluster)
	for _, name := range []string{"elephant", "mouse"} {
		create(t, &v1.TenantSLO{
			ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: name},
			Spec: v1.TenantSLOSpec{
				ClusterRef: v1.ClusterReference{Namespace: cacheNS, Name: "shared"},
				Objective:  v1.Objective{HitRatio: &v1.HitRatioObjective{Ratio: "0.4"}},
				Class:      v1.ClassBestEffort,
			},
		})
	}

	// isolated checks that the elephant's status and its partition say it is isolated, planned
	// by a demand of about 3000 requests/s, and throttled to 1/K of the node's 1000 ops/s.
	isolated := func() error {
		slo := &v1.TenantSLO{}
		if err := get(slo, teamNS, "elephant"); err != nil {
			return err
		}
		a := slo.Status.Allocation
		if a == nil || !a.Isolated || len(a.Demand) != 1 || a.Demand[0].NodeName != node || a.Demand[0].OpsPerSecond < 2500 {
			return fmt.Errorf("elephant allocation %+v, want isolated with a demand of about 3000 requests/s on %s", a, node)
		}
		plan := &v1.CacheNodePlan{}
		if err := get(plan, cacheNS, "shared-"+node); err != nil {
			return err
		}
		for _, p := range plan.Spec.Partitions {
			if p.Tenant == elephantID {
				if p.OpsLimit == nil || *p.OpsLimit != 500 {
					return fmt.Errorf("elephant's partition has ops limit %v, want 500 (1/K of 1000)", p.OpsLimit)
				}
				return nil
			}
		}
		return errors.New("the plan has no partition for the elephant")
	}
	testenv.Eventually(t, timeout, isolated)

	// Held at its limit, the elephant serves 400 requests/s and the rest waits.
	sidecar.SetTraffic(elephantID, traffic(400, 300))
	testenv.Eventually(t, timeout, func() error {
		slo := &v1.TenantSLO{}
		if err := get(slo, teamNS, "elephant"); err != nil {
			return err
		}
		if obs := slo.Status.Observed; obs == nil || obs.OpsPerSecond > 450 {
			return fmt.Errorf("elephant observed %+v, want about 400 requests/s", obs)
		}
		if c := condition(slo.Status.Conditions, v1.ConditionThrottled); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "isolated by policy lacs") {
			return fmt.Errorf("elephant Throttled %+v, want True and saying it is isolated", c)
		}
		return isolated()
	})

	if err := get(cluster, cacheNS, "shared"); err != nil {
		t.Fatal(err)
	}
	lastPlan := cluster.Status.LastPlan.Time
	if err := env.RestartOperator(operatorOptions); err != nil {
		t.Fatal(err)
	}
	// Two plans of the restarted operator: the first could still be the one it found in force.
	for range 2 {
		testenv.Eventually(t, timeout, func() error {
			if err := get(cluster, cacheNS, "shared"); err != nil {
				return err
			}
			if !lastPlan.Before(&cluster.Status.LastPlan.Time) {
				return errors.New("the restarted operator has not planned again yet")
			}
			return nil
		})
		lastPlan = cluster.Status.LastPlan.Time
	}
	if err := isolated(); err != nil {
		t.Errorf("after the restart: %v", err)
	}
}
