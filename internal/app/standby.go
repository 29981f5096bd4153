package app

// Hot standby. Several `outboxd run` with the same config may run at once: one is active, the
// others wait (standby) and take over within seconds when the active one dies, resuming from
// the stored position. Who is active is the source adapter's decision (its standby methods):
//
//   - PostgreSQL (source/postgres/adapter_standby.go): the instance whose walsender streams
//     from the slot; a standby polls pg_replication_slots.active_pid every 500ms. A lost race
//     comes back from Open as postgres.ErrSlotActive and ends the term.
//   - MySQL/MariaDB (source/mysql/adapter_standby.go): the instance holding
//     GET_LOCK('outboxd:<server_id>:<tables>') on a dedicated connection; when the holder no
//     longer holds it (its connection dropped), the term ends.
//
// A term ends by stopping the pipeline (draining what is in flight and storing the position);
// the instance then competes for the active role again.
//
// Nothing before the takeover touches Kafka or the offsets store: the Kafka producer is created,
// and the stored position loaded, only once this instance is active. So the instances may share
// the offsets file on one host; across hosts they need offsets.store: kafka or a shared volume.
// While standby, /readyz answers 503 and outboxd_standby is 1.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/source"
)

// term is one period of this instance being active. It ends when the pipeline returns or when
// the active role is lost (lose), which cancels the term's context.
type term struct {
	cancel context.CancelFunc
	once   sync.Once
	lost   atomic.Bool
	why    string
}

func (t *term) lose(why string) {
	t.once.Do(func() {
		t.why = why
		t.lost.Store(true)
		t.cancel()
	})
}

type termKey struct{}

// runStandby runs active whenever this instance is the active one, until ctx ends or active
// fails for another reason than losing the active role.
func runStandby(ctx context.Context, sb standby, log *slog.Logger, m *metrics.Metrics, secrets []string, active func(context.Context) error) error {
	defer sb.CloseStandby()
	for first := true; ; first = false {
		release, lost, err := sb.WaitActive(ctx, first, func() { m.SetStandby(true) })
		m.SetStandby(false)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while standby
			}
			return fmt.Errorf("%s", Scrub(err.Error(), secrets...))
		}
		t := &term{}
		tctx, cancel := context.WithCancel(context.WithValue(ctx, termKey{}, t))
		t.cancel = cancel
		if lost != nil {
			go func() {
				select {
				case <-lost:
					t.lose("this instance no longer holds the pipeline's lock (its database connection was lost)")
				case <-tctx.Done():
				}
			}()
		}
		err = active(tctx)
		cancel()
		release()
		if ctx.Err() != nil || !t.lost.Load() {
			return err
		}
		m.SetUp(false)
		if err != nil {
			log.Warn("pipeline stopped with an error after the active role was lost", "err", err)
		}
		log.Warn("standby: this instance lost the active role; pipeline stopped, waiting to take over again", "why", t.why)
	}
}

// activeSource returns the constructor of the active instance's sources: the adapter's, each
// wrapped by its Active (an Open that finds the source taken by another process ends the term;
// the replication slot's status is copied to the metrics while it is open).
func activeSource(ctx context.Context, sb interface {
	opener
	standby
}, m *metrics.Metrics) func() source.Source {
	t, _ := ctx.Value(termKey{}).(*term)
	if t == nil {
		return sb.NewSource
	}
	return func() source.Source { return sb.Active(sb.NewSource(), t.lose, m.SetSlot) }
}
