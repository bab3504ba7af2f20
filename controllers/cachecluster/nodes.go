package cachecluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
)

// conditionTolerations are the taints that node conditions and cordoning put on nodes, which
// the DaemonSet controller tolerates for its pods (not-ready and unreachable only with
// NoExecute: a new or failing node runs its sidecar once it is ready again). A node with
// only these taints keeps its plan, so a brief hiccup or a new node coming up does not move
// partitions around.
var conditionTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists},
	{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// selectNodes returns, sorted by name, the nodes the cluster's sidecar DaemonSet runs on:
// labels match spec.nodeSelector, the pods' required node affinity (if any) matches, and
// every NoSchedule/NoExecute taint is tolerated by the pods' tolerations.
func selectNodes(nodes []corev1.Node, nodeSelector map[string]string, podTolerations []corev1.Toleration, affinity *corev1.Affinity) []corev1.Node {
	selector := labels.SelectorFromSet(nodeSelector)
	tolerations := append(slices.Clone(podTolerations), conditionTolerations...)
	var required *corev1.NodeSelector
	if affinity != nil && affinity.NodeAffinity != nil {
		required = affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	var out []corev1.Node
	for i := range nodes {
		n := &nodes[i]
		if !n.DeletionTimestamp.IsZero() || !selector.Matches(labels.Set(n.Labels)) || !toleratesAll(tolerations, n.Spec.Taints) ||
			(required != nil && !matchesNodeSelector(required, n)) {
			continue
		}
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// matchesNodeSelector evaluates a required node affinity as the scheduler does: the node
// matches any term, a term matches when all its expressions and fields do, and a term with
// neither (or one that cannot be parsed) matches nothing.
func matchesNodeSelector(ns *corev1.NodeSelector, node *corev1.Node) bool {
	return slices.ContainsFunc(ns.NodeSelectorTerms, func(term corev1.NodeSelectorTerm) bool {
		if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
			return false
		}
		nodeLabels := labels.Set(node.Labels)
		for _, e := range term.MatchExpressions {
			if !requirementMatches(e, nodeLabels) {
				return false
			}
		}
		// metadata.name is the only field a node selector term may match, with In or NotIn.
		for _, f := range term.MatchFields {
			named := slices.Contains(f.Values, node.Name)
			if f.Key != "metadata.name" || (f.Operator != corev1.NodeSelectorOpIn && f.Operator != corev1.NodeSelectorOpNotIn) ||
				named != (f.Operator == corev1.NodeSelectorOpIn) {
				return false
			}
		}
		return true
	})
}

var nodeSelectorOperators = map[corev1.NodeSelectorOperator]selection.Operator{
	corev1.NodeSelectorOpIn:           selection.In,
	corev1.NodeSelectorOpNotIn:        selection.NotIn,
	corev1.NodeSelectorOpExists:       selection.Exists,
	corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	corev1.NodeSelectorOpGt:           selection.GreaterThan,
	corev1.NodeSelectorOpLt:           selection.LessThan,
}

func requirementMatches(e corev1.NodeSelectorRequirement, set labels.Set) bool {
	op, ok := nodeSelectorOperators[e.Operator]
	if !ok {
		return false
	}
	req, err := labels.NewRequirement(e.Key, op, e.Values)
	return err == nil && req.Matches(set)
}

func toleratesAll(tolerations []corev1.Toleration, taints []corev1.Taint) bool {
	for i := range taints {
		t := &taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(t) }) {
			return false
		}
	}
	return true
}

// nodeSchedulingChanged passes node updates that can change which clusters select the node
// (labels, taints, cordoning); heartbeats and status updates are dropped.
func nodeSchedulingChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, okBefore := e.ObjectOld.(*corev1.Node)
		after, okAfter := e.ObjectNew.(*corev1.Node)
		if !okBefore || !okAfter {
			return true
		}
		return !equality.Semantic.DeepEqual(before.Labels, after.Labels) ||
			!equality.Semantic.DeepEqual(before.Spec.Taints, after.Spec.Taints) ||
			before.Spec.Unschedulable != after.Spec.Unschedulable ||
			before.DeletionTimestamp.IsZero() != after.DeletionTimestamp.IsZero()
	}}
}

// reconcileNodePlans keeps one CacheNodePlan per selected node: plans of new nodes are
// created empty (the allocation loop fills them), plans of nodes that left are deleted.
func (r *Reconciler) reconcileNodePlans(ctx context.Context, s *scope) error {
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	s.nodes = selectNodes(nodes.Items, v1.LabelStrings(s.cluster.Spec.NodeSelector), r.tolerations(s.cluster), r.podSettings(s.cluster).Affinity)
	plans, err := objects.ClusterPlans(ctx, r.Client, s.cluster.Namespace, s.cluster.Name)
	if err != nil {
		return err
	}
	selected := map[string]bool{}
	for _, n := range s.nodes {
		selected[n.Name] = true
	}
	var errs []error
	have := map[string]bool{}
	for i := range plans {
		p := &plans[i]
		if selected[p.Spec.NodeName] {
			have[p.Spec.NodeName] = true
			s.plans = append(s.plans, *p)
			continue
		}
		if err := r.Client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting CacheNodePlan %s of node %s that left the cluster: %w", p.Name, p.Spec.NodeName, err))
			continue
		}
		s.replan = true
	}
	for _, n := range s.nodes {
		if have[n.Name] {
			continue
		}
		plan, err := r.createPlan(ctx, s.cluster, n.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.plans = append(s.plans, *plan)
		s.replan = true
	}
	slices.SortFunc(s.plans, func(a, b v1.CacheNodePlan) int { return strings.Compare(a.Spec.NodeName, b.Spec.NodeName) })
	if objects.StaleRoutes(s.plans, objects.SidecarHosts(s.pods)) {
		s.replan = true
	}
	return errors.Join(errs...)
}

// createPlan creates node's empty plan, owned by the cluster.
func (r *Reconciler) createPlan(ctx context.Context, cluster *v1.CacheCluster, node string) (*v1.CacheNodePlan, error) {
	name, err := objects.PlanName(cluster.Name, node)
	if err != nil {
		return nil, err
	}
	plan := &v1.CacheNodePlan{}
	plan.Name, plan.Namespace = name, cluster.Namespace
	plan.Labels = objects.SidecarLabels(cluster.Name)
	plan.Spec = v1.CacheNodePlanSpec{
		ClusterName:       cluster.Name,
		NodeName:          node,
		Engine:            cluster.Spec.Engine,
		CredentialsSecret: objects.CredentialsSecretName(cluster.Name),
	}
	plan.Spec.SetPartitions(nil)
	if err := controllerutil.SetControllerReference(cluster, plan, r.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Client.Create(ctx, plan); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Created by an earlier reconcile the cache has not shown yet, or another
			// cluster's plan with the same name: reading it tells which.
			existing := &v1.CacheNodePlan{}
			if getErr := r.Client.Get(ctx, client.ObjectKeyFromObject(plan), existing); getErr != nil {
				return nil, fmt.Errorf("creating CacheNodePlan %s: %w", name, err)
			}
			if existing.Spec.ClusterName != cluster.Name {
				return nil, fmt.Errorf("CacheNodePlan %s for node %s already exists for cluster %s", name, node, existing.Spec.ClusterName)
			}
			return existing, nil
		}
		return nil, fmt.Errorf("creating CacheNodePlan %s: %w", name, err)
	}
	return plan, nil
}
