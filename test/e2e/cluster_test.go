package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

const (
	readyTimeout = 90 * time.Second
	// A new Service's rules reach iptables about a second after its endpoints are ready.
	serviceTimeout = 20 * time.Second
	smokePort      = 8080
	redisPort      = 6379
)

func TestPodFromLocalImageBecomesReady(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newNamespace(t, "pod")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{smokeContainer()}},
	}
	if _, err := cluster.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, readyTimeout, "pod smoke Ready", func() (bool, error) {
		p, err := cluster.client.CoreV1().Pods(ns).Get(ctx, "smoke", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return podReady(p), nil
	})
	if body := httpGet(t, fmt.Sprintf("http://%s:%d/healthz", pod.Status.PodIP, smokePort)); body != "ok" {
		t.Errorf("/healthz of the pod answered %q, want ok", body)
	}
	if body := httpGet(t, fmt.Sprintf("http://%s:%d/", pod.Status.PodIP, smokePort)); body != "smoke" {
		t.Errorf("the pod says its name is %q, want smoke", body)
	}
}

func TestServiceReachableFromHost(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newNamespace(t, "service")
	labels := map[string]string{"app": "smoke"}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{smokeContainer()}},
			},
		},
	}
	if _, err := cluster.client.AppsV1().Deployments(ns).Create(ctx, deployment, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(smokePort)}},
		},
	}
	service, err := cluster.client.CoreV1().Services(ns).Create(ctx, service, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, readyTimeout, "deployment smoke with 2 available replicas", func() (bool, error) {
		d, err := cluster.client.AppsV1().Deployments(ns).Get(ctx, "smoke", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == 2, err
	})
	pods, err := cluster.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=smoke"})
	if err != nil {
		t.Fatal(err)
	}
	backends := map[string]bool{}
	for _, p := range pods.Items {
		if podReady(&p) {
			backends[p.Name] = false
		}
	}

	// Each answer names the pod that served it; keep asking until both backends have answered.
	// A new connection per request, so that kube-proxy's rules pick a backend each time.
	url := fmt.Sprintf("http://%s:80/", service.Spec.ClusterIP)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var lastErr error
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("answers by pod: %v; last error: %v", backends, lastErr)
		}
	})
	waitFor(t, serviceTimeout, "both backends answering through "+url, func() (bool, error) {
		body, err := get(client, url)
		if err != nil {
			lastErr = err // the rules are not programmed yet, or this connection was refused
			return false, nil
		}
		if _, ok := backends[body]; !ok {
			return false, fmt.Errorf("the Service answered %q, not one of its pods %v", body, backends)
		}
		backends[body] = true
		for _, seen := range backends {
			if !seen {
				return false, nil
			}
		}
		return true, nil
	})
}

func TestRedisDaemonSetAnswersPing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newNamespace(t, "redis")
	labels := map[string]string{"app": "redis"}
	daemonSet := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "redis"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:            "redis",
					Image:           cluster.images["redis"],
					ImagePullPolicy: corev1.PullNever,
					Ports:           []corev1.ContainerPort{{ContainerPort: redisPort}},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(redisPort)}},
						PeriodSeconds: 1,
					},
					Resources: smallResources("64Mi"),
				}}},
			},
		},
	}
	if _, err := cluster.client.AppsV1().DaemonSets(ns).Create(ctx, daemonSet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "redis"},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: redisPort}},
		},
	}
	service, err := cluster.client.CoreV1().Services(ns).Create(ctx, service, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, readyTimeout, "daemonset redis ready on every node", func() (bool, error) {
		ds, err := cluster.client.AppsV1().DaemonSets(ns).Get(ctx, "redis", metav1.GetOptions{})
		return err == nil && ds.Status.DesiredNumberScheduled > 0 && ds.Status.NumberReady == ds.Status.DesiredNumberScheduled, err
	})
	pods, err := cluster.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=redis"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		addr := net.JoinHostPort(p.Status.PodIP, fmt.Sprint(redisPort))
		if reply, err := redisPing(addr); err != nil || reply != "+PONG" {
			t.Errorf("PING to pod %s at %s: reply %q, error %v", p.Name, addr, reply, err)
		}
	}
	serviceAddr := net.JoinHostPort(service.Spec.ClusterIP, fmt.Sprint(redisPort))
	waitFor(t, serviceTimeout, "PONG through the Service at "+serviceAddr, func() (bool, error) {
		reply, err := redisPing(serviceAddr)
		return err == nil && reply == "+PONG", nil
	})
}

// ---------------------------------------------------------------------------------------------
// helpers

func smokeContainer() corev1.Container {
	return corev1.Container{
		Name:            "smoke",
		Image:           cluster.images["smoke"],
		ImagePullPolicy: corev1.PullNever,
		Ports:           []corev1.ContainerPort{{ContainerPort: smokePort}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromInt32(smokePort),
			}},
			PeriodSeconds: 1,
		},
		SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)},
		Resources:       smallResources("32Mi"),
	}
}

func smallResources(memoryLimit string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memoryLimit)},
	}
}

// newNamespace creates a namespace for one test and waits until pods can be created in it.
// When the test fails, its cleanup prints the namespace's pods and events. The namespace is
// deleted without waiting: the purge at the end removes everything anyway.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns, err := cluster.client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-" + prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if t.Failed() {
			describeNamespace(ctx, t, ns.Name)
		}
		_ = cluster.client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	})
	// The API server refuses pods until the controller manager has given the namespace its
	// default ServiceAccount.
	waitFor(t, readyTimeout, "default ServiceAccount of "+ns.Name, func() (bool, error) {
		_, err := cluster.client.CoreV1().ServiceAccounts(ns.Name).Get(t.Context(), "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	return ns.Name
}

func describeNamespace(ctx context.Context, t *testing.T, ns string) {
	if pods, err := cluster.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			t.Logf("pod %s: phase %s, ip %q, conditions %v", p.Name, p.Status.Phase, p.Status.PodIP, p.Status.Conditions)
			for _, c := range p.Status.ContainerStatuses {
				t.Logf("  container %s: ready %v, restarts %d, state %+v", c.Name, c.Ready, c.RestartCount, c.State)
			}
		}
	}
	if events, err := cluster.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range events.Items {
			t.Logf("event %s %s/%s: %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// waitFor polls check until it reports done, fails the test on a check error or when timeout
// passes.
func waitFor(t *testing.T, timeout time.Duration, what string, check func() (bool, error)) {
	t.Helper()
	start := time.Now()
	for {
		done, err := check()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if done {
			t.Logf("%s after %s", what, since(start))
			return
		}
		if time.Since(start) > timeout {
			t.Fatalf("no %s within %s", what, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func get(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	body, err := get(&http.Client{Timeout: 5 * time.Second}, url)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// redisPing sends PING in the RESP protocol and returns the reply line.
func redisPing(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}
