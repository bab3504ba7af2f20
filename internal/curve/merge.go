package curve

import (
	"cmp"
	"slices"
)

// NodeCurve is a tenant's hit-ratio curve as one node measured it over its local partition
// sizes, and the rate of the tenant's requests that node serves.
type NodeCurve struct {
	Points            []Point
	RequestsPerSecond float64
}

// Merge combines a tenant's per-node curves into one curve over its total size. Keys are routed
// to nodes in proportion to their weights, so a node receiving share w of the tenant's
// requests sees w of its keys, and a local partition of size s behaves like a total size of
// s/w. The merged hit ratio at total size S is the request-weighted mean over nodes of each
// node's curve at S*w, read at the sizes of the node with the largest share, up to maxBytes
// and at most maxPoints points. Nodes whose curve cannot be fitted are left out; nil when none
// is left.
func Merge(nodes []NodeCurve, maxBytes float64, maxPoints int) []Point {
	type fitted struct {
		share float64
		curve *Curve
		sizes []int64
	}
	var curves []fitted
	var total float64
	for _, n := range nodes {
		c, err := Fit(n.Points)
		if len(n.Points) == 0 || err != nil {
			continue
		}
		sizes := make([]int64, len(n.Points))
		for i, p := range n.Points {
			sizes[i] = p.SizeBytes
		}
		curves = append(curves, fitted{share: n.RequestsPerSecond, curve: c, sizes: sizes})
		total += n.RequestsPerSecond
	}
	if len(curves) == 0 {
		return nil
	}
	for i := range curves {
		if total > 0 {
			curves[i].share /= total
		} else {
			curves[i].share = 1 / float64(len(curves))
		}
	}
	dominant := slices.MaxFunc(curves, func(a, b fitted) int { return cmp.Compare(a.share, b.share) })
	if dominant.share <= 0 {
		return nil
	}
	var out []Point
	for _, local := range dominant.sizes {
		size := float64(local) / dominant.share
		if size > maxBytes || len(out) == maxPoints {
			break
		}
		var hit, weight float64
		for _, c := range curves {
			if c.share > 0 {
				hit += c.share * c.curve.At(int64(size*c.share))
				weight += c.share
			}
		}
		point := Point{SizeBytes: max(1, int64(size+0.5)), HitRatio: min(1, max(0, hit/weight))}
		if len(out) > 0 && point.SizeBytes <= out[len(out)-1].SizeBytes {
			continue
		}
		out = append(out, point)
	}
	return out
}
