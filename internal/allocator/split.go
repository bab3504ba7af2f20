package allocator

import (
	"math"
	"sort"
)

// unlimited marks a receiver without a cap in splitProportional.
const unlimited int64 = -1

// splitProportional divides amount among receivers in proportion to weights, in whole units,
// none getting more than its room (unlimited for no cap). The parts sum to
// min(amount, total room) exactly: the fractional shares are floored and the units left over
// go to the largest remainders (ties to the lower index), the rounding the seed papers' worked
// examples use (Soft-QoS' 17/2/6). When the receivers that still have room all have weight 0 —
// every gain is zero, or the ones with a gain are full — they share equally, which is the
// defined fallback for Soft-QoS' and Maxperf's division by a zero sum.
func splitProportional(amount int64, weights []float64, room []int64) []int64 {
	n := len(weights)
	out := make([]int64, n)
	if amount <= 0 || n == 0 {
		return out
	}
	hasRoom := func(i int) bool { return room[i] != 0 }
	left := func(i int) float64 {
		if room[i] < 0 {
			return math.Inf(1)
		}
		return float64(room[i])
	}
	var capacity float64
	for i := range n {
		capacity += left(i)
	}
	target := amount
	if capacity < float64(amount) {
		target = int64(capacity)
	}
	share := make([]float64, n)
	active := make([]bool, n)
	for i := range n {
		active[i] = hasRoom(i)
	}
	remaining := float64(target)
	for {
		var wsum float64
		count := 0
		for i := range n {
			if active[i] {
				wsum += math.Max(0, weights[i])
				count++
			}
		}
		if count == 0 || remaining <= 0 {
			break
		}
		weight := func(i int) float64 {
			if wsum > 0 {
				return math.Max(0, weights[i]) / wsum
			}
			return 1 / float64(count)
		}
		capped := false
		for i := range n {
			if active[i] && weight(i) > 0 && remaining*weight(i) >= left(i) {
				share[i] = left(i)
				remaining -= left(i)
				active[i] = false
				capped = true
			}
		}
		if capped {
			continue
		}
		for i := range n {
			if active[i] {
				share[i] = remaining * weight(i)
			}
		}
		break
	}
	var sum int64
	for i := range n {
		out[i] = int64(math.Floor(share[i]))
		if room[i] >= 0 {
			out[i] = min(out[i], room[i])
		}
		sum += out[i]
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		fa, fb := share[order[a]]-math.Floor(share[order[a]]), share[order[b]]-math.Floor(share[order[b]])
		return fa > fb
	})
	// Float rounding on huge amounts can leave more than one unit per receiver: loop until done.
	for sum < target {
		progressed := false
		for _, i := range order {
			if sum == target {
				break
			}
			if room[i] < 0 || out[i] < room[i] {
				out[i]++
				sum++
				progressed = true
			}
		}
		if !progressed {
			break
		}
	}
	for sum > target {
		for j := len(order) - 1; j >= 0 && sum > target; j-- {
			if i := order[j]; out[i] > 0 {
				out[i]--
				sum--
			}
		}
	}
	return out
}
