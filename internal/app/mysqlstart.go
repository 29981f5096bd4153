package app

import (
	"context"
	"fmt"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/offsets"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/mysql"
)

// checkMySQLStart is the preflight of where a MySQL run starts, so that `check` catches what
// `run` refuses: no stored position and no source.mysql.start, a damaged offsets file, a
// stored (or configured) position this server cannot serve as the same binlog history
// (purged, RESET MASTER, a restored or another server). Positions in offsets.store kafka are
// not read here: reading them may wait for a transaction of a crashed exactly_once producer,
// which only the pipeline's own producer ends; the source checks them when it opens.
func checkMySQLStart(ctx context.Context, c *config.Config) []CheckResult {
	const name = "start position"
	if c.Offsets.Store != "file" {
		return []CheckResult{{Name: name, OK: true, Reason: "stored in " + storeDescription(c) + "; checked when the pipeline starts"}}
	}
	store := &offsets.FileStore{Path: c.Offsets.Path, Source: SourceName(c)}
	stored, err := store.Load(ctx)
	if err != nil {
		return []CheckResult{{Name: name, Reason: err.Error(), Fix: "restore the offsets file, or store a position with `outboxd offsets set`"}}
	}
	what, pos := "stored position "+string(stored), stored
	if stored == "" {
		switch s := c.Source.MySQL.Start; s {
		case "":
			return []CheckResult{{Name: name, Reason: fmt.Sprintf("no stored position in %s, and source.mysql.start is not set (run refuses to guess)", storeDescription(c)),
				Fix: "first run: set source.mysql.start: current (from the binlog end now) or earliest (from the oldest binlog on the server); " +
					"offsets lost: restore them, or set source.mysql.start (or `outboxd offsets set`) to the last delivered position"}}
		case "current", "earliest":
			return []CheckResult{{Name: name, OK: true, Reason: "none stored; the run starts at source.mysql.start: " + s}}
		default:
			what, pos = "source.mysql.start "+s, source.Position(s)
		}
	}
	if err := mysql.CheckPosition(ctx, mysqlConfig(c), pos); err != nil {
		return []CheckResult{{Name: name, Reason: what + " cannot be served: " + err.Error(),
			Fix: "see the reason; `outboxd offsets show` prints the server's current position"}}
	}
	return []CheckResult{{Name: name, OK: true, Reason: what + " is servable"}}
}
