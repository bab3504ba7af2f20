package engine

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Shrinking memcached.
//
// memcached's limit bounds the slab pages it holds (total_malloced), and a lower limit only
// stops it from taking new pages: items already stored stay. shrinkMemcached brings it down:
//
//  1. Pass one streams "lru_crawler metadump all" into a histogram of item counts per slab
//     class and hotness rank (hotnessHistogram.plan), and decides per class how many of the hottest items
//     fit in the page budget (limit / page size).
//  2. Pass two streams the metadump again and deletes (meta delete) every item colder than its
//     class's cutoff, so only the memory holding the kept items stays in use.
//  3. Whole pages' worth of free chunks are then moved to the global page pool with
//     "slabs reassign <class> 0"; memcached rescues the items still on a moved page into free
//     chunks and frees the page, since it is above its limit.
//
// Hotness approximates memcached's own segmented LRU, where items read since they were stored
// are promoted out of the cold segment: an item that was fetched ranks hotter than one that
// was not, and within each group a more recent last access ranks hotter. Ages are bucketed
// (exact seconds for the first minute, then eight buckets per doubling), so memory stays
// bounded by classes x buckets however many items the cache holds.
//
// Every slab class that holds items keeps at least one page: memcached cannot give a class's
// last page back. With values spread over more classes than the limit has pages,
// total_malloced therefore stays above the limit, while the item bytes are still cut to fit.

const (
	exactAgeBuckets  = 64
	ageBuckets       = exactAgeBuckets + (63-6)*8 // ages up to 2^63 s, eight buckets per doubling
	hotnessRanks     = 2 * ageBuckets
	maxShrinkRounds  = 3
	deleteBatchLines = 512
)

// ageBucket maps an age in seconds to a bucket, monotonically.
func ageBucket(age int64) int {
	if age < exactAgeBuckets {
		return int(max(age, 0))
	}
	e := bits.Len64(uint64(age)) // 7..63
	mantissa := int(age>>(e-4)) & 7
	return exactAgeBuckets + (e-7)*8 + mantissa
}

// hotnessRank orders items from hottest (0) to coldest, relative to the server time now.
func hotnessRank(item metadumpItem, now int64) int {
	r := ageBucket(now - item.lastAccess)
	if !item.fetched {
		r += ageBuckets
	}
	return r
}

// slabClass is one class of "stats slabs".
type slabClass struct {
	chunksPerPage int64
	totalPages    int64
	freeChunks    int64
}

type slabStats struct {
	classes       map[int]slabClass
	totalMalloced int64
}

// parseSlabStats reads "stats slabs" fields ("<class>:<name>" per class, plus totals).
func parseSlabStats(fields map[string]string) (slabStats, error) {
	s := slabStats{classes: make(map[int]slabClass)}
	var err error
	if s.totalMalloced, err = statInt(fields, "total_malloced"); err != nil {
		return s, err
	}
	for name := range fields {
		idText, stat, ok := strings.Cut(name, ":")
		if !ok || stat != "chunks_per_page" {
			continue
		}
		id, err := strconv.Atoi(idText)
		if err != nil || id <= 0 {
			return s, protocolErrorf("stats slabs: bad class in %q", name)
		}
		var c slabClass
		for _, f := range []struct {
			name string
			dst  *int64
		}{{"chunks_per_page", &c.chunksPerPage}, {"total_pages", &c.totalPages}, {"free_chunks", &c.freeChunks}} {
			if *f.dst, err = statInt(fields, idText+":"+f.name); err != nil {
				return s, err
			}
		}
		if c.chunksPerPage <= 0 {
			return s, protocolErrorf("stats slabs: class %d has %d chunks per page", id, c.chunksPerPage)
		}
		s.classes[id] = c
	}
	return s, nil
}

func readSlabStats(c memcacheClient) (slabStats, error) {
	fields, err := c.stats("slabs")
	if err != nil {
		return slabStats{}, err
	}
	return parseSlabStats(fields)
}

