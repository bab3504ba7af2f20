package cachecluster

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// TenantHashes is tenantHashes for the package's tests, reading passwords through c.
func TenantHashes(ctx context.Context, c client.Client, tenants []v1.TenantSLO, old, data map[string][]byte, limit int) ([]string, error) {
	return (&Reconciler{Client: c}).tenantHashes(ctx, tenants, old, data, limit)
}

// AnnotationTemplateHash is annotationTemplateHash for the package's tests.
const AnnotationTemplateHash = annotationTemplateHash
