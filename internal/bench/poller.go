package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/sink/kafka"
)

// pollPG is the baseline: a polling relay (the design outboxd replaces), done as well as that
// design allows. Each worker loops: BEGIN; SELECT the oldest PollBatch unsent rows FOR UPDATE
// SKIP LOCKED; produce them all with a sarama SyncProducer (the same durable settings as outboxd:
// idempotent, acks=all, snappy (outboxd's default), Java partitioner) and wait for the acks; UPDATE ... SET sent_at for
// the batch; COMMIT. Runs with 1 worker (keeps per-key order) and 4 workers (SKIP LOCKED
// concurrency; per-key order is lost) on a backlog of N rows.
func pollPG(ctx context.Context, e *env) ([]Result, error) {
	o := e.o
	const scenario = "poll-pg"
	if err := e.pg.ensureSchema(ctx); err != nil {
		return nil, err
	}
	kc := kafka.Config{Brokers: e.brokers, ClientID: "outboxd-bench-poller", Compression: "snappy"}
	sc, err := kc.SaramaConfig()
	if err != nil {
		return nil, err
	}
	sc.Metadata.Retry.Max = 10
	var res []Result
	for _, workers := range []int{1, 4} {
		if err := pgExec(ctx, e.pgDSN, `TRUNCATE `+pgSchema+`.outbox_poll`,
			fmt.Sprintf(`INSERT INTO %s.outbox_poll (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), %s, 'customer-' || (i %% 1000), 'OrderCreated', %s FROM generate_series(1, %d) i`,
				pgSchema, pgAggTypeSQL, pgPayloadSQL, o.N),
			`ANALYZE `+pgSchema+`.outbox_poll`); err != nil {
			return res, err
		}
		prod, err := sarama.NewSyncProducer(e.brokers, sc)
		if err != nil {
			return res, fmt.Errorf("sarama producer: %w", err)
		}
		topicPrefix := fmt.Sprintf("outboxd-bench.%s_poll%d.", e.runID, workers)
		var jobs []func(context.Context) error
		for range workers {
			jobs = append(jobs, func(ctx context.Context) error { return pollWorker(ctx, e.pgDSN, prod, topicPrefix, o.PollBatch) })
		}
		t0 := time.Now()
		err = parallel(ctx, jobs...)
		d := time.Since(t0)
		prod.Close()
		if err != nil {
			return res, err
		}
		n, err := countRecords(e.brokers, topicsOf(topicPrefix))
		if err != nil {
			return res, err
		}
		if n < int64(o.N) {
			return res, fmt.Errorf("poller with %d workers: Kafka holds %d records of %d", workers, n, o.N)
		}
		e.dropTopics(topicPrefix)
		rate := float64(o.N) / d.Seconds()
		o.Log.Info("poller drained", "workers", workers, "took", d.Round(time.Millisecond), "events/s", int(rate))
		name := "polling worker (1 worker, per-key order kept)"
		if workers > 1 {
			name = fmt.Sprintf("polling workers (%d, SKIP LOCKED; per-key order lost)", workers)
		}
		res = append(res, Result{Scenario: scenario, Name: name, Value: rate, Unit: "events/s",
			Detail: fmt.Sprintf("%d rows; SELECT … ORDER BY seq LIMIT %d FOR UPDATE SKIP LOCKED → SyncProducer.SendMessages (acks=all, idempotent, snappy) → UPDATE sent_at → COMMIT; %s",
				o.N, o.PollBatch, d.Round(time.Millisecond))})
	}
	return res, nil
}

func pollWorker(ctx context.Context, dsn string, prod sarama.SyncProducer, topicPrefix string, batch int) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	q := fmt.Sprintf(`SELECT seq, id::text, aggregatetype, aggregateid, type, payload::text FROM %s.outbox_poll
WHERE sent_at IS NULL ORDER BY seq LIMIT %d FOR UPDATE SKIP LOCKED`, pgSchema, batch)
	upd := fmt.Sprintf(`UPDATE %s.outbox_poll SET sent_at = now() WHERE seq = ANY($1)`, pgSchema)
	msgs := make([]*sarama.ProducerMessage, 0, batch)
	seqs := make([]int64, 0, batch)
	for {
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, q)
		if err != nil {
			tx.Rollback(ctx)
			return err
		}
		msgs, seqs = msgs[:0], seqs[:0]
		for rows.Next() {
			var seq int64
			var id, at, aid, typ, payload string
			if err := rows.Scan(&seq, &id, &at, &aid, &typ, &payload); err != nil {
				rows.Close()
				tx.Rollback(ctx)
				return err
			}
			seqs = append(seqs, seq)
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topicPrefix + at, Key: sarama.StringEncoder(aid),
				Value:   sarama.StringEncoder(payload),
				Headers: []sarama.RecordHeader{{Key: []byte("id"), Value: []byte(id)}, {Key: []byte("eventType"), Value: []byte(typ)}}})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			tx.Rollback(ctx)
			return err
		}
		if len(msgs) == 0 {
			return tx.Rollback(ctx)
		}
		if err := prod.SendMessages(msgs); err != nil {
			tx.Rollback(ctx)
			return fmt.Errorf("produce: %w", err)
		}
		if _, err := tx.Exec(ctx, upd, seqs); err != nil {
			tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
}