// hotnessHistogram counts items per slab class and hotness rank.
type hotnessHistogram struct {
	now    int64
	counts map[int][]int64
}

func newHotnessHistogram(now int64) *hotnessHistogram {
	return &hotnessHistogram{now: now, counts: make(map[int][]int64)}
}

func (h *hotnessHistogram) add(item metadumpItem) {
	ranks := h.counts[item.class]
	if ranks == nil {
		ranks = make([]int64, hotnessRanks)
		h.counts[item.class] = ranks
	}
	ranks[hotnessRank(item, h.now)]++
}

// classCutoff: a class keeps items hotter than rank, deletes colder ones, and at rank deletes
// the first deleteAtRank items the metadump shows (the crawler walks each LRU from its cold
// end, so those are the colder ones).
type classCutoff struct {
	rank         int
	deleteAtRank int64
	seenAtRank   int64
}

// shrinkPlan says which items pass two deletes.
type shrinkPlan struct {
	now         int64
	cutoffs     map[int]*classCutoff
	deleteItems int64
}

// plan keeps, hottest rank first, as many items per class as fit in budgetPages pages in
// total, counting the first page of every class that has one as already spent.
func (h *hotnessHistogram) plan(slabs slabStats, budgetPages int64) *shrinkPlan {
	p := &shrinkPlan{now: h.now, cutoffs: make(map[int]*classCutoff)}
	pages := make(map[int]int64)
	var usedPages int64
	for id, c := range slabs.classes {
		if c.totalPages > 0 {
			pages[id] = 1
			usedPages++
		}
	}
	ids := make([]int, 0, len(h.counts))
	for id := range h.counts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	kept := make(map[int]int64)
	for rank := range hotnessRanks {
		for _, id := range ids {
			n := h.counts[id][rank]
			class, known := slabs.classes[id]
			if n == 0 || !known || p.cutoffs[id] != nil {
				continue // an item in a class "stats slabs" did not list (a race) is kept
			}
			per := class.chunksPerPage
			free := pages[id]*per - kept[id]
			if n > free && usedPages < budgetPages {
				take := min((n-free+per-1)/per, budgetPages-usedPages)
				pages[id] += take
				usedPages += take
				free += take * per
			}
			keep := min(n, free)
			kept[id] += keep
			if keep < n {
				p.cutoffs[id] = &classCutoff{rank: rank, deleteAtRank: n - keep}
				p.deleteItems += n - keep
				for _, colder := range h.counts[id][rank+1:] {
					p.deleteItems += colder
				}
			}
		}
	}
	return p
}

// shouldDelete decides for one item of pass two.
func (p *shrinkPlan) shouldDelete(item metadumpItem) bool {
	cut := p.cutoffs[item.class]
	if cut == nil {
		return false
	}
	switch rank := hotnessRank(item, p.now); {
	case rank < cut.rank:
		return false
	case rank > cut.rank:
		return true
	default:
		cut.seenAtRank++
		return cut.seenAtRank <= cut.deleteAtRank
	}
}

// withMetadump runs a metadump on a connection of its own, waiting while the crawler is busy
// with another request.
func withMetadump(ctx context.Context, socket string, visit func(metadumpItem) error) error {
	for {
		c, err := dialMemcache(ctx, socket)
		if err != nil {
			return err
		}
		err = c.metadump(visit)
		c.Close()
		if !errors.Is(err, errCrawlerBusy) {
			return err
		}
		if err := sleepCtx(ctx, pollEvery); err != nil {
			return fmt.Errorf("waiting for memcached's lru crawler: %w", err)
		}
	}
}

