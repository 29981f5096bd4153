package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/outboxd/outboxd/sink"
)

// Transactional producer (kafka.delivery: exactly_once).
//
// TxnProducer is a thin wrapper around sarama's transactional AsyncProducer. Unlike Producer it
// does not retry forever nor re-send anything itself: inside a Kafka transaction a failed record
// leaves the transaction in an abortable state, so the only recovery is to abort it and produce
// the whole transaction again. That is the caller's job (internal/pipeline, eos.go). What this
// type adds to sarama is the per-record done callback, a Flush that waits for every outcome, the
// local size/topic checks of Producer (a record that cannot be sent fails before it poisons the
// transaction), and bounded retries so that a broken transaction is reported in seconds instead
// of holding the transaction open for as long as the cluster is away.

// Defaults of TxnOptions.
const (
	DefaultTxnTimeout = 60 * time.Second
	// txnProduceRetries bounds sarama's in-transaction retries of a transient produce error
	// (with backoff capped at txnRetryBackoffMax): a few seconds, then the record fails and
	// the caller aborts and redoes the transaction with its own backoff.
	txnProduceRetries  = 5
	txnMetadataRetries = 1
	txnRetryBackoffMax = time.Second
	// txnRequestRetries is sarama's Producer.Transaction.Retry.Max (InitProducerID,
	// AddPartitionsToTxn, EndTxn; 100ms apart, each attempt also looking up the coordinator):
	// NewTxn gives up after about 10 s when no broker answers.
	txnRequestRetries = 20
)

// TxnOptions configure NewTxn.
type TxnOptions struct {
	// ID is the transactional.id. Two producers with the same ID fence each other: the one
	// initialised last wins, the other gets ErrProducerFenced on its next transactional call.
	ID string
	// Timeout is the transaction timeout sent to the coordinator (transaction.timeout.ms): a
	// transaction open longer is aborted by the broker, which then fences this producer.
	// Default DefaultTxnTimeout.
	Timeout time.Duration
	// Succeeds, when set, is the epoch of this instance's previous producer (its Epoch): the
	// new one initialises the id only if the coordinator still holds exactly that, and else
	// NewTxn fails with an error wrapping sarama.ErrProducerFenced (IsFenced), because another
	// producer initialised the id since and a new initialisation would fence it (txnowner.go).
	Succeeds *TxnEpoch
}

// TxnProducer produces records inside Kafka transactions. Begin, Produce, Flush, Commit and
// Abort are called from one goroutine, in that pattern: Begin, Produce..., Flush, Commit or
// Abort. Close may be called from any goroutine.
type TxnProducer struct {
	cfg    Config
	id     string
	log    *slog.Logger
	ctl    *control
	client sarama.Client
	ap     sarama.AsyncProducer

	mu          sync.Mutex
	epoch       TxnEpoch // guarded by mu; see Epoch
	epochKnown  bool
	outstanding int
	idle        chan struct{} // closed while outstanding == 0
	closed      bool

	resultDone chan struct{}
	closeOnce  sync.Once
}

type txnMsg struct {
	msg        sarama.ProducerMessage
	key, value sarama.ByteEncoder
	rec        *sink.Record
	done       func(error)
}

// TxnSaramaConfig returns the sarama configuration of a transactional producer: SaramaConfig's
// durable settings plus the transactional id, and bounded retries (see the type's doc).
func (c Config) TxnSaramaConfig(o TxnOptions) (*sarama.Config, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	sc, _, err := c.txnSaramaConfig(o)
	return sc, err
}

func (c Config) txnSaramaConfig(o TxnOptions) (*sarama.Config, *control, error) {
	if o.ID == "" {
		return nil, nil, errors.New("kafka.transactional_id: must not be empty")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTxnTimeout
	}
	ctl := &control{min: c.RetryBackoffMin, max: min(c.RetryBackoffMax, txnRetryBackoffMax)}
	sc, err := c.saramaConfig(ctl)
	if err != nil {
		return nil, nil, err
	}
	sc.Producer.Transaction.ID = o.ID
	sc.Producer.Transaction.Timeout = o.Timeout
	sc.Producer.Retry.Max = txnProduceRetries
	sc.Metadata.Retry.Max = txnMetadataRetries
	sc.Metadata.Timeout = 0
	sc.Producer.Transaction.Retry.Max = txnRequestRetries
	return sc, ctl, nil
}

