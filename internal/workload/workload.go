// Package workload holds the deterministic key-access generators shared by the simulator
// (cacheqos-sim) and the load generator (cacheqos-loadgen): a Spec plus a seed always yields
// the same sequence of accesses, so an evaluation run or a load test can be repeated exactly.
//
// # Shapes
//
//   - zipf: key of popularity rank r (1 = hottest) is drawn with probability proportional to
//     1/r^Skew over Keys keys; Skew 0 is uniform. Sampling is O(1) time and memory
//     (rejection-inversion, Hörmann and Derflinger 1996), so it serves 100k+ draws per second
//     for any key count.
//   - uniform: every one of Keys keys equally likely.
//   - loop: keys 0..Keys-1 in order, over and over. An LRU smaller than the loop misses every
//     access and one that holds it hits every access: the miss-ratio "cliff".
//   - scan: a sequential pass that never requests a key twice — key indices keep growing past
//     Keys — the one-hit wonders that pollute an LRU.
//   - phase: each Phase's spec runs for its Accesses, then the next, cycling forever. A phase
//     keeps its position when its turn comes again.
//   - trace: replays TraceFile (one "key,size" per line; blank lines and lines starting with '#'
//     are skipped; the last comma separates the key, so keys may contain commas), cycling.
//
// Key names are KeyPrefix followed by the decimal key index (rank - 1 for zipf); trace keys
// are KeyPrefix followed by the key from the file. A key's value size depends only on its name
// index and ValueSize, never on the seed, so generators with different seeds (several load
// generator workers) agree on every key's size.
//
// # Compact form (ParseSpec, Spec.String)
//
//	zipf:keys=100000,skew=0.99,value=100-4096
//	uniform:keys=5000,value=1024,prefix=t1:
//	loop:keys=20000,value=64-65536/log
//	scan:keys=1000000
//	phase:50000@zipf:keys=1000,skew=0.9;50000@loop:keys=3000;prefix=a/
//	trace:prefix=real:,file=traces/web.csv
//
// Parameters are comma-separated name=value pairs after "shape:". value= is a fixed byte count
// N, a uniform range MIN-MAX, or a log-uniform range MIN-MAX/log (most values small, a few
// large); it defaults to 100 bytes. prefix= sets KeyPrefix (it may contain ':' but not ',' or
// ';'). For phase, the phases are ';'-separated ACCESSES@SPEC items and an optional prefix=
// item prepends a prefix to every phase's keys. For trace, file= must come last: it takes the
// rest of the string, so file names may contain commas.
package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/cacheqos/cacheqos/internal/keyhash"
)

// Access is one request: a key and the byte size of its value.
type Access struct {
	Key  string
	Size int64 // value bytes
}

// Generator produces an endless stream of accesses. It is deterministic for a given Spec and
// seed, and not safe for concurrent use.
type Generator interface {
	Next() Access
}

// Shape names.
const (
	ShapeZipf    = "zipf"
	ShapeUniform = "uniform"
	ShapeLoop    = "loop"
	ShapeScan    = "scan"
	ShapePhase   = "phase"
	ShapeTrace   = "trace"
)

// Spec describes a workload. See the package documentation for each shape's meaning.
type Spec struct {
	Shape     string   // one of the Shape* constants
	Keys      int      // key universe (zipf, uniform, loop); length of one pass (scan)
	Skew      float64  // zipf exponent, >= 0
	ValueSize SizeDist // value bytes per key (not used by trace, whose file gives sizes)
	Phases    []Phase  // phase: run in turn, then repeat
	TraceFile string   // trace: one "key,size" per line
	KeyPrefix string   // prepended to every key name
}

// Phase is one stage of a "phase" workload: Spec runs for Accesses requests.
type Phase struct {
	Spec
	Accesses int
}

// SizeDist is the value-size distribution: fixed when Min == Max, otherwise uniform over
// [Min, Max], or log-uniform when LogUniform is set.
type SizeDist struct {
	Min, Max   int64
	LogUniform bool
}

// DefaultValueSize is the value size ParseSpec uses when the compact form has no value=.
const DefaultValueSize = 100

// Fixed returns the distribution whose every value has n bytes.
func Fixed(n int64) SizeDist { return SizeDist{Min: n, Max: n} }

// validate reports a clear error naming field (the path of the SizeDist in its Spec).
func (d SizeDist) validate(field string) error {
	switch {
	case d.Min < 1:
		return fmt.Errorf("%s.Min: value size must be at least 1 byte, got %d", field, d.Min)
	case d.Max < d.Min:
		return fmt.Errorf("%s.Max: %d is below Min %d", field, d.Max, d.Min)
	}
	return nil
}

// sizeOf returns the value size of the key with index idx: a hash of the index picks the
// point in the distribution, so it is the same in every generator.
func (d SizeDist) sizeOf(idx uint64) int64 {
	if d.Min == d.Max {
		return d.Min
	}
	u := float64(keyhash.Mix(idx+0x5851f42d4c957f2d)>>11) / (1 << 53) // uniform in [0,1)
	if d.LogUniform {
		lo, hi := math.Log(float64(d.Min)), math.Log(float64(d.Max)+1)
		return min(d.Max, int64(math.Exp(lo+u*(hi-lo))))
	}
	return d.Min + int64(u*float64(d.Max-d.Min+1))
}

// Mean returns the distribution's expected value size in bytes.
func (d SizeDist) Mean() float64 {
	switch {
	case d.Min == d.Max:
		return float64(d.Min)
	case d.LogUniform:
		lo, hi := math.Log(float64(d.Min)), math.Log(float64(d.Max)+1)
		return (float64(d.Max) + 1 - float64(d.Min)) / (hi - lo)
	default:
		return (float64(d.Min) + float64(d.Max)) / 2
	}
}

