// Package ssa writes objects and status with server-side apply. Every writer (the two
// reconcilers and the allocation loop) is its own field manager and sends only the fields it
// owns, so they share objects — even one status conditions list — without overwriting each
// other, and an unchanged apply is a no-op on the server.
package ssa

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Apply server-side applies obj as owner (forcing ownership of the fields it sends). obj is
// a typed object with the desired spec; its status, resourceVersion and managed fields are
// not sent, and nil fields are left out so they stay whatever the server defaulted. On
// success obj holds the object as the server returned it, status included.
func Apply(ctx context.Context, c client.Client, obj client.Object, owner string) error {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
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
	if err := c.Patch(ctx, body, client.Apply, client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(body.Object, obj); err != nil {
		return fmt.Errorf("decoding the applied %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	return nil
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

// ApplyStatus server-side applies status (a struct with only the status fields owner owns,
// tagged like the API type's) to the status subresource of the object gvk/key.
func ApplyStatus(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, key client.ObjectKey, status any, owner string) error {
	st, err := toUnstructured(status)
	if err != nil {
		return fmt.Errorf("encoding the status of %s %s: %w", gvk.Kind, key, err)
	}
	body := &unstructured.Unstructured{Object: map[string]any{"status": st}}
	body.SetGroupVersionKind(gvk)
	body.SetNamespace(key.Namespace)
	body.SetName(key.Name)
	if err := c.Status().Patch(ctx, body, client.Apply, client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying the status of %s %s: %w", gvk.Kind, key, err)
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
