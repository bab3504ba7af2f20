package cachecluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

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

// images resolves the cluster's images against the operator's defaults. An empty default
// engine image, or one that is the operator's default sidecar image, is the sidecar image in
// force (which carries both engines): a cluster that sets only its sidecar image runs its
// engines from that image too, not from the operator's sidecar image with its own copied in.
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
		if engine == r.Images.Sidecar {
			engine = ""
		}
	}
	if engine == "" {
		engine = sidecar
	}
	return sidecar, engine
}

// derivedResources sizes the pod from the node capacity: memory request = limit (the node's
// cache memory plus the sidecar's bound, sidecarMemory; a cache must not be the first thing
// evicted), CPU from the node's request rate, and no CPU limit (throttling a proxy costs latency).
func derivedResources(capacity *v1.NodeCapacity, clientTLS bool) corev1.ResourceRequirements {
	memory := sidecarMemory(capacity, clientTLS)
	cpu := resource.NewMilliQuantity(capacity.OpsPerSecond*1000/opsPerCore, resource.DecimalSI)
	if cpu.Cmp(minCPU) < 0 {
		cpu = ptr.To(minCPU.DeepCopy())
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: memory, corev1.ResourceCPU: *cpu},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: memory},
	}
}

// sidecarResources lays the overrides over the derived resources, resource by resource. An
// override that would starve the engines (memory below the derived value) or that the API
// server would refuse (a request above its limit) is not applied: that resource keeps its
// derived request and limit, and the returned problems say why.
func sidecarResources(capacity *v1.NodeCapacity, clientTLS bool, overrides *v1.SidecarResources) (corev1.ResourceRequirements, []string) {
	derived := derivedResources(capacity, clientTLS)
	if overrides == nil {
		return derived, nil
	}
	out := *derived.DeepCopy()
	requests, errRequests := overrides.Requests.ResourceList()
	limits, errLimits := overrides.Limits.ResourceList()
	if err := errors.Join(errRequests, errLimits); err != nil {
		return derived, []string{"spec.sidecar.resources: " + err.Error()}
	}
	maps.Copy(out.Requests, requests)
	maps.Copy(out.Limits, limits)
	need := derived.Limits[corev1.ResourceMemory]
	var problems []string
	revert := func(name corev1.ResourceName, why string) {
		problems = append(problems, why)
		for _, list := range []struct{ out, derived corev1.ResourceList }{{out.Requests, derived.Requests}, {out.Limits, derived.Limits}} {
			if q, ok := list.derived[name]; ok {
				list.out[name] = q
			} else {
				delete(list.out, name)
			}
		}
	}
	for _, field := range []struct {
		path string
		list corev1.ResourceList
	}{{"requests", requests}, {"limits", limits}} {
		if q, ok := field.list[corev1.ResourceMemory]; ok && q.Cmp(need) < 0 {
			own := need.DeepCopy()
			own.Sub(capacity.Memory)
			revert(corev1.ResourceMemory, fmt.Sprintf("spec.sidecar.resources.%s.memory %s is below the %s the sidecar needs (capacity.memory %s plus the proxy's own bound %s, docs/sidecar-limits.md); the derived %s is used",
				field.path, q.String(), need.String(), capacity.Memory.String(), own.String(), need.String()))
		}
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		request, hasRequest := out.Requests[name]
		limit, hasLimit := out.Limits[name]
		if hasRequest && hasLimit && request.Cmp(limit) > 0 {
			revert(name, fmt.Sprintf("spec.sidecar.resources: the %s request %s is above its limit %s; the derived %s resources are used", name, request.String(), limit.String(), name))
		}
	}
	return out, problems
}

// The sidecar's shutdown within its pod's termination grace period: its default shutdown delay
// (5s) and drain timeout (10s), then saving the engines' data (sidecarSaveTimeout), with 5s
// to spare.
const sidecarShutdownBeforeSave = 20 * time.Second

// saveBytesPerSecond is the rate sidecarSaveTimeout assumes for saving a node's engines: one
// redis wrote 513 MiB of random values in 10.5 s (49 MiB/s) on a shared 2-core test machine;
// two thirds of that leave a margin (memcached's items saved at 79 MiB/s there).
const saveBytesPerSecond = 32 << 20