// shrinkMemcached makes memcached hold at most limit bytes of slab pages (see above). c is a
// connection whose cache_memlimit is already set to limit.
func shrinkMemcached(ctx context.Context, socket string, c memcacheClient, limit int64) error {
	slabs, err := readSlabStats(c)
	if err != nil || slabs.totalMalloced <= limit {
		return err
	}
	settings, err := c.stats("settings")
	if err != nil {
		return err
	}
	for _, name := range []string{"lru_crawler", "dump_enabled", "slab_reassign"} {
		if settings[name] != "yes" {
			return fmt.Errorf("cannot shrink memcached live: its %s setting is %q, not yes", name, settings[name])
		}
	}
	for round := 1; round <= maxShrinkRounds && slabs.totalMalloced > limit; round++ {
		st, err := c.stats("")
		if err != nil {
			return err
		}
		now, err := statInt(st, "time")
		if err != nil {
			return err
		}
		hist := newHotnessHistogram(now)
		if err := withMetadump(ctx, socket, func(item metadumpItem) error { hist.add(item); return nil }); err != nil {
			return err
		}
		plan := hist.plan(slabs, limit/memcachedPageSize)
		if plan.deleteItems > 0 {
			if err := deletePlanned(ctx, socket, c, plan); err != nil {
				return err
			}
		}
		moved, err := reclaimPages(ctx, c, limit)
		if err != nil {
			return err
		}
		if slabs, err = readSlabStats(c); err != nil {
			return err
		}
		if plan.deleteItems == 0 && moved == 0 {
			break // what is left is slab classes' last pages, which memcached cannot give back
		}
	}
	st, err := c.stats("")
	if err != nil {
		return err
	}
	itemBytes, err := statInt(st, "bytes")
	if err != nil {
		return err
	}
	if itemBytes > limit {
		return fmt.Errorf("memcached still stores %d bytes of items above the %d-byte limit after %d rounds of deleting cold items", itemBytes, limit, maxShrinkRounds)
	}
	return nil
}

// deletePlanned runs pass two, deleting in pipelined batches while the metadump streams.
func deletePlanned(ctx context.Context, socket string, c memcacheClient, plan *shrinkPlan) error {
	batch := make([]string, 0, deleteBatchLines)
	flush := func() error {
		_, err := c.metaDelete(batch)
		batch = batch[:0]
		return err
	}
	err := withMetadump(ctx, socket, func(item metadumpItem) error {
		if !plan.shouldDelete(item) {
			return nil
		}
		// A key no meta command can name is left to the page mover, which evicts it if its
		// page is reclaimed.
		if line, ok := metaDeleteLine(item.key); ok {
			batch = append(batch, line)
		}
		if len(batch) == deleteBatchLines {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// reclaimPages moves pages whose worth of chunks is free to the global page pool, one at a
// time, until memcached holds no more than limit or no class has a page to spare. It returns
// how many pages it moved.
func reclaimPages(ctx context.Context, c memcacheClient, limit int64) (moved int, err error) {
	noSpare := make(map[int]bool)
	for {
		slabs, err := readSlabStats(c)
		if err != nil || slabs.totalMalloced <= limit {
			return moved, err
		}
		source, spare := 0, int64(0)
		for id, class := range slabs.classes {
			free := class.freeChunks / class.chunksPerPage
			if free > spare && class.totalPages >= 2 && !noSpare[id] {
				source, spare = id, free
			}
		}
		if source == 0 {
			return moved, nil
		}
		reply, err := c.slabsReassign(source, 0)
		if err != nil {
			return moved, err
		}
		switch reply {
		case reassignOK, reassignBusy: // ours or the automover's move: let it finish
			if reply == reassignOK {
				moved++
			}
			if err := waitReassignDone(ctx, c); err != nil {
				return moved, err
			}
		case reassignNoSpare:
			noSpare[source] = true
		default:
			return moved, protocolErrorf("slabs reassign %d 0: %s", source, reply)
		}
	}
}

func waitReassignDone(ctx context.Context, c memcacheClient) error {
	for {
		st, err := c.stats("")
		if err != nil {
			return err
		}
		running, err := statInt(st, "slab_reassign_running")
		if err != nil || running == 0 {
			return err
		}
		if err := sleepCtx(ctx, time.Millisecond); err != nil {
			return fmt.Errorf("waiting for memcached to move a slab page: %w", err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
