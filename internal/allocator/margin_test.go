package allocator

import (
	"math"
	"testing"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
)

// TestSafetyMarginIsOnTheCurvesNeed checks the optimal policy's safe size against the closed
// form on a linear curve (h = 0.1 per MiB up to 0.8 at 8 MiB) with a hit-ratio target of 0.3,
// which the curve meets at 3 MiB: the margin is the larger of 3% more memory and +0.01 hit
// ratio (3.09 MiB and 3.1 MiB: 3.1 MiB) above the curve's need, and a memory minimum above
// that need (the control loop's protection of the memory in force) is the safe size itself,
// not 3% more: before, a protected tenant grew by 3% every interval.
func TestSafetyMarginIsOnTheCurvesNeed(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name               string
		minBytes           int64
		wantNeed, wantSafe float64 // MiB
	}{
		{"no minimum: the margin over the curve's need", 0, 3, 3.1},
		{"minimum inside the margin", 3*mib + 50*1024, 3 + 50.0/1024, 3.1},
		{"minimum above the margin: kept as it is", 5 * mib, 5, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := snapshotOf([]planning.Node{memNode("n0", 8*mib)}, planning.Tenant{
				ID: "a/protected", Class: planning.ClassStrict, Objective: hitObjective(0.3),
				Memory: planning.Memory{MinBytes: c.minBytes}, MissRatioCurve: mrc(8*mib, 0.8),
			})
			p, err := newProblem(s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			n := p.needs[0]
			if math.Abs(float64(n.bytes)/mib-c.wantNeed) > 1e-5 || math.Abs(float64(n.safeBytes)/mib-c.wantSafe) > 1e-5 {
				t.Errorf("need %.4f MiB, safe %.4f MiB; want %.4f and %.4f", float64(n.bytes)/mib, float64(n.safeBytes)/mib, c.wantNeed, c.wantSafe)
			}
		})
	}
}
