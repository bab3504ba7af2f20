package control

import (
	"math"
	"slices"

	"github.com/cacheqos/cacheqos/internal/allocator/planning"
	"github.com/cacheqos/cacheqos/internal/curve"
)

// Tuning of the mechanisms.
const (
	// smoothing is the weight of the newest settled observation in the averages (EWMA).
	smoothing = 0.5
	// maxCorrection bounds the damped correction factor: an averaged factor beyond it says
	// the curve is not a rescaling of the engine's behaviour at all.
	maxCorrection = 16
	// maxBoost bounds how far feedback raises a target.
	maxBoost = 0.05
	// protectSlack: a tenant whose observed hit ratio is this far above its target is
	// protected only at the memory its curve needs for the target (plus protectCushion),
	// not all it has: it met its objective with memory to spare.
	protectSlack   = 0.05
	protectCushion = 0.10
	// maxRelease is the most of its memory such a tenant's protection releases at once: a
	// curve read far below the measured size can promise hits the tenant does not get, and
	// a step this small is measured before the next.
	maxRelease = 0.25
	// topMargin keeps raised targets this far below the top of the tenant's curve.
	topMargin = 0.01
	// tightenStep tightens a latency or degradation target after each settled miss, up to
	// maxTighten.
	tightenStep = 0.03
	maxTighten  = 0.05
	// learnSamples is how many settled observations a strict tenant's curve needs before
	// the allocator may give it less than a fair share; a curve that still shows no reuse
	// at all (a loop slower than an interval looks like all misses until its first pass
	// ends) gets up to maxLearnSamples.
	learnSamples    = 2
	maxLearnSamples = 6
	// noReuse is the hit ratio under which a curve has seen no reuse yet.
	noReuse = 0.05
	// risingTop is the least rise of a curve's top over one interval that says its window
	// still holds first accesses of keys it has seen again since (see converging).
	risingTop = 0.05
	// relearnIntervals bounds how long after a move the curve from before it stands for the
	// new partition's.
	relearnIntervals = 3
	// reroutedShare is the share of a tenant's keys routed to other nodes above which its
	// partitions' curves count as restarted, as for a move to a new node.
	reroutedShare = 0.10
	// fillingRise is the least rise of the observed hit ratio over the interval before that
	// says a partition is still filling (a uniform tenant's fills as fast as its misses
	// insert, over several intervals); a larger rise is required when the reads' binomial
	// error is larger.
	fillingRise = 0.02
)

// tenantState is what the loop remembers about a tenant between intervals.
type tenantState struct {
	// placed is the tenant's allocation in force during the interval measured last; warm
	// reports that it was already in force the interval before, so the measurement is not
	// of caches that had just been emptied or moved.
	placed []planning.CurrentPartition
	seen   bool
	warm   bool
	// filling reports a warm interval whose hit ratio still rose clearly over the one before:
	// the partitions are still filling, so the measurement is not yet what the memory gives;
	// settled is warm and not filling.
	filling, settled bool
	// factor is the damped correction factor of the tenant's curve (0: none yet).
	factor float64
	// mean and variance of the observed hit ratio over settled intervals (EWMA).
	mean, variance float64
	samples        int
	// target is the tenant's own hit-ratio target (0: not a strict hit-ratio objective);
	// boost is the feedback added to it; raisedTo the target the allocator was fed.
	target, boost, raisedTo float64
	// tighten is the feedback for a latency or degradation objective: the share by which
	// the target the allocator sees is tightened.
	tighten float64
	// met and observed are last interval's judgement and hit ratio (observed < 0: none);
	// missedWarm reports a measured miss on the memory in force the interval before too.
	met, missedWarm bool
	observed        float64
	// curve is the sampled curve measured when the tenant last kept its nodes, and moved
	// reports that it holds memory on a node now where it held none the interval before, or
	// that more than reroutedShare of its keys now route to other nodes: the partitions
	// receiving them have not seen those keys (a new partition's tracker started empty), so
	// until they have seen the tenant's longer reuse distances their curves say those are
	// misses, and the tenant's merged curve is fed the held one.
	curve []planning.MissRatioPoint
	moved bool
	// sinceMove counts the intervals since the tenant last moved; held reports that its
	// merged curve is fed the one held from before the move: while it moved, and for up to
	// relearnIntervals after while the new partition's curve shows less reuse than the held
	// one (a loop shows none until one pass has been sampled, which can take intervals).
	sinceMove int
	held      bool
	// estimate is the estimate of its last interval's reads the tenant was last planned on
	// (converging); awaiting reports that memory the plan in force promised meets its
	// objective is still filling: its curve is then held, and the estimate, if the promise
	// was made on one, is what it is fed (nil: none since the promise was judged).
	estimate []planning.MissRatioPoint
	awaiting bool
	// last is the sampled curve measured last, and previous the one measured the interval
	// before it (nil when the curve was held or the tenant moved in between); age counts
	// the intervals the curves have measured since the tenant was placed or moved.
	last, previous []planning.MissRatioPoint
	age            int
	// estimatedTop is the top of the curve the tenant was planned on when that was its last
	// interval's estimate (converging), measuredTop its measured curve's (0: not estimated).
	estimatedTop, measuredTop float64
	// promised reports that the plan in force was predicted to meet the tenant's objective
	// (its own hit-ratio target, not the raised one): only then is a shortfall the curve's
	// error, for feedback to integrate, and not just memory the plan did not give; and a
	// shortfall measured on cold partitions is awaited rather than acted on (pending).
	promised bool
}