// sidecarSaveTimeout is how long the sidecar may take to save its engines: the node's cache
// memory at saveBytesPerSecond, and at least 40s.
func sidecarSaveTimeout(c *v1.CacheCluster) time.Duration {
	seconds := (c.Spec.Capacity.Memory.Value() + saveBytesPerSecond - 1) / saveBytesPerSecond
	return max(40*time.Second, time.Duration(seconds)*time.Second)
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
		// The engines die with the container: they save their data into the pod's emptyDir,
		// where the restarted container's engines load it.
		"--save-engines-on-exit",
		"--save-timeout=" + sidecarSaveTimeout(c).String(),
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

// The sidecar's readiness probe notices within readinessPeriodSeconds x readinessFailures
// (2 s) that a stopping sidecar turned not ready, so its Service endpoint goes well within the
// sidecar's 5 s --shutdown-delay, before it closes its listeners: reconnecting clients are
// then sent to the other sidecars instead of a closed port. Two failures, so one slow probe
// does not take a sidecar out of its Service.
const (
	readinessPeriodSeconds = 1
	readinessFailures      = 2
)

func httpProbe(path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(portMetrics), Scheme: corev1.URISchemeHTTP}},
		PeriodSeconds:    period,
		TimeoutSeconds:   2,
		FailureThreshold: failures,
		SuccessThreshold: 1,
	}
}

// SidecarDefaults are the operator's defaults for the sidecar pods (the Helm chart's sidecar
// values): what a CacheCluster's spec.sidecar can override, and tolerations added to every
// cluster's spec.tolerations (a taint all cache nodes carry, say).
type SidecarDefaults struct {
	v1.SidecarPodSettings
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// Validate checks the defaults as the API server checks a CacheCluster's fields.
func (d *SidecarDefaults) Validate() error {
	err := d.SidecarPodSettings.Validate()
	if errs := v1.TolerationErrors("tolerations", d.Tolerations); len(errs) > 0 {
		err = errors.Join(err, fmt.Errorf("sidecar settings: %s", strings.Join(errs, "; ")))
	}
	return err
}

// tolerations are the cluster's spec.tolerations and then the defaults' it does not repeat.
func (r *Reconciler) tolerations(c *v1.CacheCluster) []corev1.Toleration {
	out := v1.CoreTolerations(c.Spec.Tolerations)
	for _, t := range r.SidecarDefaults.Tolerations {
		if !slices.ContainsFunc(out, func(have corev1.Toleration) bool { return have.MatchToleration(&t) }) {
			out = append(out, t)
		}
	}
	return out
}

// podSettings are the cluster's spec.sidecar laid over the operator's defaults: pull secrets
// are added to the defaults', labels and annotations merged over them (the cluster's win),
// resources merged per resource, and every other field replaces the default when set.
func (r *Reconciler) podSettings(c *v1.CacheCluster) v1.SidecarPodSettings {
	defaults := r.SidecarDefaults.SidecarPodSettings
	out := *defaults.DeepCopy()
	own := c.Spec.Sidecar.DeepCopy()
	for _, secret := range own.ImagePullSecrets {
		if !slices.Contains(out.ImagePullSecrets, secret) {
			out.ImagePullSecrets = append(out.ImagePullSecrets, secret)
		}
	}
	out.PodLabels = mergeMaps(out.PodLabels, own.PodLabels)
	out.PodAnnotations = mergeMaps(out.PodAnnotations, own.PodAnnotations)
	if own.PriorityClassName != "" {
		out.PriorityClassName = own.PriorityClassName
	}
	if own.Affinity != nil {
		out.Affinity = own.Affinity
	}
	if own.PodSecurityContext != nil {
		out.PodSecurityContext = own.PodSecurityContext
	}
	if own.SecurityContext != nil {
		out.SecurityContext = own.SecurityContext
	}
	if r := own.Resources; r != nil {
		if out.Resources == nil {
			out.Resources = &v1.SidecarResources{}
		}
		if r.Requests != nil {
			if out.Resources.Requests == nil {
				out.Resources.Requests = &v1.SidecarRequests{}
			}
			overlay(&out.Resources.Requests.CPU, &out.Resources.Requests.Memory, r.Requests.CPU, r.Requests.Memory)
		}
		if r.Limits != nil {
			if out.Resources.Limits == nil {
				out.Resources.Limits = &v1.SidecarLimits{}
			}
			overlay(&out.Resources.Limits.CPU, &out.Resources.Limits.Memory, r.Limits.CPU, r.Limits.Memory)
		}
	}
	return out
}

// overlay sets cpu and memory to the overrides that are set.
func overlay(cpu *string, memory **resource.Quantity, overCPU string, overMemory *resource.Quantity) {
	if overCPU != "" {
		*cpu = overCPU
	}
	if overMemory != nil {
		*memory = overMemory
	}
}

func pullSecrets(refs []v1.SecretReference) []corev1.LocalObjectReference {
	var out []corev1.LocalObjectReference
	for _, ref := range refs {
		out = append(out, corev1.LocalObjectReference{Name: ref.Name})
	}
	return out
}

// mergeMaps returns base with over's entries added (over wins); nil when both are empty.
func mergeMaps[M ~map[string]V, V any](base, over M) M {
	if len(base)+len(over) == 0 {
		return nil
	}
	out := maps.Clone(base)
	if out == nil {
		out = M{}
	}
	maps.Copy(out, over)
	return out
}

// podLabels are the settings' labels with the operator's own over them.
func podLabels(settings map[string]v1.LabelValue, own map[string]string) map[string]string {
	out := make(map[string]string, len(settings)+len(own))
	for k, v := range settings {
		out[k] = string(v)
	}
	maps.Copy(out, own)
	return out
}

// restrictedContainer is the container security context unless spec.sidecar replaces it.
func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// restrictedPod is the pod security context unless spec.sidecar replaces it.
func restrictedPod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](sidecarUser),
		RunAsGroup:     ptr.To[int64](sidecarUser),
		FSGroup:        ptr.To[int64](sidecarUser),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// desiredDaemonSet is the sidecar DaemonSet of the cluster, and why some spec.sidecar
