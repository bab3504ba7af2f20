// Package metricsauth sets up, on a real API server, who may read a metrics endpoint that
// authenticates bearer tokens (TokenReview) and authorizes get on the path
// (SubjectAccessReview), as the operator's and the sidecars' do, and reads it with a token.
package metricsauth

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// StartAPIServer starts a real API server (envtest, from KUBEBUILDER_ASSETS) that the test
// stops when it ends.
func StartAPIServer(t testing.TB) (*envtest.Environment, *rest.Config) {
	t.Helper()
	env := &envtest.Environment{}
	restConfig, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest (KUBEBUILDER_ASSETS): %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env, restConfig
}

// WaitReadable waits up to 30 seconds until get answers 200 with a body containing want: the
// endpoint starts with its server, and RBAC for a new binding settles within a moment.
func WaitReadable(t testing.TB, get func() (int, string, error), want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := get()
		if err == nil && code == http.StatusOK && strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("scraper: %d %.200s %v", code, body, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Tokens creates two ServiceAccounts in the namespace default: scraper, bound to a ClusterRole
// that may get /metrics (the chart's metrics-reader), and other, with no permission; it
// returns a token of each.
func Tokens(t testing.TB, kube kubernetes.Interface) (scraper, other string) {
	t.Helper()
	ctx := context.Background()
	token := func(name string) string {
		t.Helper()
		if _, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	scraper, other = token("scraper"), token("other")
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return scraper, other
}

// Get reads url with client, sending bearer as the token unless it is empty, and returns the
// status code and the body.
func Get(ctx context.Context, client *http.Client, url, bearer string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