// protection is a memory minimum the loop added to a strict tenant that met its objective.
type protection struct {
	bytes    int64
	priority int32
	// learning: the tenant's curve is not learned yet; it is held at a fair share, pinned
	// to the nodes it holds only once it holds that much (before, it has few warm keys to
	// keep and may need other nodes to get its share).
	learning bool
	// outgrows: a learning tenant whose curve needs more memory for its target than the
	// nodes it holds have: pinned there, it could not be raised for its target until its
	// curve is learned.
	outgrows bool
	// pending: the plan in force gave the tenant memory predicted to meet its objective, and
	// it missed it while those partitions were still filling; it keeps that memory until a
	// settled measurement says whether it meets it.
	pending bool
}

// shaped is the snapshot as the mechanisms feed it to the allocator, in layers the planner
// can relax: damped (curves corrected by the damped factor), raised (damped, with the
// feedback targets), and the protections to add on top.
type shaped struct {
	damped, raised *planning.Snapshot
	anyRaised      bool
	protections    map[string]protection
	// unfit holds the strict tenants whose protection did not fit next to those of higher
	// priority, with the highest-priority tenant protected.
	unfit map[string]string
	// steady reports that every strict objective was met in the interval measured last: plans
	// then move at most SteadyChurnPercent of the fleet's memory.
	steady bool
}