// resource overrides were not applied (none when all were).
func (r *Reconciler) desiredDaemonSet(c *v1.CacheCluster) (*appsv1.DaemonSet, []string) {
	sidecarImage, engineImage := r.images(c)
	pullPolicy := c.Spec.Images.PullPolicy
	if pullPolicy == "" {
		pullPolicy = corev1.PullIfNotPresent
	}
	settings := r.podSettings(c)
	labels := objects.SidecarLabels(c.Name)
	podLabels := podLabels(settings.PodLabels, labels)
	restricted, podSecurity := restrictedContainer(), restrictedPod()
	if settings.SecurityContext != nil {
		restricted = settings.SecurityContext
	}
	if settings.PodSecurityContext != nil {
		podSecurity = settings.PodSecurityContext
	}
	resources, problems := sidecarResources(&c.Spec.Capacity, c.Spec.TLS.Enabled, settings.Resources)
	emptyDir := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	ds := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: settings.PodAnnotations},
			Spec: corev1.PodSpec{
				ImagePullSecrets:              pullSecrets(settings.ImagePullSecrets),
				PriorityClassName:             settings.PriorityClassName,
				Affinity:                      settings.Affinity,
				ServiceAccountName:            objects.ServiceAccountName(c.Name),
				AutomountServiceAccountToken:  ptr.To(true),
				EnableServiceLinks:            ptr.To(false),
				NodeSelector:                  v1.LabelStrings(c.Spec.NodeSelector),
				Tolerations:                   r.tolerations(c),
				TerminationGracePeriodSeconds: ptr.To(int64((sidecarShutdownBeforeSave + sidecarSaveTimeout(c)) / time.Second)),
				SecurityContext:               podSecurity,
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
					Resources:       resources,
					ReadinessProbe:  httpProbe(readyPath, readinessPeriodSeconds, readinessFailures),
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
	if c.Spec.TLS.Enabled {
		mountClientTLS(&ds.Spec.Template.Spec, c)
	}
	mountPeerTLS(&ds.Spec.Template.Spec, c)
	if c.Spec.Monitoring.SidecarMetricsSecure() {
		mountMetricsTLS(&ds.Spec.Template.Spec, c)
	}
	if engineImage != sidecarImage {
		installSidecar(&ds.Spec.Template.Spec, sidecarImage, pullPolicy, restricted, emptyDir("tools"))
	}
	return ds, problems
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
	ds, problems := r.desiredDaemonSet(s.cluster)
	s.overridesRefused = problems
	if err := setUpdateStrategy(s.cluster, ds); err != nil {
		return err
	}
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
