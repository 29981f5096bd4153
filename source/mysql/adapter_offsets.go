package mysql

// The MySQL side of `outboxd offsets show/set`.

import (
	"context"
	"fmt"
	"io"

	"github.com/outboxd/outboxd/source"
)

// NoStoredPosition says what the next run does without a stored position.
func (a *Adapter) NoStoredPosition() string {
	if snap, _ := snapshotInitial(a.set.Snapshot); snap {
		m := "with source.mysql.snapshot: initial the next run takes a snapshot: it publishes the rows already in the outbox tables from one consistent read, then streams the binlog from the snapshot's position"
		if a.set.Start != "" {
			m += "; source.mysql.start (" + a.set.Start + ") is ignored"
		}
		return m
	}
	if a.set.Start == "" {
		return "the next run refuses to start until source.mysql.start is set (current | earliest | a position), or a position is stored with `outboxd offsets set`"
	}
	return "the next run starts at source.mysql.start: " + a.set.Start
}

// ShowOffsets writes the server, its current position, and whether stored ("" for none) can
// be served, or where a run without one starts.
func (a *Adapter) ShowOffsets(ctx context.Context, stored source.Position, w io.Writer) error {
	st, err := Inspect(ctx, a.Config())
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "server:               %s %s\n", st.Flavor, st.Version)
	fmt.Fprintf(w, "server position now:  %s\n", st.Position)
	if stored != "" {
		if err := CheckPosition(ctx, a.Config(), stored); err != nil {
			fmt.Fprintf(w, "stored position servable: NO — %v\n", err)
		} else {
			fmt.Fprintf(w, "stored position servable: yes\n")
		}
	} else if snap, _ := snapshotInitial(a.set.Snapshot); snap {
		fmt.Fprintf(w, "next run starts at:   a snapshot of the outbox tables (source.mysql.snapshot: initial), then the binlog from its position\n")
	} else if s := a.set.Start; s != "" {
		fmt.Fprintf(w, "next run starts at:   source.mysql.start: %s\n", s)
	}
	return nil
}

// CheckPosition tells whether the server can serve a run from pos (CheckPosition): any
// problem, the server unreachable included, refuses it; err is always nil.
func (a *Adapter) CheckPosition(ctx context.Context, pos source.Position, _ io.Writer) (refused, err error) {
	return CheckPosition(ctx, a.Config(), pos), nil
}
