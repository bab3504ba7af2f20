/*
Copyright 2026 The cacheqos Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// TestPrinterColumns asks the API server for the Table that `kubectl get` prints and checks
// the default columns and their cells for each kind, with status filled in the way the
// operator and the sidecar will.
func TestPrinterColumns(t *testing.T) {
	ctx := context.Background()
	const ns = "columns"
	createNamespace(ctx, t, ns)

	cluster := validCluster()
	cluster.Namespace, cluster.Name = ns, "shared-redis"
	tenantSLO := validTenant()
	tenantSLO.Namespace, tenantSLO.Name = ns, "sessions"
	tenantSLO.Spec.Objective.HitRatio.Ratio = "0.95"
	nodePlan := validPlan()
	nodePlan.Namespace, nodePlan.Name = ns, "shared-redis-node-a"
	nodePlan.Spec.PlanGeneration = 7
	for _, obj := range []client.Object{cluster, tenantSLO, nodePlan} {
		if err := k8sClient.Create(ctx, obj, strict); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}

	now := metav1.NewTime(time.Now())
	cluster.Status = v1.CacheClusterStatus{
		ObservedGeneration: cluster.Generation,
		NodeCount:          3,
		Tenants:            v1.TenantCounts{Total: 13, Admitted: 12, MeetingSLO: 11, Throttled: 1},
		LastPlan: &v1.PlanSummary{
			Time: now, Policy: v1.PolicyOptimal, SolverStatus: v1.SolverStatusOptimal,
			Objective: "81234.5", Duration: metav1.Duration{Duration: 1200 * time.Millisecond},
		},
	}
	setCondition(&cluster.Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, v1.ReasonAllNodesReady, cluster.Generation)

	tenantSLO.Status = v1.TenantSLOStatus{
		ObservedGeneration: tenantSLO.Generation,
		Allocation: &v1.TenantAllocation{
			Memory:    resource.MustParse("1536Mi"),
			NodeCount: 2,
			Nodes: []v1.NodeAllocation{
				{NodeName: "node-a", Memory: resource.MustParse("1Gi")},
				{NodeName: "node-b", Memory: resource.MustParse("512Mi"), OpsLimit: ptr.To[int64](5000)},
			},
		},
		Observed:          &v1.TenantObservation{Time: now, ObjectiveValue: "0.9612", HitRatio: "0.9612", OpsPerSecond: 4200},
		PredictedHitRatio: "0.958",
		CredentialsSecret: "sessions-cache-credentials",
		Endpoint:          "shared-redis.cache-platform.svc:6379",
		Objective:         tenantSLO.Spec.Objective.Summary(),
	}
	setCondition(&tenantSLO.Status.Conditions, v1.ConditionSLOMet, metav1.ConditionTrue, v1.ReasonTargetMet, tenantSLO.Generation)
	setCondition(&tenantSLO.Status.Conditions, v1.ConditionAdmitted, metav1.ConditionTrue, v1.ReasonAdmitted, tenantSLO.Generation)
	setCondition(&tenantSLO.Status.Conditions, v1.ConditionCurveAccurate, metav1.ConditionFalse, v1.ReasonCurveOff, tenantSLO.Generation)
	setCondition(&tenantSLO.Status.Conditions, v1.ConditionReady, metav1.ConditionFalse, "PartitionsPending", tenantSLO.Generation)

	nodePlan.Status = v1.CacheNodePlanStatus{
		AppliedGeneration:  6,
		ObservedGeneration: nodePlan.Generation,
		LastAppliedTime:    &now,
		Partitions: []v1.PartitionStatus{{
			Tenant: "checkout/sessions", MemoryLimitBytes: 1 << 30, UsedBytes: 700 << 20, RSSBytes: 760 << 20,
			State: v1.PartitionResizing,
		}},
	}
	setCondition(&nodePlan.Status.Conditions, v1.ConditionPlanApplied, metav1.ConditionFalse, v1.ReasonPlanPending, nodePlan.Generation)

	for _, obj := range []client.Object{cluster, tenantSLO, nodePlan} {
		if err := k8sClient.Status().Update(ctx, obj, strict); err != nil {
			t.Fatalf("updating status of %s: %v", obj.GetName(), err)
		}
	}

	for _, tc := range []struct {
		resource    string
		wantColumns []string // priority 0, in order
		wantCells   map[string]string
	}{
		{"cacheclusters", []string{"Name", "Engine", "Nodes", "Tenants", "Ready", "Reason", "Age"},
			map[string]string{"Name": "shared-redis", "Engine": "redis", "Nodes": "3", "Tenants": "12", "Ready": "True", "Reason": v1.ReasonAllNodesReady, "Policy": "optimal", "Meeting SLO": "11", "Solver": "Optimal"}},
		{"tenantslos", []string{"Name", "Ready", "Reason", "Objective", "Observed", "Memory", "Curve", "Age"},
			map[string]string{"Name": "sessions", "Ready": "False", "Reason": "PartitionsPending", "Objective": "hit>=0.95", "Observed": "0.9612", "Memory": "1536Mi", "Curve": v1.ReasonCurveOff, "Nodes": "2", "SLO": "True", "Cluster": "shared-redis", "Class": "strict", "Admitted": v1.ReasonAdmitted}},
		{"cachenodeplans", []string{"Name", "Node", "Partitions", "Generation", "Applied", "Age"},
			map[string]string{"Name": "shared-redis-node-a", "Node": "node-a", "Partitions": "1", "Generation": "7", "Applied": "6", "Cluster": "shared-redis"}},
	} {
		t.Run(tc.resource, func(t *testing.T) {
			table := serverTable(t, ns, tc.resource)
			var defaultColumns []string
			index := map[string]int{}
			for i, col := range table.ColumnDefinitions {
				index[col.Name] = i
				if col.Priority == 0 {
					defaultColumns = append(defaultColumns, col.Name)
				}
			}
			if !reflect.DeepEqual(defaultColumns, tc.wantColumns) {
				t.Errorf("default columns %v, want %v", defaultColumns, tc.wantColumns)
			}
			if len(table.Rows) != 1 {
				t.Fatalf("%d rows, want 1", len(table.Rows))
			}
			cells := table.Rows[0].Cells
			for column, want := range tc.wantCells {
				i, ok := index[column]
				if !ok {
					t.Errorf("no column %q", column)
					continue
				}
				if got := fmt.Sprint(cells[i]); got != want {
					t.Errorf("column %q = %q, want %q", column, got, want)
				}
			}
		})
	}
}

func setCondition(conditions *[]metav1.Condition, conditionType string, status metav1.ConditionStatus, reason string, generation int64) {
	meta.SetStatusCondition(conditions, metav1.Condition{
		Type: conditionType, Status: status, Reason: reason, ObservedGeneration: generation,
		Message: "set by the printer column test",
	})
}

// serverTable fetches a namespaced list of a cacheqos.io resource as a meta.k8s.io Table, the
// server-side rendering `kubectl get` uses.
func serverTable(t *testing.T, namespace, resourcePlural string) metav1.Table {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/%s/%s/namespaces/%s/%s?includeObject=Metadata",
		strings.TrimSuffix(restConfig.Host, "/"), v1.GroupVersion.Group, v1.GroupVersion.Version, namespace, resourcePlural)
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatalf("decoding Table: %v", err)
	}
	if table.Kind != "Table" {
		t.Fatalf("got kind %q, want a Table", table.Kind)
	}
	return table
}

// TestPlansSelectableByNode lists CacheNodePlans with a field selector on spec.nodeName, the
// query a sidecar uses to watch only its own node's plan.
func TestPlansSelectableByNode(t *testing.T) {
	ctx := context.Background()
	const ns = "selectors"
	createNamespace(ctx, t, ns)
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		p := validPlan()
		p.Namespace, p.Name, p.Spec.NodeName = ns, "shared-redis-"+node, node
		p.Spec.Partitions[0].Routes = []v1.TenantRoute{{NodeName: node, Host: node, Port: 7380, Weight: 1}}
		if err := k8sClient.Create(ctx, p, strict); err != nil {
			t.Fatal(err)
		}
	}
	var plans v1.CacheNodePlanList
	if err := k8sClient.List(ctx, &plans, client.InNamespace(ns),
		client.MatchingFields{"spec.nodeName": "node-b", "spec.clusterName": "shared-redis"}); err != nil {
		t.Fatal(err)
	}
	if len(plans.Items) != 1 || plans.Items[0].Spec.NodeName != "node-b" {
		var names []string
		for _, p := range plans.Items {
			names = append(names, p.Name)
		}
		t.Fatalf("field selector spec.nodeName=node-b returned %v, want only shared-redis-node-b", names)
	}
}
