package cachecluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/internal/promquery"
)

// monitoringResult is what reconcileMonitoring found and did.
type monitoringResult struct {
	// requested kinds (ServiceMonitor, PrometheusRule) the spec enables.
	requested []string
	// missing requested kinds the API server does not serve (no prometheus-operator CRDs).
	missing []string
}

// monitoringObject is one optional prometheus-operator object of a cluster.
type monitoringObject struct {
	kind    string
	enabled bool
	// desired builds the object; empty returns an empty object of the kind, to delete.
	desired func() client.Object
	empty   func() client.Object
}

func (r *Reconciler) monitoringObjects(c *v1.CacheCluster) []monitoringObject {
	return []monitoringObject{
		{
			kind:    monitoringv1.ServiceMonitorsKind,
			enabled: c.Spec.Monitoring.ServiceMonitor.Enabled,
			desired: func() client.Object { return desiredServiceMonitor(c) },
			empty:   func() client.Object { return &monitoringv1.ServiceMonitor{} },
		},
		{
			kind:    monitoringv1.PrometheusRuleKind,
			enabled: c.Spec.Monitoring.PrometheusRule.Enabled,
			desired: func() client.Object { return desiredPrometheusRule(c) },
			empty:   func() client.Object { return &monitoringv1.PrometheusRule{} },
		},
	}
}

// servedAnswer is what discovery said about a kind, and when.
type servedAnswer struct {
	served bool
	at     time.Time
}

// discoveryRefresh is how long an answer of discovery about a monitoring kind is trusted. A
// CRD event (installed, established, removed) drops the answers at once; the refresh only
// covers a change the CRD watch missed.
const discoveryRefresh = 10 * time.Minute

// discoverySettle is how long after a monitoring CRD's event discovery's answers are not kept:
// the API server serves a new CRD's kind a moment after the CRD is created and established, so
// an answer from that moment may already be stale (the reconcile batchDelay later asks again).
const discoverySettle = 2 * time.Second

// served reports whether the API server serves an optional kind (prometheus-operator's,
// cert-manager's). The RESTMapper asks discovery again on every lookup of a kind it does not
// know, so without the CRDs every reconcile would cost a discovery request; the answer is kept
// until an optional CRD changes (optionalCRDChanged) or for discoveryRefresh.
func (r *Reconciler) served(gvk schema.GroupVersionKind) (bool, error) {
	r.servedMu.Lock()
	defer r.servedMu.Unlock()
	if a, ok := r.servedKinds[gvk]; ok && time.Since(a.at) < discoveryRefresh {
		return a.served, nil
	}
	_, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil && !meta.IsNoMatchError(err) {
		return false, fmt.Errorf("looking up %s in the API server's discovery: %w", gvk.Kind, err)
	}
	if r.servedKinds == nil {
		r.servedKinds = map[schema.GroupVersionKind]servedAnswer{}
	}
	if time.Since(r.crdChanged) >= discoverySettle {
		r.servedKinds[gvk] = servedAnswer{served: err == nil, at: time.Now()}
	}
	return err == nil, nil
}

// optionalCRDChanged forgets what discovery said about the optional kinds and enqueues every
// cluster, which may have asked for monitoring or TLS.
func (r *Reconciler) optionalCRDChanged(ctx context.Context, obj client.Object) []reconcile.Request {
	r.servedMu.Lock()
	r.servedKinds = nil
	r.crdChanged = time.Now()
	r.servedMu.Unlock()
	return r.allClusters(ctx, obj)
}

