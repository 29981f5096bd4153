package delivery

import (
	"math/rand/v2"
	"testing"
)

// Recycled flight blocks never hand out a flight that is still live: chunks of random sizes
// (small ones carved from blocks, big ones allocated alone), resolved in random order, over
// many blocks; every flight handed out is zeroed (but for its block) and not live already.
func TestFlightBlocksNoReuseWhileLive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var b flightBlocks
	live := map[*flight]bool{}
	var order []*flight
	reused := 0
	seen := map[*flightBlk]bool{}
	limit := 300
	for step := 0; step < 50000; step++ {
		if step%500 == 0 {
			limit = 1 + rng.IntN(300) // sometimes few in flight: a block resolves while current
		}
		if len(order) < limit && rng.IntN(3) > 0 {
			n := 1 + rng.IntN(4)
			if rng.IntN(50) == 0 {
				n = flightBlock/4 + 1 + rng.IntN(8) // a big chunk: its own allocation
			}
			if rng.IntN(20) == 0 {
				n = flightBlock / 4
			}
			fs := b.flights(n)
			if len(fs) != n {
				t.Fatalf("%d flights for %d", len(fs), n)
			}
			for i := range fs {
				f := &fs[i]
				if live[f] {
					t.Fatalf("step %d: flight %p handed out while live", step, f)
				}
				if f.state != flightRecord || f.seq != 0 || f.row != nil || f.ord != 0 {
					t.Fatalf("step %d: flight handed out dirty: %+v", step, *f)
				}
				if f.blk != nil && seen[f.blk] && b.cur == f.blk && f.blk.carved == n {
					reused++
				}
				if f.blk != nil {
					seen[f.blk] = true
				}
				f.seq, f.ord, f.state = 7, uint64(step), flightDLQ // in use
				live[f] = true
				order = append(order, f)
			}
			continue
		}
		if len(order) == 0 {
			continue
		}
		i := rng.IntN(len(order))
		if rng.IntN(2) == 0 {
			i = 0 // mostly in order, as acks come
		}
		f := order[i]
		order = append(order[:i], order[i+1:]...)
		delete(live, f)
		f.state = flightDone
		b.resolved(f)
	}
	if reused == 0 {
		t.Fatal("no block was ever reused")
	}
}

// The current block filled exactly and resolved in full before the next chunk: it is reused
// only once it is left, and never handed out twice.
func TestFlightBlocksExactFill(t *testing.T) {
	var b flightBlocks
	carve := func(k int) []*flight {
		var out []*flight
		for i := 0; i < k; i++ {
			fs := b.flights(4)
			for j := range fs {
				if fs[j].state != flightRecord {
					t.Fatalf("chunk %d: a live flight handed out again", i)
				}
				fs[j].state = flightDLQ
				out = append(out, &fs[j])
			}
		}
		return out
	}
	for _, f := range carve(flightBlock / 4) { // exactly one block
		f.state = flightDone
		b.resolved(f)
	}
	kept := carve(3 * flightBlock / 4) // three blocks' worth, all live
	seen := map[*flight]bool{}
	for _, f := range kept {
		if seen[f] {
			t.Fatal("one flight handed out twice")
		}
		seen[f] = true
	}
}

// A whole window resolved in one burst (the loop took every ack at once) and refilled: the
// refill reuses the window's blocks and allocates none. With a free list of only 8 blocks it
// allocated every block past the eighth again, each burst.
func TestFlightBlocksBurstRefillAllocatesNone(t *testing.T) {
	const window = 4096 // the default kafka.max_inflight
	b := flightBlocks{maxFree: freeBlocksFor(window)}
	fs := make([]*flight, 0, window)
	cycle := func() {
		fs = fs[:0]
		for range window {
			f := &b.flights(1)[0]
			f.state = flightDLQ
			fs = append(fs, f)
		}
		for _, f := range fs { // every ack of the window at once, in order
			f.state = flightDone
			b.resolved(f)
		}
	}
	cycle() // the window's blocks, allocated once
	if n := testing.AllocsPerRun(20, cycle); n != 0 {
		t.Fatalf("a burst refill of %d flights allocated %.0f blocks (free list kept %d, at most %d)", window, n, len(b.free), b.maxFree)
	}
}

// The free list is sized to the window, within its bounds.
func TestFreeBlocksFor(t *testing.T) {
	for _, c := range []struct{ inflight, want int }{{1, minFreeBlocks}, {4096, 4096/flightBlock + 2}, {1 << 20, maxFreeBlocks}} {
		if got := freeBlocksFor(c.inflight); got != c.want {
			t.Errorf("freeBlocksFor(%d) = %d, want %d", c.inflight, got, c.want)
		}
	}
}
