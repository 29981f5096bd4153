package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/sink/kafka"
)

// The loaders of memory-large-tx: ONE statement, so ONE transaction, generated server-side
// (no client round trip per row). Big payloads are a block of md5 hex digits computed once per
// statement and prefixed with the row number: distinct rows, and nearly incompressible for lz4
// (its 64 KiB window finds no repeats in random hex), so the producer's compressed batches are
// as large as a real payload's would be.

// bigBlocks is the number of 32-character md5 blocks that make a JSON payload
// {"ts": <16 digits>, "blob": "<row>-<blocks>"} of at most payload bytes.
func bigBlocks(payload int) int { return max(1, (payload-64)/32) }

// txSpans cuts rows 1..rows into the transactions of sh: one, or perTx rows each.
func (s largeShape) txSpans() [][2]int {
	per := s.perTx
	if per <= 0 {
		per = s.rows
	}
	var spans [][2]int
	for from := 1; from <= s.rows; from += per {
		spans = append(spans, [2]int{from, min(from+per-1, s.rows)})
	}
	return spans
}

// pgLoadOneTx inserts sh.rows rows in one transaction (perTx: in transactions of perTx rows),
// then one marker row in a transaction of its own, and returns the WAL LSN between the two: a
// stored position past it covers the big transaction (it committed before; a keepalive
// position past it can come only after it).
func pgLoadOneTx(ctx context.Context, dsn string, sh largeShape) (beforeMarker string, err error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	if sh.payload > 0 {
		// The block once per connection (a temp table: its DDL is not published).
		if _, err := c.Exec(ctx, fmt.Sprintf(`CREATE TEMP TABLE outboxd_bench_blob AS
SELECT string_agg(md5(k::text), '') AS blob FROM generate_series(1, %d) AS k`, bigBlocks(sh.payload))); err != nil {
			return "", fmt.Errorf("make the payload block: %w", err)
		}
	}
	for _, sp := range sh.txSpans() {
		var ins string
		if sh.payload == 0 {
			ins = fmt.Sprintf(`INSERT INTO %s (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), %s, 'customer-' || (i %% 1000), 'OrderCreated', %s
FROM generate_series(%d, %d) AS i`, pgTable, pgAggTypeSQL, pgPayloadSQL, sp[0], sp[1])
		} else {
			ins = fmt.Sprintf(`INSERT INTO %s (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), 'big', 'big-' || i, 'Blob',
	jsonb_build_object('ts', (extract(epoch from clock_timestamp()) * 1000000)::bigint, 'blob', i::text || '-' || b.blob)
FROM generate_series(%d, %d) AS i, outboxd_bench_blob AS b`, pgTable, sp[0], sp[1])
		}
		if _, err := c.Exec(ctx, ins); err != nil {
			return "", fmt.Errorf("load rows %d-%d in one transaction: %w", sp[0], sp[1], err)
		}
	}
	if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&beforeMarker); err != nil {
		return "", err
	}
	if _, err := c.Exec(ctx, fmt.Sprintf(`CALL %s.load(%d, 1, 1, 0)`, pgSchema, sh.rows+1)); err != nil {
		return "", fmt.Errorf("load the marker row: %w", err)
	}
	return beforeMarker, nil
}

// myLoadOneTx inserts sh.rows rows in one transaction (perTx: in transactions of perTx rows):
// one autocommit INSERT … SELECT over MariaDB's sequence engine (seq_FROM_to_TO) each.
func myLoadOneTx(ctx context.Context, srv *myServer, sh largeShape) error {
	sql := []string{`SET SESSION group_concat_max_len = 67108864`}
	if sh.payload > 0 {
		sql = append(sql, fmt.Sprintf(`SET @outboxd_bench_blob = (SELECT GROUP_CONCAT(MD5(seq) SEPARATOR '') FROM %s.seq_1_to_%d)`,
			myDB, bigBlocks(sh.payload)))
	}
	for _, sp := range sh.txSpans() {
		if sh.payload == 0 {
			sql = append(sql, fmt.Sprintf(`INSERT INTO %s (id, aggregatetype, aggregateid, type, payload)
SELECT UUID(), ELT(1 + i %% 4, 'order', 'customer', 'payment', 'shipment'), CONCAT('customer-', i %% 1000), 'OrderCreated', %s
FROM (SELECT seq AS i FROM %s.seq_%d_to_%d) AS s`, myFull, myPayloadSQL, myDB, sp[0], sp[1]))
			continue
		}
		sql = append(sql, fmt.Sprintf(`INSERT INTO %s (id, aggregatetype, aggregateid, type, payload)
SELECT UUID(), 'big', CONCAT('big-', i), 'Blob',
	JSON_OBJECT('ts', CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS UNSIGNED), 'blob', CONCAT(i, '-', @outboxd_bench_blob))
FROM (SELECT seq AS i FROM %s.seq_%d_to_%d) AS s`, myFull, myDB, sp[0], sp[1]))
	}
	return srv.exec(ctx, sql...)
}

// readDistinctIDs reads topics from the start with isolation level read_committed (what a
// consumer of either delivery mode sees) and returns the number of records and of distinct
// event ids (header "id"). It stops once want distinct ids are in and a poll brings nothing
// more, or after 20 s without a new record.
func readDistinctIDs(ctx context.Context, brokers, topics []string, want int) (records, distinct int64, err error) {
	var existing []string
	{
		cl, err := newBenchClient(brokers)
		if err != nil {
			return 0, 0, err
		}
		for _, t := range topics {
			if _, err := cl.Partitions(t); err == nil {
				existing = append(existing, t)
			} else if !errors.Is(err, kafka.ErrUnknownTopic) {
				cl.Close()
				return 0, 0, fmt.Errorf("topic %s: %w", t, err)
			}
		}
		cl.Close()
	}
	if len(existing) == 0 {
		return 0, 0, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(existing...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(8<<20))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	seen := make(map[string]struct{}, want)
	lastNew := time.Now()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			return records, int64(len(seen)), fmt.Errorf("read back: %d distinct ids of %d: %w", len(seen), want, ctx.Err())
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return records, int64(len(seen)), ferr
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			for _, h := range r.Headers {
				if h.Key == "id" {
					seen[string(h.Value)] = struct{}{}
				}
			}
		})
		records += int64(n)
		if n > 0 {
			lastNew = time.Now()
		}
		if (n == 0 && len(seen) >= want) || time.Since(lastNew) > 20*time.Second {
			return records, int64(len(seen)), nil
		}
	}
}
