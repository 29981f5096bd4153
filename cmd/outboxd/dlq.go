package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/dlqtool"
)

const dlqUsage = `Usage:
  outboxd dlq tail -c FILE [--follow] [--json]
      print the dead letters of kafka.dlq_topic, oldest first: one line per record with time,
      reason, stage, message, original topic, source table and position, event id and key
      (never the value); --json prints one JSON object per line with the value and all headers;
      --follow keeps printing new dead letters until interrupted
  outboxd dlq replay -c FILE (--id EVENT_ID ... | --all) [--timeout 1m]
      re-produce dead letters to their original topic with their key, value and headers (minus
      outboxd.error.*, outboxd.original.*, outboxd.source.*), one progress line per record;
      a record that still fails stays in the DLQ and is reported. A dead letter of the transform
      stage (the value is the row as JSON) is decoded back to the row's original bytes and routed
      again with the current outbox.* config: replayed when that now succeeds, reported otherwise

Exit status: 0 done, 1 a record not replayed or a runtime failure, 2 bad configuration or usage.
`

// idList is a repeatable --id flag.
type idList []string

func (l *idList) String() string { return strings.Join(*l, ",") }
func (l *idList) Set(s string) error {
	if s == "" {
		return errors.New("empty event id")
	}
	*l = append(*l, s)
	return nil
}

// dlqCmd runs `outboxd dlq tail|replay`.
func dlqCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "tail" && args[0] != "replay") {
		fmt.Fprintf(stderr, "outboxd dlq: need tail or replay\n\n%s", dlqUsage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("dlq "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, dlqUsage) }
	var (
		follow, asJSON, all bool
		ids                 idList
		timeout             time.Duration
	)
	if sub == "tail" {
		fs.BoolVar(&follow, "follow", false, "keep printing new dead letters until interrupted")
		fs.BoolVar(&asJSON, "json", false, "one JSON object per line, with the value and all headers")
	} else {
		fs.Var(&ids, "id", "event id (header id) of a dead letter to replay; repeatable")
		fs.BoolVar(&all, "all", false, "replay every replayable dead letter")
		fs.DurationVar(&timeout, "timeout", time.Minute, "how long to wait for Kafka's acks (transient errors are retried until then); 0 = no limit")
	}
	cfg, code := parseAndLoad(fs, "dlq "+sub, args[1:], stderr)
	if cfg == nil {
		return code
	}
	if sub == "replay" && (all == (len(ids) > 0)) {
		fmt.Fprintf(stderr, "outboxd dlq replay: give either --id EVENT_ID (repeatable) or --all\n\n%s", dlqUsage)
		return 2
	}
	kc := app.KafkaConfig(cfg)
	if _, err := kc.SaramaConfig(); err != nil { // TLS files, SASL settings
		fmt.Fprintf(stderr, "outboxd: config: %s\n", scrubKafka(cfg, err))
		return 2
	}
	conn := dlqtool.Conn{Kafka: kc, Topic: cfg.Kafka.DLQTopic, IDColumn: cfg.Outbox.Columns.ID,
		Warn: func(err error) { fmt.Fprintf(stderr, "outboxd dlq %s: %s\n", sub, scrubKafka(cfg, err)) }}
	ctx, stop := signalContext(stderr)
	defer stop()

	if sub == "tail" {
		_, err := dlqtool.Tail(ctx, conn, stdout, follow, asJSON)
		switch {
		case errors.Is(err, dlqtool.ErrNoTopic):
			fmt.Fprintf(stderr, "outboxd dlq tail: kafka.dlq_topic %s does not exist: nothing has been dead-lettered\n", cfg.Kafka.DLQTopic)
			return 0
		case err != nil:
			fmt.Fprintf(stderr, "outboxd %s\n", scrubKafka(cfg, err))
			return 1
		}
		return 0
	}

	router, err := app.Router(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "outboxd: config: outbox: %v\n", err)
		return 2
	}
	log := app.NewLogger(cfg.Log, stderr)
	route, err := app.ReplayRoute(ctx, cfg, router, log)
	if err != nil {
		fmt.Fprintf(stderr, "outboxd: %v\n", err)
		return 2
	}
	sum, err := dlqtool.Replay(ctx, dlqtool.ReplayOptions{Conn: conn, IDs: ids, All: all, Timeout: timeout, Log: log,
		Route: route}, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "outboxd %s\n", scrubKafka(cfg, err))
		return 1
	}
	if !sum.OK() {
		return 1
	}
	return 0
}

func scrubKafka(cfg *config.Config, err error) string {
	msg := err.Error()
	if hint := app.KafkaConfig(cfg).ConnectHint(err); hint != "" { // a TLS/SASL failure names its config key
		msg += " — " + hint
	}
	if cfg.Kafka.SASL != nil {
		return app.Scrub(msg, cfg.Kafka.SASL.Password)
	}
	return msg
}
