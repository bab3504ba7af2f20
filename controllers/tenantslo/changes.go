package tenantslo

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// tenantStates says, for one object, what it means to each tenant it concerns (a value the
// tenant's status depends on), keyed by the tenant.
type tenantStates func(client.Object) map[types.NamespacedName]string

// enqueueChangedTenants enqueues, after delay, the tenants whose state in an object changed:
// on an update, those whose value differs between the old and the new object (present in one
// only included); on a create or delete, every tenant the object concerns. An object
// rewritten with the same meaning for a tenant does not wake that tenant; a tenant woken
// again while it waits is reconciled once.
func enqueueChangedTenants(delay time.Duration, states tenantStates) handler.EventHandler {
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], obj client.Object) {
		for key := range states(obj) {
			q.AddAfter(reconcile.Request{NamespacedName: key}, delay)
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			for _, key := range changedTenants(states(e.ObjectOld), states(e.ObjectNew)) {
				q.AddAfter(reconcile.Request{NamespacedName: key}, delay)
			}
		},
	}
}

// changedTenants lists the tenants whose value differs between before and after.
func changedTenants(before, after map[types.NamespacedName]string) []types.NamespacedName {
	var out []types.NamespacedName
	for key, v := range after {
		if w, ok := before[key]; !ok || w != v {
			out = append(out, key)
		}
	}
	for key := range before {
		if _, ok := after[key]; !ok {
			out = append(out, key)
		}
	}
	return out
}
