package delivery

// Flights of small chunks come from recycled blocks: with single-row transactions a flight
// allocation per chunk was most of the core's garbage (224 B an event), and the GC it caused.

// flightBlock is how many flights one block holds.
const flightBlock = 64

// minFreeBlocks and maxFreeBlocks bound the recycled blocks kept for reuse (the rest go to the
// GC): as many as the in-flight window spans (freeBlocksFor), within these. A window's worth, not
// a handful: when the loop takes a burst of acks at once (it was descheduled, or the GC ran), a
// whole window of blocks resolves together, and with only 8 kept the refill allocated the rest
// afresh (a heap profile of a 1M single-row drain with a GC forced every 1.5 s: 118 MB of fresh
// blocks, 130 B an event; without forced GCs the drain's GC cycles did not change measurably).
// Kept blocks are memory the window held at its peak anyway.
const (
	minFreeBlocks = 8
	maxFreeBlocks = 256
)

// freeBlocksFor is how many recycled blocks a core with maxInflight records in flight keeps.
func freeBlocksFor(maxInflight int) int {
	return min(max(maxInflight/flightBlock+2, minFreeBlocks), maxFreeBlocks)
}

// flightBlk is a block of flights carved out to consecutive small chunks. Once every flight
// carved from it is resolved (and it is carved out in full) nothing refers to it any more — an
// ID is handed back once, with its outcome, and the loop forgets it; backlog and Sends entries
// are cleared when handed on — so it is cleared and reused. Flights that never resolve (stuck
// after a halt) keep their block out of reuse.
type flightBlk struct {
	fs     [flightBlock]flight
	carved int // flights handed out (flightBlock: full, none more, once it is not the current one)
	live   int // of those, not resolved
}

// flightBlocks is the at_least_once core's allocator of flights.
type flightBlocks struct {
	cur     *flightBlk // carving from (nil: none)
	free    []*flightBlk
	maxFree int // recycled blocks kept at most (0: minFreeBlocks)
}

// flights returns n zeroed flights for one chunk: carved from the current block when the chunk
// is small, else allocated on their own.
func (b *flightBlocks) flights(n int) []flight {
	if n > flightBlock/4 {
		return make([]flight, n)
	}
	if b.cur != nil && b.cur.carved+n > flightBlock {
		full := b.cur
		b.cur, full.carved = nil, flightBlock
		if full.live == 0 {
			b.recycle(full)
		}
	}
	if b.cur == nil {
		if k := len(b.free); k > 0 {
			b.cur, b.free = b.free[k-1], b.free[:k-1]
		} else {
			b.cur = &flightBlk{}
		}
	}
	blk := b.cur
	fs := blk.fs[blk.carved : blk.carved+n : blk.carved+n]
	blk.carved += n
	blk.live += n
	for i := range fs {
		fs[i].blk = blk
	}
	return fs
}

// resolved: f will not be referred to again (its outcome was the last); its block is reused
// once all of it is.
func (b *flightBlocks) resolved(f *flight) {
	blk := f.blk
	if blk == nil {
		return
	}
	if blk.live--; blk.live == 0 && blk.carved == flightBlock && blk != b.cur { // cur: when it is left
		b.recycle(blk)
	}
}

func (b *flightBlocks) recycle(blk *flightBlk) {
	if len(b.free) >= max(b.maxFree, minFreeBlocks) {
		return
	}
	clear(blk.fs[:])
	blk.carved, blk.live = 0, 0
	b.free = append(b.free, blk)
}
