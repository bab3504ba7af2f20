package allocation

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/conditions"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
	"github.com/cacheqos/cacheqos/internal/promquery"
)

// Rate windows span this many scrape intervals, so every rate has several samples.
const windowScrapes = 4

// Sidecar series older than this many scrape intervals mean the sidecars are not scraped.
const staleScrapes = 3

// metricsResult is what measuring a cluster gave.
type metricsResult struct {
	// m is set when err is nil.
	m *promquery.Measurements
	// err says why there are no usable measurements; reason is the condition reason for it.
	err    error
	reason string
	window time.Duration
	// unmeasured lists the cluster's nodes without fresh samples (their tenants' traffic there
	// reads as zero).
	unmeasured []string
}

// scrapeInterval is how often Prometheus scrapes the cluster's sidecars, as the cluster's
// ServiceMonitor settings say.
func scrapeInterval(c *v1.CacheCluster) time.Duration {
	if i := c.Spec.Monitoring.ServiceMonitor.Interval; i != nil && i.Duration > 0 {
		return i.Duration
	}
	return v1.DefaultServiceMonitorInterval
}

// measure reads the cluster's sidecar metrics over the last window (the allocation interval,
// and at least windowScrapes scrape intervals) and checks they are fresh. A cluster with
// spec.monitoring.prometheusHTTPConfig queries with the client its Secret configures; one with
// its own prometheusURL and no Secret queries without credentials.
func (l *Loop) measure(ctx context.Context, in *inputs, st *clusterState) metricsResult {
	c := in.cluster
	scrape := scrapeInterval(c)
	r := metricsResult{window: max(c.Spec.Allocation.IntervalOrDefault(), windowScrapes*scrape)}
	url, httpClient := l.opts.DefaultPrometheusURL, l.opts.HTTPClient
	if own := c.Spec.Monitoring.PrometheusURL; own != "" && own != url {
		// The operator's credentials are for the operator's Prometheus only: a URL the
		// CacheCluster's author chose gets the credentials of its own Secret, or none.
		url, httpClient = own, nil
	}
	if url == "" {
		r.err = errors.New("no Prometheus to read from: set spec.monitoring.prometheusURL or the operator's --prometheus-url; plans use the tenants' specs only")
		r.reason = conditions.ReasonPrometheusNotConfigured
		return r
	}
	if ref := c.Spec.Monitoring.PrometheusHTTPConfig; ref != nil {
		var err error
		if httpClient, err = l.clusterHTTPClient(ctx, c, ref, st); err != nil {
			r.err, r.reason = err, conditions.ReasonPrometheusHTTPConfigInvalid
			return r
		}
	}
	client, err := promquery.New(url, httpClient)
	if err == nil {
		r.m, err = promquery.Measure(ctx, client, promquery.Scope{Nodes: in.nodes, Window: r.window})
	}
	if err != nil {
		r.m, r.err, r.reason = nil, err, v1.ReasonPrometheusUnavailable
		return r
	}
	staleAfter := staleScrapes * scrape
	newest := time.Duration(-1)
	for _, node := range in.nodes {
		age, ok := r.m.NodeSampleAge[node]
		if ok && (newest < 0 || age < newest) {
			newest = age
		}
		if !ok || age > staleAfter {
			r.unmeasured = append(r.unmeasured, node)
		}
	}
	switch {
	case newest < 0:
		r.err = fmt.Errorf("prometheus at %s has no %s series for nodes %s: is it scraping the sidecars?", url, promquery.MetricPlanGeneration, objects.ListNames(in.nodes))
	case len(r.unmeasured) == len(in.nodes):
		r.err = fmt.Errorf("the newest sidecar sample in Prometheus at %s is %v old (limit %v, %d scrape intervals)", url, newest.Round(time.Second), staleAfter, staleScrapes)
	}
	if r.err != nil {
		r.m, r.reason = nil, conditions.ReasonMetricsStale
	}
	slices.Sort(r.unmeasured)
	return r
}

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// clusterHTTPClient returns the HTTP client spec.monitoring.prometheusHTTPConfig configures.
// The Secret is read on every allocation, uncached (the operator caches only the Secrets it
// manages), so a changed Secret applies from the next allocation on; the client is rebuilt
// only when the Secret's resourceVersion changed, so connections are reused meanwhile.
func (l *Loop) clusterHTTPClient(ctx context.Context, c *v1.CacheCluster, ref *v1.PrometheusHTTPConfigSecret, st *clusterState) (*http.Client, error) {
	key := ref.KeyOrDefault()
	name := fmt.Sprintf("Secret %s/%s", c.Namespace, ref.SecretName)
	var secret corev1.Secret
	if err := l.secrets.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ref.SecretName}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("spec.monitoring.prometheusHTTPConfig: %s does not exist", name)
		}
		return nil, fmt.Errorf("spec.monitoring.prometheusHTTPConfig: reading %s: %w", name, err)
	}
	version := string(secret.UID) + "/" + secret.ResourceVersion + "/" + key
	if st.prometheus != nil && st.prometheus.version == version {
		return st.prometheus.client, nil
	}
	httpClient, err := promquery.NewHTTPClientFromSecret(secret.Data, key)
	if err != nil {
		return nil, fmt.Errorf("spec.monitoring.prometheusHTTPConfig: %s: %w", name, err)
	}
	if st.prometheus != nil {
		st.prometheus.client.CloseIdleConnections()
	}
	st.prometheus = &secretHTTPClient{version: version, client: httpClient}
	return httpClient, nil
}

// secretHTTPClient is a cluster's Prometheus HTTP client and the Secret version it was built from.
type secretHTTPClient struct {
	version string
	client  *http.Client
}
