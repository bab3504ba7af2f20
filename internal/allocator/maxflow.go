package allocator

// flowGraph is a directed graph with int64 capacities for Dinic's maximum-flow algorithm.
type flowGraph struct {
	head  []int // first edge of each vertex, -1 when none
	next  []int
	to    []int
	cap   []int64
	level []int
	iter  []int
}

func newFlowGraph(vertices int) *flowGraph {
	g := &flowGraph{head: make([]int, vertices), level: make([]int, vertices), iter: make([]int, vertices)}
	for i := range g.head {
		g.head[i] = -1
	}
	return g
}

// addEdge adds u->v with capacity c (and its residual v->u) and returns the edge's index.
func (g *flowGraph) addEdge(u, v int, c int64) int {
	id := len(g.to)
	g.to = append(g.to, v, u)
	g.cap = append(g.cap, c, 0)
	g.next = append(g.next, g.head[u], g.head[v])
	g.head[u], g.head[v] = id, id+1
	return id
}

// flow returns the flow pushed through edge id.
func (g *flowGraph) flow(id int) int64 { return g.cap[id^1] }

// maxFlow pushes the maximum flow from s to t and returns its value.
func (g *flowGraph) maxFlow(s, t int) int64 {
	var total int64
	queue := make([]int, 0, len(g.head))
	for {
		for i := range g.level {
			g.level[i] = -1
		}
		g.level[s] = 0
		queue = append(queue[:0], s)
		for qi := 0; qi < len(queue); qi++ {
			u := queue[qi]
			for e := g.head[u]; e >= 0; e = g.next[e] {
				if g.cap[e] > 0 && g.level[g.to[e]] < 0 {
					g.level[g.to[e]] = g.level[u] + 1
					queue = append(queue, g.to[e])
				}
			}
		}
		if g.level[t] < 0 {
			return total
		}
		copy(g.iter, g.head)
		for {
			f := g.augment(s, t, 1<<62)
			if f == 0 {
				break
			}
			total += f
		}
	}
}

// augment finds one blocking-flow path from u to t (iteratively, so deep graphs cannot
// overflow the stack) and pushes as much as it can, up to limit.
func (g *flowGraph) augment(s, t int, limit int64) int64 {
	path := []int{} // edges
	u := s
	for {
		if u == t {
			f := limit
			for _, e := range path {
				f = min(f, g.cap[e])
			}
			for _, e := range path {
				g.cap[e] -= f
				g.cap[e^1] += f
			}
			return f
		}
		advanced := false
		for ; g.iter[u] >= 0; g.iter[u] = g.next[g.iter[u]] {
			e := g.iter[u]
			if g.cap[e] > 0 && g.level[g.to[e]] == g.level[u]+1 {
				path = append(path, e)
				u = g.to[e]
				advanced = true
				break
			}
		}
		if advanced {
			continue
		}
		// Dead end: retreat and skip the edge that led here.
		if len(path) == 0 {
			return 0
		}
		g.level[u] = -1
		last := path[len(path)-1]
		path = path[:len(path)-1]
		u = g.to[last^1]
		g.iter[u] = g.next[g.iter[u]]
	}
}