// observe updates every tenant's state from the interval just measured and forgets tenants
// that left.
func (l *Loop) observe(in Input) {
	present := map[string]bool{}
	for i := range in.Snapshot.Tenants {
		t := &in.Snapshot.Tenants[i]
		present[t.ID] = true
		st := l.tenants[t.ID]
		if st == nil {
			st = &tenantState{}
			l.tenants[t.ID] = st
		}
		st.warm = st.seen && totalOf(t.Current.Partitions) > 0 && samePlacement(st.placed, t.Current.Partitions, l.cfg.MinChangeBytes)
		st.moved = st.seen && (!sameNodes(st.placed, t.Current.Partitions) || rerouted(st.placed, t.Current.Partitions) > reroutedShare)
		st.sinceMove++
		if st.moved {
			st.sinceMove = 0
		}
		m := in.Measured[t.ID]
		st.filling = st.warm && t.Observed.HitRatio != nil && st.observed >= 0 && rising(st.observed, *t.Observed.HitRatio, m.Reads)
		st.settled = st.warm && !st.filling
		// A tenant given memory for its objective keeps the curve that promised it until a
		// settled measurement judges the promise: the curves of partitions that just grew
		// are read while they fill, and one that dropped the promise would take the memory
		// away before it was ever measured full.
		st.awaiting = st.promised && !m.Met && !st.settled
		if !st.awaiting {
			st.estimate = nil
		}
		st.held = st.curve != nil && (st.moved || st.awaiting || st.sinceMove < relearnIntervals && topOf(t.MissRatioCurve) < topOf(st.curve)-noReuse)
		if !st.held && len(t.MissRatioCurve) > 0 {
			st.curve = slices.Clone(t.MissRatioCurve)
		}
		st.previous = nil
		if !st.held && !st.moved {
			st.previous = st.last
		}
		st.last = slices.Clone(t.MissRatioCurve)
		if st.moved || len(t.MissRatioCurve) == 0 {
			st.age = 0
		}
		if len(t.MissRatioCurve) > 0 {
			st.age++
		}
		st.placed, st.seen = slices.Clone(t.Current.Partitions), true
		st.target, st.raisedTo = 0, 0
		if t.Class == planning.ClassStrict && t.Objective != nil && t.Objective.HitRatio != nil {
			st.target = *t.Objective.HitRatio
		}
		st.met, st.observed = m.Met, -1
		st.missedWarm = !m.Met && m.Reads > 0 && st.settled
		if m.Met {
			st.boost /= 2
			st.tighten /= 2
		} else if st.settled && t.Class == planning.ClassStrict && t.Objective != nil && st.target == 0 && in.Measured[t.ID] != (Measurement{}) {
			st.tighten = math.Min(maxTighten, st.tighten+tightenStep)
		}
		if t.Observed.HitRatio == nil {
			continue
		}
		obs := *t.Observed.HitRatio
		st.observed = obs
		if !st.settled {
			continue
		}
		if st.samples == 0 {
			st.mean, st.variance = obs, 0
		} else {
			d := obs - st.mean
			st.mean += smoothing * d
			st.variance = (1 - smoothing) * (st.variance + smoothing*d*d)
		}
		st.samples++
		if st.target > 0 && obs < st.target && st.promised {
			st.boost = math.Min(maxBoost, st.boost+st.target-obs)
		}
	}
	for id := range l.tenants {
		if !present[id] {
			delete(l.tenants, id)
		}
	}
}

// rising reports that the hit ratio rose from before to now by more than fillingRise and
// by more than twice the binomial error of reads samples.
func rising(before, now float64, reads int64) bool {
	tol := fillingRise
	if reads > 0 {
		tol = math.Max(tol, 2*math.Sqrt(now*(1-now)/float64(reads)))
	}
	return now > before+tol
}

// uncertainty is one standard deviation of the observed hit ratio: the binomial error of
// reads samples and the interval-to-interval variance (0 before two settled intervals).
func (st *tenantState) uncertainty(reads int64) float64 {
	if st.samples < 2 {
		return 0
	}
	v := st.variance
	if reads > 0 {
		h := st.mean
		v += h * (1 - h) / float64(reads)
	}
	return math.Sqrt(v)
}

// samePlacement reports whether two allocations hold the same memory on the same nodes, up
// to floor bytes per node.
func samePlacement(a, b []planning.CurrentPartition, floor int64) bool {
	mem := func(parts []planning.CurrentPartition) map[string]int64 {
		out := map[string]int64{}
		for _, p := range parts {
			if p.MemoryBytes > 0 {
				out[p.Node] += p.MemoryBytes
			}
		}
		return out
	}
	ma, mb := mem(a), mem(b)
	if len(ma) != len(mb) {
		return false
	}
	for node, x := range ma {
		y, ok := mb[node]
		if !ok || abs(x-y) > floor {
			return false
		}
	}
	return true
}

// rerouted is the share of a tenant's keys that allocation b routes to a node that held fewer
// of them under a (routing weights follow memory): those keys are new to that node's
// partition and its curve.
func rerouted(a, b []planning.CurrentPartition) float64 {
	ta, tb := totalOf(a), totalOf(b)
	if ta <= 0 || tb <= 0 {
		return 0
	}
	share := map[string]float64{}
	for _, p := range a {
		share[p.Node] -= float64(p.MemoryBytes) / float64(ta)
	}
	for _, p := range b {
		share[p.Node] += float64(p.MemoryBytes) / float64(tb)
	}
	var moved float64
	for _, d := range share {
		moved += max(0, d)
	}
	return moved
}