// NewTxn connects and initialises the transactional id (InitProducerID). That fences every
// older producer with the same id and aborts a transaction it left open, so once NewTxn
// returns, no older instance can commit anything any more. It fails after about 10 s if the
// transaction coordinator cannot be reached. A nil log discards logs.
func NewTxn(cfg Config, o TxnOptions, log *slog.Logger) (*TxnProducer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sc, ctl, err := cfg.txnSaramaConfig(o)
	if err != nil {
		return nil, err
	}
	if o.Succeeds != nil {
		if err := cfg.checkStillHeld(o.ID, *o.Succeeds); err != nil {
			return nil, err
		}
	}
	client, ap, err := startSarama(cfg.Brokers, sc, ctl, "transactional producer",
		fmt.Sprintf("cannot initialise transactional id %q (kafka.transactional_id; "+
			"is Kafka reachable, and may this client write with that transactional id?)", o.ID))
	if err != nil {
		return nil, err
	}
	p := &TxnProducer{cfg: cfg, id: o.ID, log: log, ctl: ctl, client: client, ap: ap,
		idle: make(chan struct{}), resultDone: make(chan struct{})}
	close(p.idle)
	go p.results()
	p.learnEpoch("initialisation")
	return p, nil
}

// ID is the transactional id.
func (p *TxnProducer) ID() string { return p.id }

// Client is the producer's sarama client. Do not close it.
func (p *TxnProducer) Client() sarama.Client { return p.client }

// Begin starts a transaction (locally: the coordinator learns of it with the first record).
func (p *TxnProducer) Begin() error {
	if err := p.ap.BeginTxn(); err != nil {
		return fmt.Errorf("kafka: begin transaction (transactional id %q): %w", p.id, err)
	}
	return nil
}

// Produce queues rec in the open transaction. done is called exactly once, from the producer's
// result goroutine, with nil once the broker acknowledged the record (it is written, but
// visible to read_committed consumers only once the transaction commits) or with a
// *DeliveryError. After the first failure the transaction can no longer commit: sarama fails
// every later record of it, typically with the same error.
//
// A record that cannot be sent at all (invalid topic name, over MaxRecordBytes) is refused
// synchronously with a permanent *DeliveryError, without touching the transaction; done is then
// never called. rec and its byte slices must not change until done is called.
func (p *TxnProducer) Produce(ctx context.Context, rec *sink.Record, done func(error)) error {
	if rec == nil || done == nil {
		return errors.New("kafka: Produce needs a record and a done callback")
	}
	m := &txnMsg{rec: rec, done: done}
	msg := &m.msg
	msg.Topic = rec.Topic
	msg.Partition = -1 // rec.Partition when PartitionSet (partitioner.go)
	msg.Metadata = m
	msg.Timestamp = rec.Timestamp // zero: sarama stamps the send time
	if rec.Key != nil {
		m.key = rec.Key
		msg.Key = &m.key
	}
	if rec.Value != nil {
		m.value = rec.Value
		msg.Value = &m.value
	}
	if len(rec.Headers) > 0 {
		msg.Headers = make([]sarama.RecordHeader, len(rec.Headers))
		for i, h := range rec.Headers {
			msg.Headers[i] = sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value}
		}
	}
	var local error
	if err := ValidTopicName(rec.Topic); err != nil {
		local = err
	} else if size := msg.ByteSize(2); size > p.cfg.MaxRecordBytes {
		local = &RecordTooLargeError{Size: size, Limit: p.cfg.MaxRecordBytes}
	}
	if local != nil {
		perm, reason := Classify(local)
		return &DeliveryError{Topic: rec.Topic, Partition: -1, Permanent: perm, Reason: reason, Err: local}
	}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	if p.outstanding == 0 {
		p.idle = make(chan struct{})
	}
	p.outstanding++
	p.mu.Unlock()
	select {
	case p.ap.Input() <- msg:
		return nil
	case <-ctx.Done():
		p.finish()
		return ctx.Err()
	}
}

func (p *TxnProducer) finish() {
	p.mu.Lock()
	p.outstanding--
	if p.outstanding == 0 {
		close(p.idle)
	}
	p.mu.Unlock()
}

