package cachecluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/util/retry"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/controllers/internal/testenv"
)

// TestMissRatioCurveSettingsReachTheSidecar: spec.missRatioCurve becomes the sidecar's flags,
// defaulted by the API server when left out and updated in place when changed; values out of
// range are refused by the API server with the field named.
func TestMissRatioCurveSettingsReachTheSidecar(t *testing.T) {
	ns := env.Namespace(t, "mrc")
	node(t, "mrc-a", map[string]string{"pool": "mrc"})
	c := newCluster(ns, "curves", "mrc")
	create(t, c)
	wantArgs := func(want ...string) func() error {
		return func() error {
			ds := &appsv1.DaemonSet{}
			if err := get(ds, ns, "curves-sidecar"); err != nil {
				return err
			}
			args := ds.Spec.Template.Spec.Containers[0].Args
			for _, w := range want {
				if !slices.Contains(args, w) {
					return fmt.Errorf("sidecar args %q lack %q", args, w)
				}
			}
			return nil
		}
	}
	testenv.Eventually(t, timeout, wantArgs("--mrc-sampling-rate="+v1.DefaultMRCSamplingRate,
		fmt.Sprintf("--mrc-max-tracked-keys=%d", v1.DefaultMRCMaxTrackedKeys), fmt.Sprintf("--mrc-curve-points=%d", v1.DefaultMRCCurvePoints)))

	// The operator writes the cluster's status meanwhile: read and update until no write of
	// its comes between.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := get(c, ns, "curves"); err != nil {
			return err
		}
		c.Spec.MissRatioCurve = v1.MissRatioCurveSettings{SamplingRate: "0.05", MaxTrackedKeys: 1000, CurvePoints: 8}
		return env.Client.Update(context.Background(), c)
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, wantArgs("--mrc-sampling-rate=0.05", "--mrc-max-tracked-keys=1000", "--mrc-curve-points=8"))

	for _, tc := range []struct {
		settings v1.MissRatioCurveSettings
		want     string
	}{
		{v1.MissRatioCurveSettings{SamplingRate: "1.5"}, "spec.missRatioCurve.samplingRate"},
		{v1.MissRatioCurveSettings{MaxTrackedKeys: 10}, "spec.missRatioCurve.maxTrackedKeys"},
		{v1.MissRatioCurveSettings{CurvePoints: 2}, "spec.missRatioCurve.curvePoints"},
		{v1.MissRatioCurveSettings{CurvePoints: 65}, "spec.missRatioCurve.curvePoints"},
	} {
		bad := newCluster(ns, "bad-curves", "mrc")
		bad.Spec.MissRatioCurve = tc.settings
		err := env.Client.Create(context.Background(), bad)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("creating with %+v: %v, want an error naming %s", tc.settings, err, tc.want)
		}
	}
}
