// Package ssa writes objects and status with server-side apply. Every writer (the two
// reconcilers and the allocation loop) is its own field manager and sends only the fields it
// owns, so they share objects — even one status conditions list — without overwriting each
// other. A Writer skips an apply only when it knows the apply changes nothing: the same
// configuration it applied last, to the object still at the resourceVersion that apply left.
// After anyone else's write it sends the apply, which may change nothing; callers that must
// not send one then (the allocation loop's tenant statuses) compare with the object as read.
package ssa

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Writer server-side applies objects and status as one field manager, and skips an apply
// that cannot change anything: it remembers, per object, the digest of the configuration it
// last applied and the resourceVersion the object had right after. The same configuration
// applied again to an object still at that resourceVersion is a no-op on the server, so the
// request is not sent; any change by anyone bumps the resourceVersion, and the next apply is
// sent. What a reconcile reads comes from the informer cache, which may lag: then the apply
// is sent and changes nothing, and the resourceVersion it returns is remembered.
type Writer struct {
	client client.Client
	owner  string
	// applied maps an object (and subresource) to the appliedAt it was last left at.
	applied *lru.Cache
}

// appliedAt is a configuration's digest and the resourceVersion the object had after it.
type appliedAt struct {
	digest, resourceVersion string
}

// writerCacheSize bounds a Writer's memory (about 200 bytes an entry); objects past it are
// forgotten least recently used first, which costs one no-op apply each when next written.
const writerCacheSize = 100_000

// NewWriter returns a Writer that writes through c as field manager owner.
func NewWriter(c client.Client, owner string) *Writer {
	return &Writer{client: c, owner: owner, applied: lru.New(writerCacheSize)}
}

// Apply server-side applies obj (forcing ownership of the fields it sends). obj is a typed
// object, or an unstructured one of a kind without Go types here, with the desired spec; its status, resourceVersion and managed fields are not sent,
// and nil fields are left out so they stay whatever the server defaulted. On success obj
// holds the object as the server has it, status included.
func (w *Writer) Apply(ctx context.Context, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, w.client.Scheme())
	if err != nil {
		return err
	}
	u, err := toUnstructured(obj)
	if err != nil {
		return fmt.Errorf("encoding %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	delete(u, "status")
	if md, ok := u["metadata"].(map[string]any); ok {
		delete(md, "resourceVersion")
		delete(md, "managedFields")
		delete(md, "uid")
		delete(md, "generation")
	}
	body := &unstructured.Unstructured{Object: u}
	body.SetGroupVersionKind(gvk)
	key := client.ObjectKeyFromObject(obj)
	current, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%s %s is not a client.Object", gvk.Kind, key)
	}
	if err := w.client.Get(ctx, key, current); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading %s %s: %w", gvk.Kind, key, err)
	}
	slot := w.slot(gvk, key, "")
	digest, unchanged := w.unchanged(slot, current.GetResourceVersion(), u)
	if unchanged {
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(current).Elem())
		return nil
	}
	if err := w.client.Patch(ctx, body, client.Apply, client.FieldOwner(w.owner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, key, err)
	}
	w.applied.Add(slot, appliedAt{digest: digest, resourceVersion: body.GetResourceVersion()})
	if u, ok := obj.(runtime.Unstructured); ok {
		u.SetUnstructuredContent(body.Object)
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(body.Object, obj); err != nil {
		return fmt.Errorf("decoding the applied %s %s: %w", gvk.Kind, key, err)
	}
	return nil
}

// ApplyStatus server-side applies status (a struct with only the status fields the owner
// owns, tagged like the API type's) to the status subresource of current, the object as
// last read.
func (w *Writer) ApplyStatus(ctx context.Context, current client.Object, status any) error {
	gvk, err := apiutil.GVKForObject(current, w.client.Scheme())
	if err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(current)
	st, err := toUnstructured(status)
	if err != nil {
		return fmt.Errorf("encoding the status of %s %s: %w", gvk.Kind, key, err)
	}
	slot := w.slot(gvk, key, "status")
	digest, unchanged := w.unchanged(slot, current.GetResourceVersion(), st)
	if unchanged {
		return nil
	}
	body := &unstructured.Unstructured{Object: map[string]any{"status": st}}
	body.SetGroupVersionKind(gvk)
	body.SetNamespace(key.Namespace)
	body.SetName(key.Name)
	if err := w.client.Status().Patch(ctx, body, client.Apply, client.FieldOwner(w.owner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying the status of %s %s: %w", gvk.Kind, key, err)
	}
	w.applied.Add(slot, appliedAt{digest: digest, resourceVersion: body.GetResourceVersion()})
	return nil
}

func (w *Writer) slot(gvk schema.GroupVersionKind, key client.ObjectKey, subresource string) string {
	return gvk.String() + "|" + key.String() + "|" + subresource
}

// unchanged returns the digest of configuration and whether it is what was applied last to
// the object at resourceVersion, which nothing changed since.
func (w *Writer) unchanged(slot, resourceVersion string, configuration map[string]any) (string, bool) {
	b, err := json.Marshal(configuration)
	if err != nil {
		// Cannot happen for a map decoded from JSON; apply rather than guess.
		return "", false
	}
	sum := sha256.Sum256(b)
	digest := hex.EncodeToString(sum[:])
	last, ok := w.applied.Get(slot)
	if !ok || resourceVersion == "" {
		return digest, false
	}
	at, _ := last.(appliedAt)
	return digest, at.digest == digest && at.resourceVersion == resourceVersion
}

// ApplyFields server-side applies fields (a struct or map with top-level keys such as
// metadata and spec, holding only what owner owns) to the existing object gvk/key.
func ApplyFields(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, key client.ObjectKey, fields any, owner string) error {
	u, err := toUnstructured(fields)
	if err != nil {
		return fmt.Errorf("encoding %s %s: %w", gvk.Kind, key, err)
	}
	body := &unstructured.Unstructured{Object: u}
	body.SetGroupVersionKind(gvk)
	body.SetNamespace(key.Namespace)
	body.SetName(key.Name)
	if err := c.Patch(ctx, body, client.Apply, client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, key, err)
	}
	return nil
}

// toUnstructured encodes v as JSON and decodes it into maps, dropping nulls (a zero
// metav1.Time encodes as null, which apply would read as "remove").
func toUnstructured(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	dropNulls(m)
	return m, nil
}

func dropNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			dropNulls(e)
		}
	case []any:
		for _, e := range t {
			dropNulls(e)
		}
	}
}

// OwnedConditions returns desired with the lastTransitionTime of each condition carried over
// from existing when its status did not change (and set to now when it did), and
// observedGeneration set to generation. The result holds only desired's types: applying it
// keeps the conditions other managers own.
func OwnedConditions(existing []metav1.Condition, generation int64, now metav1.Time, desired ...metav1.Condition) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(desired))
	for _, d := range desired {
		d.ObservedGeneration = generation
		d.LastTransitionTime = now
		if old := meta.FindStatusCondition(existing, d.Type); old != nil && old.Status == d.Status {
			d.LastTransitionTime = old.LastTransitionTime
		}
		out = append(out, d)
	}
	return out
}