func (p *TxnProducer) results() {
	defer close(p.resultDone)
	succ, errs := p.ap.Successes(), p.ap.Errors()
	for succ != nil || errs != nil {
		select {
		case m, ok := <-succ:
			if !ok {
				succ = nil
				continue
			}
			if t, ok := m.Metadata.(*txnMsg); ok {
				t.done(nil)
				p.finish()
			}
		case pe, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if t, ok := pe.Msg.Metadata.(*txnMsg); ok {
				perm, reason := Classify(pe.Err)
				t.done(&DeliveryError{Topic: t.rec.Topic, Partition: pe.Msg.Partition, Permanent: perm, Reason: reason, Err: pe.Err})
				p.finish()
			}
		}
	}
}

// Flush waits until every queued record's done has been called, or ctx ends.
func (p *TxnProducer) Flush(ctx context.Context) error {
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Commit commits the open transaction. It waits for every queued record first. An error means
// the outcome may be unknown (the EndTxn request may have reached the coordinator): a caller
// that must know re-initialises the transactional id (NewTxn), which settles the transaction
// either way, and then looks at what was committed.
func (p *TxnProducer) Commit() error {
	bump := p.bumpDue()
	if err := p.ap.CommitTxn(); err != nil {
		return fmt.Errorf("kafka: commit transaction (transactional id %q): %w", p.id, err)
	}
	if bump {
		p.learnEpoch("commit after an abortable error")
	}
	return nil
}

// Abort aborts the open transaction; nothing produced in it becomes visible to read_committed
// consumers. After an error the producer is unusable: Close it and create a new one.
func (p *TxnProducer) Abort() error {
	bump := p.bumpDue()
	if err := p.ap.AbortTxn(); err != nil {
		return fmt.Errorf("kafka: abort transaction (transactional id %q): %w", p.id, err)
	}
	if bump {
		p.learnEpoch("abort after an abortable error")
	}
	return nil
}

// bumpDue reports whether ending the current transaction may make sarama bump the producer
// epoch (it does after an abortable error, KIP-360), so that Epoch must be learnt again.
func (p *TxnProducer) bumpDue() bool {
	return p.ap.TxnStatus()&(sarama.ProducerTxnFlagAbortableError|sarama.ProducerTxnFlagInitializing) != 0
}

// Usable reports whether the producer can begin a transaction (sarama's transaction state is
// Ready). After a fatal error, or a failed Abort or Commit, it is not: create a new producer.
func (p *TxnProducer) Usable() bool {
	return p.ap.TxnStatus()&sarama.ProducerTxnFlagReady != 0
}

// Close shuts the producer down. An open transaction is left to the coordinator (aborted on
// timeout, or when the transactional id is initialised again). Records still queued are
// reported through done with an error. It may be called more than once.
func (p *TxnProducer) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.ctl.aborted.Store(true) // sarama's metadata retries end promptly
		p.ap.AsyncClose()
		<-p.resultDone
		_ = p.client.Close()
	})
	return nil
}

// IsFenced reports whether err means that another producer with the same transactional id
// has been initialised since this one (PRODUCER_FENCED): this producer can never commit again.
func IsFenced(err error) bool {
	return errors.Is(err, sarama.ErrProducerFenced)
}

// TxnFatal reports errors after which no new producer with the same configuration can help:
// another instance owns the transactional id, the ACLs forbid it, the transaction timeout is
// above the brokers' maximum, or the cluster has no transactions. why says what to do.
func TxnFatal(err error) (fatal bool, why string) {
	switch {
	case IsFenced(err):
		return true, "producer fenced: another producer initialised the same transactional id, " +
			"or the broker aborted this producer's transaction after transaction.timeout.ms"
	case errors.Is(err, sarama.ErrInvalidTransactionTimeout):
		return true, "the brokers refuse the transaction timeout (kafka.transaction_timeout) as above their transaction.max.timeout.ms " +
			"(default 15m): lower kafka.transaction_timeout, or raise transaction.max.timeout.ms on every broker"
	case errors.Is(err, sarama.ErrTransactionalIDAuthorizationFailed):
		return true, "not authorized to use the transactional id: grant WRITE and DESCRIBE on it (kafka.transactional_id)"
	case errors.Is(err, sarama.ErrUnsupportedVersion), errors.Is(err, sarama.ErrUnsupportedForMessageFormat):
		return true, "the cluster does not support transactions (Kafka 2.8 or newer is needed for kafka.delivery exactly_once)"
	}
	return false, ""
}
