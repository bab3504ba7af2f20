package cachecluster

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

func TestSelectNodes(t *testing.T) {
	taint := func(key string, effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: key, Value: "x", Effect: effect}
	}
	n := func(name string, labels map[string]string, taints ...corev1.Taint) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	cache := map[string]string{"pool": "cache"}
	selector := map[string]v1.LabelValue{"pool": "cache"}
	deleting := n("deleting", cache)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	nodes := []corev1.Node{
		n("zeta", cache),
		n("alpha", cache),
		n("other-pool", map[string]string{"pool": "web"}),
		n("dedicated", cache, taint("dedicated", corev1.TaintEffectNoSchedule)),
		n("gpu", cache, taint("gpu", corev1.TaintEffectNoExecute)),
		n("prefers-not", cache, taint("busy", corev1.TaintEffectPreferNoSchedule)),
		n("starting", cache, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}),
		n("cordoned", cache, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}),
		n("unreachable", cache, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}),
		deleting,
	}
	required := func(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
	expr := func(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}
	}
	field := func(op corev1.NodeSelectorOperator, names ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: op, Values: names}}}
	}
	nodes = append(nodes, n("big", map[string]string{"pool": "cache", "mem": "512"}), n("small", map[string]string{"pool": "cache", "mem": "64"}))
	tests := []struct {
		name     string
		spec     v1.CacheClusterSpec
		affinity *corev1.Affinity
		want     []string
	}{
		{
			name:     "required node affinity narrows the selector",
			spec:     v1.CacheClusterSpec{NodeSelector: selector},
			affinity: required(expr("mem", corev1.NodeSelectorOpGt, "100")),
			want:     []string{"big"},
		},
		{
			name:     "terms are alternatives",
			spec:     v1.CacheClusterSpec{NodeSelector: selector},
			affinity: required(expr("mem", corev1.NodeSelectorOpLt, "100"), field(corev1.NodeSelectorOpIn, "alpha")),
			want:     []string{"alpha", "small"},
		},
		{
			name:     "NotIn and DoesNotExist",
			spec:     v1.CacheClusterSpec{NodeSelector: selector},
			affinity: required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "mem", Operator: corev1.NodeSelectorOpDoesNotExist}}, MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"zeta"}}}}),
			want:     []string{"alpha", "cordoned", "prefers-not", "starting", "unreachable"},
		},
		{
			name:     "an empty term matches nothing",
			spec:     v1.CacheClusterSpec{NodeSelector: selector},
			affinity: required(corev1.NodeSelectorTerm{}),
		},
		{
			name:     "preferred affinity and pod anti-affinity select nothing away",
			spec:     v1.CacheClusterSpec{NodeSelector: map[string]v1.LabelValue{"mem": "64"}},
			affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}, NodeAffinity: &corev1.NodeAffinity{}},
			want:     []string{"small"},
		},
		{
			name: "selector and condition taints",
			spec: v1.CacheClusterSpec{NodeSelector: selector},
			want: []string{"alpha", "big", "cordoned", "prefers-not", "small", "starting", "unreachable", "zeta"},
		},
		{
			name: "tolerations admit tainted nodes",
			spec: v1.CacheClusterSpec{NodeSelector: selector, Tolerations: []v1.Toleration{
				{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "x", Effect: corev1.TaintEffectNoSchedule},
			}},
			want: []string{"alpha", "big", "cordoned", "dedicated", "prefers-not", "small", "starting", "unreachable", "zeta"},
		},
		{
			name: "a toleration for another effect does not",
			spec: v1.CacheClusterSpec{NodeSelector: selector, Tolerations: []v1.Toleration{
				{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			}},
			want: []string{"alpha", "big", "cordoned", "prefers-not", "small", "starting", "unreachable", "zeta"},
		},
		{
			name: "empty selector takes every untainted node",
			spec: v1.CacheClusterSpec{},
			want: []string{"alpha", "big", "cordoned", "other-pool", "prefers-not", "small", "starting", "unreachable", "zeta"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, node := range selectNodes(nodes, v1.LabelStrings(tt.spec.NodeSelector), v1.CoreTolerations(tt.spec.Tolerations), tt.affinity) {
				got = append(got, node.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("selected %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDaemonSetImages: the sidecar runs straight from its own image when that is the engine
// image too (the default), and is copied into any other engine image first.
func TestDaemonSetImages(t *testing.T) {
	c := &v1.CacheCluster{Spec: v1.CacheClusterSpec{Engine: v1.EngineMemcached}}
	c.Name = "shared"
	tests := []struct {
		name            string
		defaults        Images
		sidecar, engine string
		wantImage       string
		wantCopied      bool
	}{
		{"the sidecar image carries the engines", Images{Sidecar: "s:1"}, "", "", "s:1", false},
		{"an operator default engine image", Images{Sidecar: "s:1", Redis: "r:1", Memcached: "m:1"}, "", "", "m:1", true},
		{"the cluster's engine image", Images{Sidecar: "s:1"}, "", "e:2", "e:2", true},
		{"the cluster's engine image is the sidecar's", Images{Sidecar: "s:1", Memcached: "m:1"}, "", "s:1", "s:1", false},
		// The chart's defaults: the engine images are the sidecar image. An upgrade that sets
		// only the cluster's sidecar image runs the engines from it, with nothing to copy.
		{"the cluster's sidecar image over the chart's defaults", Images{Sidecar: "s:1", Redis: "s:1", Memcached: "s:1"}, "s:2", "", "s:2", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.Spec.Images.Sidecar, c.Spec.Images.Engine = tt.sidecar, tt.engine
			ds, _ := (&Reconciler{Images: tt.defaults}).desiredDaemonSet(c)
			pod := ds.Spec.Template.Spec
			sc := pod.Containers[0]
			if sc.Image != tt.wantImage {
				t.Errorf("sidecar container image %s, want %s", sc.Image, tt.wantImage)
			}
			copied := len(pod.InitContainers) == 1 && pod.InitContainers[0].Image == "s:1" && sc.Command[0] == toolsDir+sidecarBinary
			if copied != tt.wantCopied || (!copied && (len(pod.InitContainers) != 0 || sc.Command[0] != sidecarBinary)) {
				t.Errorf("init containers %+v, command %v; want copied=%v", pod.InitContainers, sc.Command, tt.wantCopied)
			}
			if !slices.Contains(sc.Args, "--client-listen=:11211") {
				t.Errorf("args %v lack memcached's client port", sc.Args)
			}
		})
	}
}