// Validate reports the first problem with s, naming the offending field.
func (s Spec) Validate() error { return s.validate("") }

func (s Spec) validate(path string) error {
	field := func(name string) string { return path + name }
	switch s.Shape {
	case ShapeZipf, ShapeUniform, ShapeLoop, ShapeScan:
		if s.Keys < 1 {
			return fmt.Errorf("%s: %s needs at least 1 key, got %d", field("Keys"), s.Shape, s.Keys)
		}
		if s.Shape == ShapeZipf && (s.Skew < 0 || math.IsNaN(s.Skew) || math.IsInf(s.Skew, 0)) {
			return fmt.Errorf("%s: zipf skew must be a finite number >= 0, got %v", field("Skew"), s.Skew)
		}
		return s.ValueSize.validate(field("ValueSize"))
	case ShapePhase:
		if len(s.Phases) == 0 {
			return fmt.Errorf("%s: phase needs at least one phase", field("Phases"))
		}
		for i, p := range s.Phases {
			at := fmt.Sprintf("%sPhases[%d].", path, i)
			if p.Accesses < 1 {
				return fmt.Errorf("%sAccesses: a phase needs at least 1 access, got %d", at, p.Accesses)
			}
			if p.Shape == ShapePhase {
				return fmt.Errorf("%sShape: phases cannot nest", at)
			}
			if err := p.validate(at); err != nil {
				return err
			}
		}
		return nil
	case ShapeTrace:
		if s.TraceFile == "" {
			return fmt.Errorf("%s: trace needs a file", field("TraceFile"))
		}
		return nil
	case "":
		return fmt.Errorf("%s: missing (one of zipf, uniform, loop, scan, phase, trace)", field("Shape"))
	default:
		return fmt.Errorf("%s: unknown shape %q (want zipf, uniform, loop, scan, phase or trace)", field("Shape"), s.Shape)
	}
}

// New returns a generator for spec whose random choices derive from seed.
func New(spec Spec, seed uint64) (Generator, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return build(spec, seed, "", "")
}

// build makes the generator of an already validated spec; outer is a prefix from an
// enclosing phase workload and path the spec's field path for errors.
func build(spec Spec, seed uint64, outer, path string) (Generator, error) {
	names := keyNamer{prefix: outer + spec.KeyPrefix, sizes: spec.ValueSize}
	rng := rand.New(rand.NewPCG(seed, 0x243f6a8885a308d3))
	switch spec.Shape {
	case ShapeZipf:
		return &zipfGen{names: names, rng: rng, z: newZipf(spec.Keys, spec.Skew)}, nil
	case ShapeUniform:
		return &uniformGen{names: names, rng: rng, keys: spec.Keys}, nil
	case ShapeLoop:
		return &loopGen{names: names, keys: uint64(spec.Keys)}, nil
	case ShapeScan:
		return &scanGen{names: names}, nil
	case ShapePhase:
		g := &phaseGen{gens: make([]Generator, len(spec.Phases)), lengths: make([]int, len(spec.Phases))}
		for i, p := range spec.Phases {
			// Each phase draws from its own stream so adding a phase never changes the others.
			sub, err := build(p.Spec, keyhash.Mix(seed+uint64(i)+1), names.prefix, fmt.Sprintf("%sPhases[%d].", path, i))
			if err != nil {
				return nil, err
			}
			g.gens[i], g.lengths[i] = sub, p.Accesses
		}
		return g, nil
	case ShapeTrace:
		accesses, err := ReadTraceFile(spec.TraceFile)
		if err != nil {
			return nil, fmt.Errorf("%sTraceFile: %w", path, err)
		}
		if names.prefix != "" {
			for i := range accesses {
				accesses[i].Key = names.prefix + accesses[i].Key
			}
		}
		return &traceGen{accesses: accesses}, nil
	}
	return nil, errors.New("workload: unreachable shape") // Validate accepted only the shapes above
}

// keyNamer turns key indices into accesses.
type keyNamer struct {
	prefix string
	sizes  SizeDist
}

func (n keyNamer) access(idx uint64) Access {
	buf := make([]byte, 0, len(n.prefix)+20)
	buf = append(buf, n.prefix...)
	buf = strconv.AppendUint(buf, idx, 10)
	return Access{Key: string(buf), Size: n.sizes.sizeOf(idx)}
}

type zipfGen struct {
	names keyNamer
	rng   *rand.Rand
	z     zipf
}

func (g *zipfGen) Next() Access { return g.names.access(g.z.rank(g.rng) - 1) }

type uniformGen struct {
	names keyNamer
	rng   *rand.Rand
	keys  int
}

func (g *uniformGen) Next() Access { return g.names.access(uint64(g.rng.IntN(g.keys))) }

type loopGen struct {
	names keyNamer
	keys  uint64
	next  uint64
}

func (g *loopGen) Next() Access {
	a := g.names.access(g.next)
	g.next = (g.next + 1) % g.keys
	return a
}

type scanGen struct {
	names keyNamer
	next  uint64
}

func (g *scanGen) Next() Access {
	a := g.names.access(g.next)
	g.next++
	return a
}

type phaseGen struct {
	gens    []Generator
	lengths []int
	current int
	used    int // accesses served by the current phase in this turn
}

func (g *phaseGen) Next() Access {
	if g.used == g.lengths[g.current] {
		g.current = (g.current + 1) % len(g.gens)
		g.used = 0
	}
	g.used++
	return g.gens[g.current].Next()
}

type traceGen struct {
	accesses []Access
	next     int
}

func (g *traceGen) Next() Access {
	a := g.accesses[g.next]
	g.next = (g.next + 1) % len(g.accesses)
	return a
}
