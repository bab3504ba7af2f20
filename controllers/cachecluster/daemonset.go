package cachecluster

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/objects"
)

// The sidecar pod runs cmd/cache-sidecar inside the engine image, so every engine process it
// starts finds its binary and shared libraries where the engine image put them. The default
// engine image is the sidecar image itself (it carries both engines); a different engine
// image gets the static sidecar binary copied into a shared volume by an init container.
const (
	// sidecarBinary is the static binary in the sidecar image.
	sidecarBinary = "/cache-sidecar"
	// toolsDir is the shared volume the init container copies the sidecar into.
	toolsDir = "/opt/cacheqos/bin"
	// stateDir holds the engines' sockets, pidfiles and logs (an emptyDir: cache contents
	// are soft state, and the root filesystem is read-only).
	stateDir = "/run/cacheqos"
	// sidecarUser runs the pod: not root, and not the engine images' own users.
	sidecarUser = 65532

	portClient  = "client"
	portPeer    = "peer"
	portMetrics = "metrics"

	// Health endpoints on the metrics port: ready means the proxy serves and the node's
	// current plan is applied; live means the process is alive.
	readyPath = "/readyz"
	livePath  = "/healthz"
)

// sidecarOverhead is the memory the proxy, the agent and the miss-ratio trackers need on top
// of the engines, besides what the proxy's clients may make it hold (sidecarMemory).
var sidecarOverhead = resource.MustParse("256Mi")

// opsPerCore is the request rate one core of proxy is sized for.
const opsPerCore = 50000

// minCPU is the smallest CPU request of a sidecar.
var minCPU = resource.MustParse("100m")

// images resolves the cluster's images against the operator's defaults; an empty default
// engine image is the sidecar image, which carries both engines.
func (r *Reconciler) images(c *v1.CacheCluster) (sidecar, engine string) {
	sidecar, engine = c.Spec.Images.Sidecar, c.Spec.Images.Engine
	if sidecar == "" {
		sidecar = r.Images.Sidecar
	}
	if engine == "" {
		engine = r.Images.Redis
		if c.Spec.Engine == v1.EngineMemcached {
			engine = r.Images.Memcached
		}
	}
	if engine == "" {
		engine = sidecar
	}
	return sidecar, engine
}

// sidecarResources sizes the pod from the node capacity: memory request = limit (the node's
// cache memory plus the sidecar's bound, sidecarMemory; a cache must not be the first thing
// evicted), CPU from the node's request rate, and no CPU limit (throttling a proxy costs latency).
func sidecarResources(capacity *v1.NodeCapacity) corev1.ResourceRequirements {
	memory := sidecarMemory(capacity)
	cpu := resource.NewMilliQuantity(capacity.OpsPerSecond*1000/opsPerCore, resource.DecimalSI)
	if cpu.Cmp(minCPU) < 0 {
		cpu = ptr.To(minCPU.DeepCopy())
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: memory, corev1.ResourceCPU: *cpu},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: memory},
	}
}

// sidecarArgs are the sidecar's flags; it reads NODE_NAME and POD_NAMESPACE from the
// environment and follows the plan "<cluster>-<node>" (objects.PlanName). The miss-ratio
// curve settings are passed as the API server defaulted and validated them.
func sidecarArgs(c *v1.CacheCluster) []string {
	args := []string{
		"--engine=" + string(c.Spec.Engine),
		"--cluster-name=" + c.Name,
		"--state-root=" + stateDir,
		"--client-listen=:" + strconv.Itoa(int(objects.ClientPort(c.Spec.Engine))),
		"--peer-listen=:" + strconv.Itoa(objects.PeerPort),
		"--metrics-listen=:" + strconv.Itoa(objects.MetricsPort),
	}
	mrc := c.Spec.MissRatioCurve
	if mrc.SamplingRate != "" {
		args = append(args, "--mrc-sampling-rate="+mrc.SamplingRate)
	}
	if mrc.MaxTrackedKeys > 0 {
		args = append(args, "--mrc-max-tracked-keys="+strconv.Itoa(int(mrc.MaxTrackedKeys)))
	}
	if mrc.CurvePoints > 0 {
		args = append(args, "--mrc-curve-points="+strconv.Itoa(int(mrc.CurvePoints)))
	}
	return args
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

func httpProbe(path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(portMetrics), Scheme: corev1.URISchemeHTTP}},
		PeriodSeconds:    period,
		TimeoutSeconds:   2,
		FailureThreshold: failures,
		SuccessThreshold: 1,
	}
}