// sameNodes reports whether every node b holds memory on already held memory in a.
func sameNodes(a, b []planning.CurrentPartition) bool {
	for _, p := range b {
		if p.MemoryBytes > 0 && !slices.ContainsFunc(a, func(q planning.CurrentPartition) bool { return q.Node == p.Node && q.MemoryBytes > 0 }) {
			return false
		}
	}
	return true
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func totalOf(parts []planning.CurrentPartition) int64 {
	var total int64
	for _, p := range parts {
		total += p.MemoryBytes
	}
	return total
}

// shape builds what the allocator is fed. Without shaping (policies other than optimal) every
// layer is the snapshot as measured.
func (l *Loop) shape(in Input) shaped {
	if !l.shaping() {
		return shaped{damped: in.Snapshot, raised: in.Snapshot}
	}
	mech := l.cfg.Mechanisms
	damped := cloneTenants(in.Snapshot)
	curves := make([]*curve.Curve, len(damped.Tenants))
	raw := make([]*curve.Curve, len(damped.Tenants))
	for i := range damped.Tenants {
		t := &damped.Tenants[i]
		st := l.tenants[t.ID]
		if st.held {
			t.MissRatioCurve = st.curve
			if st.awaiting && st.estimate != nil {
				t.MissRatioCurve = st.estimate
			}
		}
		st.estimatedTop, st.measuredTop = 0, 0
		if reach := reachFor(t, st); reach > 0 && st.previous != nil {
			if est, ok := converging(t.MissRatioCurve, st.previous, st.age, reach); ok {
				st.estimatedTop, st.measuredTop = topOf(est), topOf(t.MissRatioCurve)
				t.MissRatioCurve = est
				st.estimate = est
			}
		}
		c := fitted(t)
		raw[i] = c
		if mech.Damping && c != nil {
			c = l.damp(t, c)
		}
		curves[i] = c
	}
	sh := shaped{damped: damped, raised: damped, protections: map[string]protection{}}
	if mech.Feedback {
		sh.raised = cloneTenants(damped)
		for i := range sh.raised.Tenants {
			t := &sh.raised.Tenants[i]
			st := l.tenants[t.ID]
			if st.tighten > 0 && tightened(t, st.tighten) {
				sh.anyRaised = true
				continue
			}
			if st.target == 0 || !st.warm && st.boost == 0 {
				continue
			}
			raised := math.Min(1, st.target+st.boost+st.uncertainty(in.Measured[t.ID].Reads))
			if c := curves[i]; c != nil {
				// Past a cliff more memory buys nothing: never raise beyond what the curve
				// reaches short of its top.
				top, _ := c.Max()
				raised = math.Min(raised, math.Max(st.target, top-topMargin))
			}
			if raised > st.target+1e-6 {
				t.Objective = &planning.Objective{HitRatio: &raised}
				st.raisedTo = raised
				sh.anyRaised = true
			}
		}
	}
	if mech.Protect {
		sh.protections, sh.unfit = l.protections(damped, curves, raw)
	}
	sh.steady = mech.SteadyBudget && !in.SpecsChanged && l.allMet(damped)
	return sh
}

// allMet reports that every strict tenant of s met its objective in the interval measured
// last: none needs memory, and what moves now only trades warm keys for expected hits.
func (l *Loop) allMet(s *planning.Snapshot) bool {
	for i := range s.Tenants {
		t := &s.Tenants[i]
		if t.Class != planning.ClassStrict || t.Objective == nil {
			continue
		}
		if !l.tenants[t.ID].met {
			return false
		}
	}
	return true
}

// reachFor is the hit ratio tenant t's objective needs, for telling whether its curve still
// converges (0: none): its target, or for a mean-latency objective the hit ratio that meets
// it without queueing (the least it needs).
func reachFor(t *planning.Tenant, st *tenantState) float64 {
	if st.target > 0 {
		return st.target
	}
	o := t.Objective
	if t.Class != planning.ClassStrict || o == nil || o.LatencySeconds == nil || t.Observed.MissLatencySeconds <= 0 {
		return 0
	}
	h, ok := curve.HitRatioForLatency(*o.LatencySeconds, t.Observed.HitLatencySeconds, t.Observed.MissLatencySeconds, 0)
	if !ok {
		return 0
	}
	return h
}

// converging is, for the sampled curve pts of a strict tenant needing hit ratio target,
// measured the interval after prev and age intervals after the tenant was placed, the curve
// of the last interval's reads alone, while pts' top rises by risingTop or more and stays
// below the target, when that estimate reaches the target (false: use pts as measured).
// Such a window still holds the misses of first accesses to keys seen again since (a
// loop's first pass, a new tenant's first interval), which a partition holding the keys no
// longer has; the allocator would read the target as out of reach and give the memory
// that meets it only once the window has forgotten the first pass, intervals later, and
// that memory would still have to fill. The window halves every interval, so its misses at
// each size are the last interval's plus half the previous window's: with the windows'
// weights in intervals of reads (1, 1.5, 1.75, ... towards 2), the last interval's miss
// ratio is what is left when the halved previous window is taken out. A window that decays
// more slowly than once an interval (the sidecar's default: halved every minute, planned
// every 30 s) leaves more of the previous window in, so the estimate errs towards misses.
func converging(pts, prev []planning.MissRatioPoint, age int, target float64) ([]planning.MissRatioPoint, bool) {
	if age < 2 || topOf(pts) >= target+topMargin || topOf(pts) < topOf(prev)+risingTop {
		return nil, false
	}
	before := fitted(&planning.Tenant{MissRatioCurve: prev})
	if before == nil {
		return nil, false
	}
	w, wPrev := windowWeight(age), windowWeight(age-1)
	out := make([]planning.MissRatioPoint, len(pts))
	for i, p := range pts {
		missed := p.MissRatio*w - (1-before.At(p.SizeBytes))*wPrev/2
		out[i] = planning.MissRatioPoint{SizeBytes: p.SizeBytes, MissRatio: math.Min(1, math.Max(0, missed))}
	}
	if topOf(out) < target+topMargin {
		return nil, false
	}
	return out, true
}

// windowWeight is how many intervals' reads a curve's window holds after age intervals, the
// window halving every interval.
func windowWeight(age int) float64 {
	return 2 - math.Pow(2, 1-float64(age))
}

// tightened replaces a latency or degradation objective of t by one tighter by share.
func tightened(t *planning.Tenant, share float64) bool {
	o := t.Objective
	switch {
	case o == nil:
		return false
	case o.LatencySeconds != nil:
		v := *o.LatencySeconds * (1 - share)
		t.Objective = &planning.Objective{LatencySeconds: &v}
	case o.MaxDegradation != nil:
		v := math.Max(1, *o.MaxDegradation*(1-share))
		t.Objective = &planning.Objective{MaxDegradation: &v}
	default:
		return false
	}
	return true
}

// fitted is the tenant's sampled curve (nil without one).
func fitted(t *planning.Tenant) *curve.Curve {
	if len(t.MissRatioCurve) == 0 {
		return nil
	}
	pts := make([]curve.Point, len(t.MissRatioCurve))
	for i, m := range t.MissRatioCurve {
		pts[i] = curve.Point{SizeBytes: m.SizeBytes, HitRatio: 1 - m.MissRatio}
	}
	c, err := curve.Fit(pts)
	if err != nil {
		return nil
	}
	return c
}

// damp replaces the allocator's one-interval correction of tenant t's curve: the factor is
// averaged geometrically over settled intervals, and the snapshot carries the rescaled curve
// with an observation it already predicts, so the allocator corrects nothing more. An
// observation above anything the curve reaches is left to the allocator, which lifts the
// curve (no rescaling explains it).
func (l *Loop) damp(t *planning.Tenant, c *curve.Curve) *curve.Curve {
	st := l.tenants[t.ID]
	total := totalOf(t.Current.Partitions)
	if t.Observed.HitRatio == nil || total <= 0 {
		return c
	}
	at := curve.Point{SizeBytes: total, HitRatio: *t.Observed.HitRatio}
	f, ok := c.CorrectionFactor(at)
	if !ok {
		if math.Abs(c.At(total)-at.HitRatio) > 1e-9 && at.HitRatio > 0 {
			return c // above the curve: the allocator lifts it
		}
		f = 1
	}
	if st.settled {
		prev := st.factor
		if prev == 0 {
			prev = 1
		}
		next := f
		if f < prev {
			// The tenant does worse than the curve says: damped, as noise or a transient
			// would look the same. Doing better than the curve at a settled size is what the
			// memory in force really gives: taken as it is.
			next = math.Exp((1-smoothing)*math.Log(prev) + smoothing*math.Log(f))
		}
		st.factor = math.Min(maxCorrection, math.Max(1.0/maxCorrection, next))
	}
	if st.factor > 0 {
		c = c.Rescaled(st.factor)
	}
	pts := c.Points()[1:]
	t.MissRatioCurve = make([]planning.MissRatioPoint, len(pts))
	for i, p := range pts {
		t.MissRatioCurve[i] = planning.MissRatioPoint{SizeBytes: p.SizeBytes, MissRatio: 1 - p.HitRatio}
	}
	predicted := c.At(total)
	t.Observed.HitRatio = &predicted
	return c
}

// protections are the memory minimums that keep strict tenants that met their objective
// where they are: the memory in force, or for a tenant well above its hit-ratio target the
// memory its curve needs for the target plus a cushion, by the damped curve or the sampled one
// (raw) scaled to the observation, whichever needs more. When the minimums together exceed the
// cluster's memory, the lowest priorities lose their protection first.
func (l *Loop) protections(s *planning.Snapshot, curves, raw []*curve.Curve) (map[string]protection, map[string]string) {
	out, unfit := map[string]protection{}, map[string]string{}
	var capacity, mins int64
	for _, n := range s.Nodes {
		capacity += n.MemoryBytes
	}
	type cand struct {
		id       string
		extra    int64
		prio     int32
		learning bool
		pending  bool
		outgrows bool
	}
	var cands []cand
	fair := capacity / int64(max(1, len(s.Tenants)))
	for i := range s.Tenants {
		t := &s.Tenants[i]
		st := l.tenants[t.ID]
		total := totalOf(t.Current.Partitions)
		// A tenant whose memory the plan in force changed for its objective is measured on
		// cold partitions: a loop refills only after a whole pass, a uniform tenant over
		// several intervals. Judged by that, it would lose the memory before its first
		// settled interval and take turns with others at their cliffs. The same holds for a
		// tenant still learning that the plan gave more than a fair share: held at the fair
		// share, it would lose memory it had no time to fill, and never settle.
		pending := t.Class == planning.ClassStrict && t.Objective != nil && !st.met && !st.settled && st.promised && total > 0
		if t.Class == planning.ClassStrict && t.Objective != nil && !st.met && learning(st, curves[i]) && (!pending || total <= fair) {
			amount := fair
			if t.Memory.MaxBytes > 0 {
				amount = min(amount, t.Memory.MaxBytes)
			}
			mins += t.Memory.MinBytes
			if amount > t.Memory.MinBytes {
				cands = append(cands, cand{t.ID, amount - t.Memory.MinBytes, t.Priority, true, false, outgrowsNodes(s, t, st, curves[i])})
			}
			continue
		}
		// Changes under MinChangeBytes are noise: leaving them to the allocator keeps a
		// fully allocated cluster plannable (its sizes are discrete; minimums at exactly
		// what every tenant holds may not pack).
		amount := max(0, total-l.cfg.MinChangeBytes)
		if t.Class == planning.ClassStrict && st.met && st.target > 0 && curves[i] != nil && st.observed >= st.target+protectSlack {
			if need, ok := curves[i].MinSize(st.target + topMargin); ok {
				if raw[i] != nil {
					need = max(need, scaledNeed(raw[i], total, st.observed, st.target+topMargin))
				}
				// Released a step at a time, each step measured before the next.
				amount = min(amount, max(int64(float64(need)*(1+protectCushion)), int64(float64(total)*(1-maxRelease))))
			}
		}
		if t.Memory.MaxBytes > 0 {
			amount = min(amount, t.Memory.MaxBytes)
		}
		mins += t.Memory.MinBytes
		if t.Class != planning.ClassStrict || t.Objective == nil || !st.met && !pending || amount <= t.Memory.MinBytes {
			continue
		}
		cands = append(cands, cand{t.ID, amount - t.Memory.MinBytes, t.Priority, false, pending, false})
	}
	// Highest priority first, among equals a proven need, then memory awaiting its first warm
	// measurement, then a fair share held while learning; the ones that do not fit lose
	// their protection.
	slices.SortStableFunc(cands, func(a, b cand) int {
		if a.prio != b.prio {
			return int(b.prio) - int(a.prio)
		}
		if a.learning != b.learning {
			return boolOrder(a.learning, b.learning)
		}
		return boolOrder(a.pending, b.pending)
	})
	// first is the highest-priority tenant protected: whoever does not fit after it lost its
	// protection to it (and to those after it). One that does not fit with no protection
	// before it lost it to the minimums alone and names nobody.
	first := ""
	for _, c := range cands {
		if mins+c.extra > capacity {
			if first != "" && !c.learning {
				unfit[c.id] = first
			}
			continue
		}
		if first == "" {
			first = c.id
		}
		mins += c.extra
		i := slices.IndexFunc(s.Tenants, func(t planning.Tenant) bool { return t.ID == c.id })
		out[c.id] = protection{bytes: s.Tenants[i].Memory.MinBytes + c.extra, priority: c.prio, learning: c.learning, pending: c.pending, outgrows: c.outgrows}
	}
	return out, unfit
}

// outgrowsNodes reports whether a strict hit-ratio tenant's curve c needs more memory for its
// target than the nodes it holds memory on have in all.
func outgrowsNodes(s *planning.Snapshot, t *planning.Tenant, st *tenantState, c *curve.Curve) bool {
	if st.target == 0 || c == nil {
		return false
	}
	need, ok := c.MinSize(st.target + topMargin)
	if !ok {
		return false
	}
	var held int64
	for _, n := range s.Nodes {
		if slices.ContainsFunc(t.Current.Partitions, func(p planning.CurrentPartition) bool { return p.Node == n.Name && p.MemoryBytes > 0 }) {
			held += n.MemoryBytes
		}
	}
	return need > held
}

// learning reports whether a strict tenant's curve is still being learned: fewer than
// learnSamples settled observations, or fewer than maxLearnSamples while it shows no reuse.
func learning(st *tenantState, c *curve.Curve) bool {
	if st.samples < learnSamples {
		return true
	}
	top := 0.0
	if c != nil {
		top, _ = c.Max()
	}
	return top < noReuse && st.samples < maxLearnSamples
}

// boolOrder orders false before true.
func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// withProtections is s with the protections as memory minimums.
func withProtections(s *planning.Snapshot, prot map[string]protection) *planning.Snapshot {
	if len(prot) == 0 {
		return s
	}
	out := cloneTenants(s)
	for i := range out.Tenants {
		t := &out.Tenants[i]
		if p, ok := prot[t.ID]; ok {
			t.Memory.MinBytes = max(t.Memory.MinBytes, p.bytes)
			if !p.learning || totalOf(t.Current.Partitions) >= p.bytes && !p.outgrows {
				t.AllowedNodes = keptNodes(t)
			}
		}
	}
	return out
}

// keptNodes are the nodes a protected tenant may use: those it holds memory on, when they
// satisfy its allowed nodes and spread, so that its keys stay where they are warm (moving a
// partition to another node empties it as surely as shrinking it); else its allowed nodes.
func keptNodes(t *planning.Tenant) []string {
	var nodes []string
	for _, p := range t.Current.Partitions {
		if p.MemoryBytes > 0 && (len(t.AllowedNodes) == 0 || slices.Contains(t.AllowedNodes, p.Node)) {
			nodes = append(nodes, p.Node)
		}
	}
	if len(nodes) == 0 || len(nodes) < int(t.Spread.MinNodes) {
		return t.AllowedNodes
	}
	slices.Sort(nodes)
	return nodes
}

// cloneTenants copies the snapshot with its own tenant slice (fields the loop replaces are
// replaced, never modified in place).
func cloneTenants(s *planning.Snapshot) *planning.Snapshot {
	out := *s
	out.Tenants = slices.Clone(s.Tenants)
	return &out
}

// topOf is the highest hit ratio a sampled curve reaches (0 without points).
func topOf(pts []planning.MissRatioPoint) float64 {
	top := 0.0
	for _, p := range pts {
		top = max(top, 1-p.MissRatio)
	}
	return top
}

// scaledNeed is the least size at which curve c, scaled by the hit ratio observed at size held
// over what c predicts there, reaches target (held when none smaller does).
func scaledNeed(c *curve.Curve, held int64, observed, target float64) int64 {
	at := c.At(held)
	if at <= 0 || observed <= 0 {
		return held
	}
	need, ok := c.MinSize(target * at / observed)
	if !ok || need > held {
		return held
	}
	return need
}
