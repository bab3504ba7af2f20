package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// secretWatch caches exactly one Secret, the one the plan names, in its own informer cache
// restricted to that name by a metadata.name field selector: the sidecar may read that
// Secret and nothing else, and RBAC can say so with resourceNames. The plan may name another
// Secret later, so the cache is replaced when the name changes.
type secretWatch struct {
	restConfig *rest.Config
	scheme     *runtime.Scheme
	namespace  string
	// onChange is called on every event of the watched Secret and on watch errors.
	onChange    func()
	syncTimeout time.Duration
	log         *slog.Logger

	mu    sync.Mutex
	name  string
	cache cache.Cache
	stop  context.CancelFunc
	done  chan struct{}

	// errMu guards watchErr apart from mu: the informer reports errors while close holds mu
	// waiting for it to stop.
	errMu    sync.Mutex
	watchErr error // the last list/watch error, cleared by the next event
}

func (w *secretWatch) setWatchErr(err error) {
	w.errMu.Lock()
	w.watchErr = err
	w.errMu.Unlock()
}

// errSecretNotSynced is returned while the Secret's cache has not completed its first list.
var errSecretNotSynced = errors.New("not readable yet")

// get returns the data of Secret name, starting (or replacing) the cache for it when needed.
// ctx ends the cache; a later call with a live ctx starts a new one.
func (w *secretWatch) get(ctx context.Context, name string) (map[string][]byte, error) {
	c, err := w.cacheFor(ctx, name)
	if err != nil {
		return nil, err
	}
	syncCtx, cancel := context.WithTimeout(ctx, w.syncTimeout)
	defer cancel()
	if !c.WaitForCacheSync(syncCtx) {
		w.errMu.Lock()
		watchErr := w.watchErr
		w.errMu.Unlock()
		if watchErr != nil {
			return nil, fmt.Errorf("%w: %w", errSecretNotSynced, watchErr)
		}
		return nil, errSecretNotSynced
	}
	var secret corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: w.namespace, Name: name}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errors.New("not found")
		}
		return nil, err
	}
	return secret.Data, nil
}

// cacheFor returns the running cache for name, replacing the one for any other name.
func (w *secretWatch) cacheFor(ctx context.Context, name string) (cache.Cache, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cache != nil && w.name == name {
		select {
		case <-w.done:
			// The cache ended with an earlier context; start afresh below.
		default:
			return w.cache, nil
		}
	}
	w.closeLocked()
	c, err := cache.New(w.restConfig, cache.Options{
		Scheme:            w.scheme,
		DefaultNamespaces: map[string]cache.Config{w.namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("metadata.name", name)},
		},
		DefaultWatchErrorHandler: func(_ *toolscache.Reflector, err error) {
			w.setWatchErr(err)
			w.log.Warn("watching the credentials Secret failed", "secret", name, "error", err)
			w.onChange()
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating a cache for Secret %s: %w", name, err)
	}
	informer, err := c.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		return nil, fmt.Errorf("creating an informer for Secret %s: %w", name, err)
	}
	notify := func() {
		w.setWatchErr(nil)
		w.onChange()
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return nil, fmt.Errorf("watching Secret %s: %w", name, err)
	}
	w.setWatchErr(nil)
	cacheCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Start(cacheCtx); err != nil {
			w.log.Error("the credentials Secret's cache stopped", "secret", name, "error", err)
		}
	}()
	w.name, w.cache, w.stop, w.done = name, c, stop, done
	return c, nil
}

// close stops the cache, if any.
func (w *secretWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closeLocked()
}

func (w *secretWatch) closeLocked() {
	if w.cache == nil {
		return
	}
	w.stop()
	<-w.done
	w.name, w.cache, w.stop, w.done = "", nil, nil, nil
}
