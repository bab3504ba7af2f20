package allocation

import (
	"fmt"
	"math"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
	"github.com/cacheqos/cacheqos/internal/promquery"
)

// curveTolerance is how far a curve's prediction may stray from the hit ratio its partitions
// achieve before it counts as off, when the sample is large enough that noise is smaller.
const curveTolerance = 0.05

// minCurveReads is the number of sampled reads below which a curve is not judged: with fewer,
// three standard deviations of the sampling noise exceed 0.15.
const minCurveReads = 100

// curveCondition says whether the tenant's miss-ratio curve, read at its partitions' current
// sizes, predicts the hit ratio they achieve (the sidecars' own comparison, over the curve's
// window). The allocator plans on the curve, so a tenant whose curve is off is planned on a
// wrong premise until the control loop's correction catches up; this makes that visible.
func curveCondition(tm *promquery.TenantMeasurement) metav1.Condition {
	c := metav1.Condition{Type: v1.ConditionCurveAccurate, Status: metav1.ConditionUnknown}
	var check promquery.CurveCheck
	ok := false
	if tm != nil {
		check, ok = tm.CurveCheck()
	}
	if !ok {
		c.Reason, c.Message = v1.ReasonAwaitingMetrics, "no partition of the tenant exported a curve with sampled reads yet"
		return c
	}
	if check.SampledReads < minCurveReads {
		c.Reason = v1.ReasonTooFewSamples
		c.Message = fmt.Sprintf("the curve rests on %.0f sampled reads, fewer than the %d needed to judge it", check.SampledReads, minCurveReads)
		return c
	}
	p := check.Predicted
	tolerance := math.Max(curveTolerance, 3*math.Sqrt(p*(1-p)/check.SampledReads))
	diff := check.Achieved - p
	c.Message = fmt.Sprintf("the curve predicts hit ratio %.3f at the partitions' current sizes and they achieved %.3f (difference %+.3f, tolerance %.3f) over %.0f sampled reads",
		p, check.Achieved, diff, tolerance, check.SampledReads)
	if math.Abs(diff) <= tolerance {
		c.Status, c.Reason = metav1.ConditionTrue, v1.ReasonCurveMatches
		return c
	}
	c.Status, c.Reason = metav1.ConditionFalse, v1.ReasonCurveOff
	c.Message += "; the control loop corrects the curve toward what is achieved before it plans (docs/control-loop.md)"
	return c
}