// desiredDaemonSet is the sidecar DaemonSet of the cluster.
func (r *Reconciler) desiredDaemonSet(c *v1.CacheCluster) *appsv1.DaemonSet {
	sidecarImage, engineImage := r.images(c)
	pullPolicy := c.Spec.Images.PullPolicy
	if pullPolicy == "" {
		pullPolicy = corev1.PullIfNotPresent
	}
	labels := objects.SidecarLabels(c.Name)
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	emptyDir := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	ds := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
			Type:          appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{
				ServiceAccountName:            objects.ServiceAccountName(c.Name),
				AutomountServiceAccountToken:  ptr.To(true),
				EnableServiceLinks:            ptr.To(false),
				NodeSelector:                  c.Spec.NodeSelector,
				Tolerations:                   c.Spec.Tolerations,
				TerminationGracePeriodSeconds: ptr.To[int64](60),
				SecurityContext: &corev1.PodSecurityContext{
					RunAsNonRoot:   ptr.To(true),
					RunAsUser:      ptr.To[int64](sidecarUser),
					RunAsGroup:     ptr.To[int64](sidecarUser),
					FSGroup:        ptr.To[int64](sidecarUser),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				Containers: []corev1.Container{{
					Name:            "sidecar",
					Image:           engineImage,
					ImagePullPolicy: pullPolicy,
					Command:         []string{sidecarBinary},
					Args:            sidecarArgs(c),
					Env: []corev1.EnvVar{
						fieldEnv("NODE_NAME", "spec.nodeName"),
						fieldEnv("POD_NAMESPACE", "metadata.namespace"),
						fieldEnv("POD_IP", "status.podIP"),
						// The proxy runs as many threads as the cores it was sized for (its CPU
						// request, rounded up): on a busy node, idle Go threads looking for work
						// take CPU from the engines (docs/sidecar-performance.md).
						{Name: "GOMAXPROCS", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
							ContainerName: "sidecar", Resource: "requests.cpu", Divisor: resource.MustParse("1")}}},
					},
					Ports: []corev1.ContainerPort{
						{Name: portClient, ContainerPort: objects.ClientPort(c.Spec.Engine), Protocol: corev1.ProtocolTCP},
						{Name: portPeer, ContainerPort: objects.PeerPort, Protocol: corev1.ProtocolTCP},
						{Name: portMetrics, ContainerPort: objects.MetricsPort, Protocol: corev1.ProtocolTCP},
					},
					Resources:       sidecarResources(&c.Spec.Capacity),
					ReadinessProbe:  httpProbe(readyPath, 5, 2),
					LivenessProbe:   httpProbe(livePath, 10, 6),
					SecurityContext: restricted,
					VolumeMounts: []corev1.VolumeMount{
						{Name: "state", MountPath: stateDir},
						{Name: "tmp", MountPath: "/tmp"},
					},
				}},
				Volumes: []corev1.Volume{emptyDir("state"), emptyDir("tmp")},
			},
		},
	}}
	if engineImage != sidecarImage {
		installSidecar(&ds.Spec.Template.Spec, sidecarImage, pullPolicy, restricted, emptyDir("tools"))
	}
	return ds
}

// installSidecar makes the pod copy the sidecar binary from the sidecar image into a shared
// volume and run it from there, inside the engine image.
func installSidecar(pod *corev1.PodSpec, sidecarImage string, pullPolicy corev1.PullPolicy, security *corev1.SecurityContext, tools corev1.Volume) {
	pod.InitContainers = []corev1.Container{{
		Name:            "install-sidecar",
		Image:           sidecarImage,
		ImagePullPolicy: pullPolicy,
		Command:         []string{"cp", sidecarBinary, toolsDir + sidecarBinary},
		SecurityContext: security,
		VolumeMounts:    []corev1.VolumeMount{{Name: tools.Name, MountPath: toolsDir}},
	}}
	sc := &pod.Containers[0]
	sc.Command = []string{toolsDir + sidecarBinary}
	sc.VolumeMounts = append(sc.VolumeMounts, corev1.VolumeMount{Name: tools.Name, MountPath: toolsDir, ReadOnly: true})
	pod.Volumes = append(pod.Volumes, tools)
}

// reconcileDaemonSet applies the sidecar DaemonSet and reads its pods for the status.
func (r *Reconciler) reconcileDaemonSet(ctx context.Context, s *scope) error {
	ds := r.desiredDaemonSet(s.cluster)
	if err := r.apply(ctx, s.cluster, ds, objects.DaemonSetName(s.cluster.Name)); err != nil {
		return err
	}
	s.daemonSet = ds
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(s.cluster.Namespace), client.MatchingLabels(objects.SidecarLabels(s.cluster.Name))); err != nil {
		return fmt.Errorf("listing sidecar pods: %w", err)
	}
	s.pods = pods.Items
	return nil
}
