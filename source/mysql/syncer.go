package mysql

// The go-mysql binlog syncer: starting the dump, closing it, and its log adapter.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// startStream registers as a replica and starts the binlog dump from start, waiting for the
// server to accept it (its first FormatDescriptionEvent) so that a refused position fails here.
func (s *Source) startStream(ctx context.Context, start position) error {
	quiet := slog.New(debugLevel{s.log.Handler()}).With("component", "go-mysql")
	f := newFeed(&s.live)
	var optMeta func([]byte) error
	if s.info.mariadb {
		f.meta = &metaCache{}
		optMeta = f.meta.decode
	}
	host, port := s.dsn.Addr, uint16(0)
	if s.dsn.Net == "tcp" {
		host, port = s.dsn.Host(), s.dsn.port()
	}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: s.cfg.ServerID, Flavor: s.info.flavor(), Host: host, Port: port,
		User: s.dsn.User, Password: s.dsn.Password, TLSConfig: s.dsn.TLSConfig(), Localhost: "outboxd",
		TimestampStringLocation: time.UTC, RenderJSONAsMySQLText: true,
		// No ReadTimeout: go-mysql would set a socket deadline for every packet (a fifth of the
		// CPU time of a drain); the watchdog detects a silent connection instead.
		HeartbeatPeriod: s.cfg.HeartbeatPeriod, DiscardGTIDSet: true,
		DisableRetrySync: true, Logger: quiet,
		RowsEventDecodeFunc: s.decodeRows, TableMapOptionalMetaDecodeFunc: optMeta,
		// FillZeroLogPos makes go-mysql ask MariaDB for ANNOTATE_ROWS events (each carries the
		// statement's text: for outbox INSERTs, the payload again) so that MariaDB 11.4+ fills
		// every event's log position. Only file:pos positions need those; with GTIDs the log
		// position only appears in log lines, and skipping the annotations saves ~18% of the
		// source's CPU on a drain.
		FillZeroLogPos: s.info.mariadb && start.kind == kindFile,
		// Events reach Next through the feed, a transaction at a time; go-mysql's event
		// channel stays unused.
		SynchronousEventHandler: f, EventCacheCount: 1,
	})
	var (
		stream *replication.BinlogStreamer
		err    error
	)
	switch start.kind {
	case kindFile:
		stream, err = syncer.StartSync(gomysql.Position{Name: start.file, Pos: start.pos})
	case kindMariaGTID:
		var set gomysql.GTIDSet
		if set, err = gomysql.ParseMariadbGTIDSet(start.maria.String()); err == nil {
			stream, err = syncer.StartSyncGTID(set)
		}
	case kindMySQLGTID:
		stream, err = syncer.StartSyncGTID(start.mysql.Clone())
	}
	if err != nil {
		f.abandon()
		syncer.Close()
		return fmt.Errorf("start binlog stream at %s on %s: %w", start, s.dsn.Redacted(), explainStreamError(cause(err), start))
	}
	go f.watch(stream)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		f.abandon()
		syncer.Close()
		return ErrClosed
	}
	s.syncer, s.feed, s.stop = syncer, f, make(chan struct{})
	go s.watch(syncer, f, s.stop, 3*s.cfg.HeartbeatPeriod+2*time.Second)
	s.mu.Unlock()
	clear(s.pending)
	s.pending, s.next = s.pending[:0], 0

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s.asm.sawFDE = false
	for !s.asm.sawFDE {
		ev, err := s.event(wctx, f)
		if err != nil {
			if s.isClosed() {
				return ErrClosed
			}
			s.closeSyncer()
			return fmt.Errorf("start binlog stream at %s: %w", start, explainStreamError(cause(err), start))
		}
		if err := s.handle(ev); err != nil {
			s.closeSyncer()
			return err
		}
	}
	return nil
}

func (s *Source) closeSyncer() {
	s.mu.Lock()
	sy, f := s.syncer, s.feed
	s.syncer = nil
	s.stopWatch()
	s.mu.Unlock()
	if f != nil {
		f.abandon()
	}
	if sy != nil {
		sy.Close()
	}
}

// debugLevel logs go-mysql's records at debug level: it logs every connection step, and
// reports failures that this package returns or logs itself with more context.
type debugLevel struct{ slog.Handler }

func (h debugLevel) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h debugLevel) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return h.Handler.Handle(ctx, r)
}

func (h debugLevel) WithAttrs(a []slog.Attr) slog.Handler { return debugLevel{h.Handler.WithAttrs(a)} }
func (h debugLevel) WithGroup(n string) slog.Handler      { return debugLevel{h.Handler.WithGroup(n)} }