// reconcileMonitoring applies the enabled ServiceMonitor and PrometheusRule when their kinds
// are served, deletes disabled ones, and records requested kinds that are not served so the
// status can say so; a missing CRD is not an error.
func (r *Reconciler) reconcileMonitoring(ctx context.Context, s *scope) error {
	var errs []error
	for _, m := range r.monitoringObjects(s.cluster) {
		if m.enabled {
			s.monitoring.requested = append(s.monitoring.requested, m.kind)
		}
		ok, err := r.served(monitoringv1.SchemeGroupVersion.WithKind(m.kind))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			if m.enabled {
				s.monitoring.missing = append(s.monitoring.missing, m.kind)
			}
			continue
		}
		if err := r.watchOwned(m.kind, m.empty()); err != nil {
			errs = append(errs, err)
			continue
		}
		name := objects.MonitoringName(s.cluster.Name)
		if !m.enabled {
			obj := m.empty()
			obj.SetNamespace(s.cluster.Namespace)
			obj.SetName(name)
			if err := r.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil && !meta.IsNoMatchError(err) {
				errs = append(errs, fmt.Errorf("deleting the disabled %s %s: %w", m.kind, name, err))
			}
			continue
		}
		err = r.apply(ctx, s.cluster, m.desired(), name)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			// The CRD went away after discovery said it was there.
			s.monitoring.missing = append(s.monitoring.missing, m.kind)
			continue
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteMonitoring removes the cluster's monitoring objects of every served kind.
func (r *Reconciler) deleteMonitoring(ctx context.Context, c *v1.CacheCluster) error {
	for _, m := range r.monitoringObjects(c) {
		ok, err := r.served(monitoringv1.SchemeGroupVersion.WithKind(m.kind))
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		obj := m.empty()
		obj.SetNamespace(c.Namespace)
		obj.SetName(objects.MonitoringName(c.Name))
		if err := r.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil && !meta.IsNoMatchError(err) {
			return fmt.Errorf("deleting %s %s: %w", m.kind, obj.GetName(), err)
		}
	}
	return nil
}

// monitoringCondition says whether the requested monitoring objects are in place.
func monitoringCondition(m monitoringResult) metav1.Condition {
	switch {
	case len(m.missing) > 0:
		return metav1.Condition{
			Type: conditions.MonitoringReady, Status: metav1.ConditionFalse, Reason: conditions.ReasonPrometheusOperatorMissing,
			Message: fmt.Sprintf("%s requested in spec.monitoring, but the API server does not serve %s in %s; install the prometheus-operator CRDs (the operator checks again when they change)",
				strings.Join(m.missing, " and "), strings.Join(m.missing, ", "), monitoringv1.SchemeGroupVersion),
		}
	case len(m.requested) == 0:
		return metav1.Condition{Type: conditions.MonitoringReady, Status: metav1.ConditionTrue, Reason: conditions.ReasonMonitoringNotRequested,
			Message: "spec.monitoring enables neither a ServiceMonitor nor a PrometheusRule"}
	}
	return metav1.Condition{Type: conditions.MonitoringReady, Status: metav1.ConditionTrue, Reason: conditions.ReasonMonitoringCreated,
		Message: strings.Join(m.requested, " and ") + " in place"}
}

// serviceAccountTokenFile is where a pod, Prometheus' too, finds its ServiceAccount token.
const serviceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

func desiredServiceMonitor(c *v1.CacheCluster) *monitoringv1.ServiceMonitor {
	settings := c.Spec.Monitoring.ServiceMonitor
	interval := v1.DefaultServiceMonitorInterval
	if settings.Interval != nil {
		interval = settings.Interval.Duration
	}
	sm := &monitoringv1.ServiceMonitor{Spec: monitoringv1.ServiceMonitorSpec{
		Selector: metav1.LabelSelector{MatchLabels: objects.SidecarLabels(c.Name)},
		// Only the headless peer Service has the metrics port, so the selector matching the
		// client Service too scrapes every sidecar once.
		Endpoints: []monitoringv1.Endpoint{{
			Port:     portMetrics,
			Path:     "/metrics",
			Interval: monitoringv1.Duration(promquery.FormatDuration(interval)),
		}},
		NamespaceSelector: monitoringv1.NamespaceSelector{MatchNames: []string{c.Namespace}},
	}}
	if c.Spec.Monitoring.SidecarMetricsSecure() {
		// Prometheus verifies the sidecars' certificate against the cluster's CA (the bundle in
		// the metrics Secret) under the name it carries, and sends its own ServiceAccount's
		// token, which the sidecars have the API server authenticate and authorize.
		ep := &sm.Spec.Endpoints[0]
		ep.Scheme = "https"
		ep.BearerTokenFile = serviceAccountTokenFile //nolint:staticcheck // the Prometheus' own token, as the chart's operator ServiceMonitor
		ep.TLSConfig = &monitoringv1.TLSConfig{SafeTLSConfig: monitoringv1.SafeTLSConfig{
			CA: monitoringv1.SecretOrConfigMap{Secret: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: objects.MetricsTLSSecretName(c.Name)}, Key: objects.TLSCAKey}},
			ServerName: ptr.To(objects.MetricsServerName(c.Namespace, c.Name)),
		}}
	}
	sm.SetLabels(v1.LabelStrings(settings.Labels))
	return sm
}

func desiredPrometheusRule(c *v1.CacheCluster) *monitoringv1.PrometheusRule {
	scope := promquery.AlertScope{Namespace: c.Namespace, Job: objects.PeerServiceName(c.Name), Cluster: client.ObjectKeyFromObject(c).String()}
	var rules []monitoringv1.Rule
	for _, a := range promquery.Alerts(scope) {
		rules = append(rules, monitoringv1.Rule{
			Alert:       a.Name,
			Expr:        intstr.FromString(a.Expr),
			For:         ptrDuration(promquery.FormatDuration(a.For)),
			Labels:      map[string]string{"severity": a.Severity},
			Annotations: map[string]string{"summary": a.Summary, "description": a.Description},
		})
	}
	rule := &monitoringv1.PrometheusRule{Spec: monitoringv1.PrometheusRuleSpec{Groups: []monitoringv1.RuleGroup{{
		Name:  "cacheqos-" + c.Namespace + "-" + c.Name,
		Rules: rules,
	}}}}
	rule.SetLabels(v1.LabelStrings(c.Spec.Monitoring.PrometheusRule.Labels))
	return rule
}

func ptrDuration(d string) *monitoringv1.Duration {
	v := monitoringv1.Duration(d)
	return &v
}
