package engine

import (
	"fmt"
	"math"
	"testing"
)

func TestAgeBucketIsMonotonicAndBounded(t *testing.T) {
	prev := -1
	for _, age := range []int64{-5, 0, 1, 63, 64, 65, 71, 72, 127, 128, 1000, 86400, 1 << 40, math.MaxInt64} {
		b := ageBucket(age)
		if b < prev || b < 0 || b >= ageBuckets {
			t.Fatalf("ageBucket(%d) = %d after %d (want non-decreasing, in [0,%d))", age, b, prev, ageBuckets)
		}
		prev = b
	}
	for age := int64(0); age < 1<<14; age++ {
		if ageBucket(age+1) < ageBucket(age) {
			t.Fatalf("ageBucket(%d) < ageBucket(%d)", age+1, age)
		}
	}
	if ageBucket(10) == ageBucket(11) {
		t.Error("ages under a minute must keep second resolution")
	}
}

// dumpItem builds a metadump item of class cls last accessed age seconds before now.
func dumpItem(key string, cls int, age int64, fetched bool) metadumpItem {
	return metadumpItem{key: []byte(key), lastAccess: testNow - age, fetched: fetched, class: cls, size: 1000}
}

const testNow = 1_800_000_000

// runPlan plans with items in crawler order and returns the keys pass two deletes.
func runPlan(items []metadumpItem, slabs slabStats, budgetPages int64) (deleted map[string]bool, plan *shrinkPlan) {
	h := newHotnessHistogram(testNow)
	for _, it := range items {
		h.add(it)
	}
	plan = h.plan(slabs, budgetPages)
	deleted = make(map[string]bool)
	for _, it := range items {
		if plan.shouldDelete(it) {
			deleted[string(it.key)] = true
		}
	}
	return deleted, plan
}

func TestPlanShrinkKeepsTheHottestThatFit(t *testing.T) {
	// One class, 100 chunks per page, 10 pages: 200 items read recently and 800 never read,
	// aged 1..800 s. Four pages keep 400: every read item and the 200 youngest unread ones.
	var items []metadumpItem
	for i := range 800 {
		items = append(items, dumpItem(fmt.Sprintf("cold%d", i), 5, int64(800-i), false))
	}
	for i := range 200 {
		items = append(items, dumpItem(fmt.Sprintf("hot%d", i), 5, 3000, true)) // read long ago still beats never read
	}
	slabs := slabStats{totalMalloced: 10 << 20, classes: map[int]slabClass{5: {chunksPerPage: 100, totalPages: 10}}}
	deleted, plan := runPlan(items, slabs, 4)
	if plan.deleteItems != 600 || len(deleted) != 600 {
		t.Fatalf("planned %d deletions, pass two deleted %d; want 600", plan.deleteItems, len(deleted))
	}
	for i := range 200 {
		if deleted[fmt.Sprintf("hot%d", i)] {
			t.Fatalf("hot%d deleted", i)
		}
	}
	for i := range 800 {
		if young := i >= 600; deleted[fmt.Sprintf("cold%d", i)] == young {
			t.Fatalf("cold%d (age %d): deleted=%v", i, 800-i, !young)
		}
	}
}

func TestPlanShrinkSplitsABucketInCrawlerOrder(t *testing.T) {
	// 300 equally hot items, room for 250: the first 50 the crawler shows (its cold end) go.
	var items []metadumpItem
	for i := range 300 {
		items = append(items, dumpItem(fmt.Sprintf("k%03d", i), 1, 2, false))
	}
	slabs := slabStats{classes: map[int]slabClass{1: {chunksPerPage: 50, totalPages: 6}}}
	deleted, _ := runPlan(items, slabs, 5)
	if len(deleted) != 50 {
		t.Fatalf("deleted %d, want 50", len(deleted))
	}
	for i := range 50 {
		if !deleted[fmt.Sprintf("k%03d", i)] {
			t.Fatalf("k%03d kept, want the first 50 deleted", i)
		}
	}
}

func TestPlanShrinkSharesTheBudgetAcrossClasses(t *testing.T) {
	tests := []struct {
		name        string
		budget      int64
		wantDeleted map[int]int // per class
	}{
		// Each class's first page is spent already; the three more pages go to the hotter
		// items, which are class 2's, and class 1 keeps what fits in its first page.
		{"budget of five pages", 5, map[int]int{1: 100, 2: 0}},
		{"budget of four pages", 4, map[int]int{1: 100, 2: 100}},
		// Below one page per class: memcached cannot free a class's last page, so each keeps
		// what fits in it.
		{"budget below the classes' count", 1, map[int]int{1: 100, 2: 300}},
		{"budget for everything", 6, map[int]int{1: 0, 2: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var items []metadumpItem
			for i := range 200 {
				items = append(items, dumpItem(fmt.Sprintf("one%d", i), 1, 100, false))
				items = append(items, dumpItem(fmt.Sprintf("two%d", i), 2, 10, false))
				items = append(items, dumpItem(fmt.Sprintf("two-b%d", i), 2, 11, false))
			}
			slabs := slabStats{classes: map[int]slabClass{
				1: {chunksPerPage: 100, totalPages: 2},
				2: {chunksPerPage: 100, totalPages: 4},
			}}
			deleted, _ := runPlan(items, slabs, tt.budget)
			got := map[int]int{1: 0, 2: 0}
			for key := range deleted {
				if key[:3] == "one" {
					got[1]++
				} else {
					got[2]++
				}
			}
			for cls, want := range tt.wantDeleted {
				if got[cls] != want {
					t.Errorf("class %d: deleted %d, want %d", cls, got[cls], want)
				}
			}
		})
	}
}

func TestPlanShrinkKeepsItemsOfUnlistedClasses(t *testing.T) {
	items := []metadumpItem{dumpItem("a", 7, 1000, false), dumpItem("b", 7, 1000, false)}
	deleted, plan := runPlan(items, slabStats{classes: map[int]slabClass{}}, 0)
	if len(deleted) != 0 || plan.deleteItems != 0 {
		t.Fatalf("deleted %v from a class stats slabs did not list", deleted)
	}
}
