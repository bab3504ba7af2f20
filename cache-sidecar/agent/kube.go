package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// KubeConfig says where the agent finds its plan in a cluster.
type KubeConfig struct {
	// RestConfig reaches the API server as the sidecar's service account.
	RestConfig *rest.Config
	// Namespace is the CacheCluster's namespace, where the plan and the credentials Secret are.
	Namespace string
	// PlanName is the node's CacheNodePlan.
	PlanName string
	// SecretSyncTimeout bounds the first read of a newly named credentials Secret (default 10s).
	SecretSyncTimeout time.Duration
}

// RunKubernetes applies the node's CacheNodePlan until ctx ends: on every change of the plan
// or its credentials Secret, on every engine state change and every RefreshInterval, one pass
// and at most one status patch. The sidecar's RBAC needs only: get, list, watch on
// cachenodeplans and patch on cachenodeplans/status (both may be limited to the plan's name),
// and get, list, watch on the credentials Secret (may be limited to its name), in Namespace.
func (a *Agent) RunKubernetes(ctx context.Context, kc KubeConfig) error {
	if kc.RestConfig == nil || kc.Namespace == "" || kc.PlanName == "" {
		return errors.New("agent: RunKubernetes needs a REST config, a namespace and a plan name")
	}
	if kc.SecretSyncTimeout <= 0 {
		kc.SecretSyncTimeout = 10 * time.Second
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := manager.New(kc.RestConfig, manager.Options{
		Scheme: scheme,
		Logger: logr.FromSlogHandler(a.log.Handler()),
		// The proxy serves the sidecar's metrics and health endpoints.
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{kc.Namespace: {}},
			ByObject: map[client.Object]cache.ByObject{
				&v1.CacheNodePlan{}: {Field: fields.OneTermEqualSelector("metadata.name", kc.PlanName)},
			},
		},
		// Secrets are read only through secretWatch's single-name cache; a Secret read through
		// this client must never start a namespace-wide informer.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		// One agent per process in production; tests start several.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("agent: creating the controller manager: %w", err)
	}

	planKey := types.NamespacedName{Namespace: kc.Namespace, Name: kc.PlanName}
	secretChanged := make(chan struct{}, 1)
	secrets := &secretWatch{
		restConfig:  kc.RestConfig,
		scheme:      scheme,
		namespace:   kc.Namespace,
		onChange:    func() { kick(secretChanged) },
		syncTimeout: kc.SecretSyncTimeout,
		log:         a.log,
	}
	defer secrets.close()
	rec := &planReconciler{agent: a, client: mgr.GetClient(), secrets: secrets}
	// Engine and Secret changes enqueue the plan like a change of the plan itself.
	triggers := source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-a.changes:
				case <-secretChanged:
				}
				q.Add(reconcile.Request{NamespacedName: planKey})
			}
		}()
		return nil
	})
	err = builder.ControllerManagedBy(mgr).
		Named("cachenodeplan-agent").
		// Status patches do not change metadata.generation, so the agent's own writes do not
		// wake it up again.
		For(&v1.CacheNodePlan{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(triggers).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(rec)
	if err != nil {
		return fmt.Errorf("agent: creating the plan controller: %w", err)
	}
	a.log.Info("following the node's plan", "namespace", kc.Namespace, "plan", kc.PlanName, "node", a.cfg.NodeName)
	return mgr.Start(ctx)
}

// kick makes a pending signal on ch, unless one is pending already.
func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

var errNoSecretNamed = errors.New("the plan names no credentials Secret, so no tenant can authenticate")

type planReconciler struct {
	agent   *Agent
	client  client.Client
	secrets *secretWatch
}

func (r *planReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var plan v1.CacheNodePlan
	if err := r.client.Get(ctx, req.NamespacedName, &plan); err != nil {
		if apierrors.IsNotFound(err) {
			// No plan (yet, or any more): leave the node as it is; only a plan says what to remove.
			r.agent.log.Info("the node's plan does not exist; leaving partitions as they are", "plan", req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	creds := Credentials{Secret: plan.Spec.CredentialsSecret}
	if creds.Secret == "" {
		creds.Err = errNoSecretNamed
	} else {
		creds.Data, creds.Err = r.secrets.get(ctx, creds.Secret)
	}
	status := r.agent.Apply(ctx, &plan, creds)
	if !equality.Semantic.DeepEqual(plan.Status, status) {
		base := plan.DeepCopy()
		plan.Status = status
		if err := r.client.Status().Patch(ctx, &plan, client.MergeFrom(base)); err != nil {
			return reconcile.Result{}, fmt.Errorf("patching the plan's status: %w", err)
		}
	}
	return reconcile.Result{RequeueAfter: r.agent.cfg.RefreshInterval}, nil
}
