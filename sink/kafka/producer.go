package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"unsafe"

	"github.com/IBM/sarama"

	"github.com/outboxd/outboxd/sink"
)

// Producer delivers sink.Records to Kafka. Produce, Partitions and Client may be called from
// any goroutine; Close/Shutdown from any goroutine, once or more.
type Producer struct {
	cfg    Config
	log    *slog.Logger
	ctl    *control
	client sarama.Client
	ap     sarama.AsyncProducer
	input  chan<- *sarama.ProducerMessage

	sem   chan struct{}  // one token per outstanding record (MaxInflightRecords)
	local chan *inflight // records failed before reaching sarama, reported by the result goroutine
	wake  chan struct{}  // nudges the recovery goroutine (cap 1)

	closing    chan struct{} // closed when Close/Shutdown starts
	drained    chan struct{} // closed once closing and no record is outstanding
	abortCh    chan struct{} // closed when Shutdown gives up waiting
	resultDone chan struct{}
	recovDone  chan struct{}
	abortOnce  sync.Once
	finalOnce  sync.Once

	mu          sync.Mutex
	closed      bool
	drainedSent bool
	aborted     bool
	seq         uint64
	outstanding int
	list        inflight // sentinel of the outstanding list (for abort)
	gateState            // recovery.go
}

// inflight is one record on its way; it carries the sarama message (Metadata points back
// here), so a record costs one allocation, pooled.
type inflight struct {
	msg        sarama.ProducerMessage
	key, value sarama.ByteEncoder
	hdrs       [4]sarama.RecordHeader
	rec        *sink.Record
	done       func(error)
	seq        uint64
	err        error // for records failed locally (size, topic name, abort)
	attempts   int   // failed deliveries so far
	isolate    bool  // refused in a batch: re-send alone
	alone      bool  // submitted alone during recovery
	finished   bool  // done called or Produce rolled back; guarded by Producer.mu
	inLocal    bool  // queued on Producer.local; guarded by Producer.mu
	prev, next *inflight
}

var inflightPool = sync.Pool{New: func() any { return new(inflight) }}

// startSarama validates sc (sarama's own checks, then ValidateDurability) and starts a client and
// an async producer on it; failing to start the producer aborts ctl's retry loops. what names the
// producer kind in config errors; startErr explains a failed start.
func startSarama(brokers []string, sc *sarama.Config, ctl *control, what, startErr string) (sarama.Client, sarama.AsyncProducer, error) {
	if err := sc.Validate(); err != nil {
		return nil, nil, fmt.Errorf("kafka: invalid %s configuration: %w", what, err)
	}
	if err := ValidateDurability(sc); err != nil {
		return nil, nil, err
	}
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka.brokers %v: %w", brokers, err)
	}
	ap, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		ctl.aborted.Store(true)
		_ = client.Close()
		return nil, nil, fmt.Errorf("kafka.brokers %v: %s: %w", brokers, startErr, err)
	}
	return client, ap, nil
}

// New builds a producer and connects: it fetches an idempotent producer id, so it fails (after
// about 5 s of retries) if no broker is reachable. A nil log discards logs.
func New(cfg Config, log *slog.Logger) (*Producer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctl := &control{min: cfg.RetryBackoffMin, max: cfg.RetryBackoffMax}
	sc, err := cfg.saramaConfig(ctl)
	if err != nil {
		return nil, err
	}
	client, ap, err := startSarama(cfg.Brokers, sc, ctl, "producer",
		"cannot start the idempotent producer (is Kafka reachable, and may this client IdempotentWrite?)")
	if err != nil {
		return nil, err
	}
	p := &Producer{
		cfg: cfg, log: log, ctl: ctl, client: client, ap: ap, input: ap.Input(),
		sem:        make(chan struct{}, cfg.MaxInflightRecords),
		local:      make(chan *inflight, cfg.MaxInflightRecords),
		wake:       make(chan struct{}, 1),
		closing:    make(chan struct{}),
		drained:    make(chan struct{}),
		abortCh:    make(chan struct{}),
		resultDone: make(chan struct{}),
		recovDone:  make(chan struct{}),
	}
	p.list.next, p.list.prev = &p.list, &p.list
	go p.results()
	go p.recoverLoop()
	return p, nil
}

// Produce queues one record. It returns once the record is queued; delivery is reported later
// by done, called exactly once per queued record with nil when Kafka acked it (acks=all) or
// with the final *DeliveryError (use Classify on it). Transient failures are retried, not
// reported, so a non-nil error means permanent unless Shutdown gave up (ErrAborted).
//
// Blocking: Produce blocks while MaxInflightRecords records are outstanding, and while sarama
// cannot take more (for example, the cluster is unreachable). It returns ctx.Err() if ctx ends
// while blocked, and ErrClosed once Close/Shutdown has begun; in both cases the record was not
// queued and done will not be called.
//
// done runs on the producer's result goroutine: one goroutine, so calls never overlap. It must
// be quick, must not block and must not call Produce (that can deadlock: Produce may be
// waiting for the slot that done's return frees).
//
// rec and its byte slices must not be modified until done is called. Records go to rec.Topic,
// partition rec.Partition when rec.PartitionSet (one the topic lacks is a permanent failure,
// reason invalid_partition), else PartitionFor(rec.Key, partitions) for a non-nil key, a random
// available partition for a nil key. rec.Timestamp is the record's CreateTime (zero: now). A nil Value is a null value; headers keep their order.
func (p *Producer) Produce(ctx context.Context, rec *sink.Record, done func(err error)) error {
	if rec == nil || done == nil {
		return errors.New("kafka: Produce needs a record and a done callback")
	}
	select {
	case p.sem <- struct{}{}:
	default:
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.closing:
			return ErrClosed
		}
	}
	it := p.build(rec, done)

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.recycle(it)
		<-p.sem
		return ErrClosed
	}
	p.seq++
	it.seq = p.seq
	p.link(it)
	p.outstanding++
	if it.err != nil {
		it.inLocal = true
		p.mu.Unlock()
		p.local <- it // never blocks: cap == sem cap, one entry per outstanding record
		return nil
	}
	if p.state != gateOpen {
		p.held = append(p.held, it)
		p.mu.Unlock()
		return nil
	}
	p.inSarama++
	p.mu.Unlock()

	select {
	case p.input <- &it.msg:
		return nil
	default:
	}
	select {
	case p.input <- &it.msg:
		return nil
	case <-ctx.Done():
		if p.unqueue(it) {
			return ctx.Err()
		}
		return nil // Shutdown gave up meanwhile and reports the record through done
	case <-p.abortCh:
		return nil // Shutdown gave up: it reports the record through done(ErrAborted)
	}
}

// build fills a pooled inflight for rec; it.err is set if the record cannot be sent at all.
func (p *Producer) build(rec *sink.Record, done func(error)) *inflight {
	it := inflightPool.Get().(*inflight)
	it.rec, it.done = rec, done
	m := &it.msg
	m.Topic = rec.Topic
	m.Partition = -1 // set by sarama's partitioner (rec.Partition when PartitionSet); stays -1 if the record never got that far
	m.Metadata = it
	m.Timestamp = rec.Timestamp // zero: sarama stamps the send time
	if rec.Key != nil {
		it.key = rec.Key
		m.Key = &it.key
	}
	if rec.Value != nil {
		it.value = rec.Value
		m.Value = &it.value
	}
	if n := len(rec.Headers); n > 0 {
		hs := it.hdrs[:0]
		if n > len(it.hdrs) {
			hs = make([]sarama.RecordHeader, 0, n)
		}
		for _, h := range rec.Headers {
			// sarama only reads header keys, so the string's bytes are shared, not copied.
			hs = append(hs, sarama.RecordHeader{Key: unsafe.Slice(unsafe.StringData(h.Key), len(h.Key)), Value: h.Value})
		}
		m.Headers = hs
	}
	if err := ValidTopicName(rec.Topic); err != nil {
		it.err = err
	} else if size := m.ByteSize(2); size > p.cfg.MaxRecordBytes {
		it.err = &RecordTooLargeError{Size: size, Limit: p.cfg.MaxRecordBytes}
	}
	return it
}

func (p *Producer) recycle(it *inflight) {
	*it = inflight{}
	inflightPool.Put(it)
}

func (p *Producer) link(it *inflight) {
	it.prev, it.next = p.list.prev, &p.list
	p.list.prev.next = it
	p.list.prev = it
}

// finishLocked marks it finished and releases its bookkeeping; false if it already was.
// The caller then calls done (outside the lock) and release.
func (p *Producer) finishLocked(it *inflight) bool {
	if it.finished {
		return false
	}
	it.finished = true
	it.prev.next, it.next.prev = it.next, it.prev
	it.prev, it.next = nil, nil
	p.outstanding--
	if p.closed && p.outstanding == 0 && !p.drainedSent {
		p.drainedSent = true
		close(p.drained)
	}
	return true
}

// release frees the record's slot; the inflight is reused unless sarama may still hold it.
func (p *Producer) release(it *inflight, recycle bool) {
	<-p.sem
	if recycle {
		p.recycle(it)
	}
}

// unqueue rolls back a Produce whose hand-off to sarama was cancelled. It returns false if
// the record had already been finished by Shutdown giving up (done is being called).
func (p *Producer) unqueue(it *inflight) bool {
	p.mu.Lock()
	p.inSarama--
	p.nudgeLocked()
	ok := p.finishLocked(it)
	aborted := p.aborted
	p.mu.Unlock()
	if ok {
		p.release(it, !aborted)
	}
	return ok
}

// results is the result goroutine: every done call except Shutdown's give-up happens here.
func (p *Producer) results() {
	defer close(p.resultDone)
	succ, errs := p.ap.Successes(), p.ap.Errors()
	acked := make([]*inflight, 0, ackBatch)
	for succ != nil || errs != nil {
		select {
		case m, ok := <-succ:
			if !ok {
				succ = nil
				continue
			}
			// Take the acks already waiting too and settle them under one lock: a drain
			// returns acks a batch at a time, one per record.
			acked = appendAcked(acked[:0], m)
			for len(acked) < cap(acked) && succ != nil {
				select {
				case m, ok := <-succ:
					if !ok {
						succ = nil
						continue
					}
					acked = appendAcked(acked, m)
					continue
				default:
				}
				break
			}
			p.settleAcked(acked)
			clear(acked)
		case pe, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if it, ok := pe.Msg.Metadata.(*inflight); ok {
				p.failed(it, pe.Err)
			}
		case it := <-p.local:
			p.mu.Lock()
			err := it.err
			p.mu.Unlock()
			p.settle(it, err, false)
		}
	}
}

// ackBatch bounds the acks the result goroutine settles under one lock.
const ackBatch = 256

func appendAcked(acked []*inflight, m *sarama.ProducerMessage) []*inflight {
	if it, ok := m.Metadata.(*inflight); ok {
		acked = append(acked, it)
	}
	return acked
}

// settleAcked is settle(it, nil, true) for each record of acked, in order, with one lock for
// the bookkeeping of all of them.
func (p *Producer) settleAcked(acked []*inflight) {
	p.mu.Lock()
	p.inSarama -= len(acked)
	p.nudgeLocked()
	for i, it := range acked {
		if !p.finishLocked(it) {
			acked[i] = nil // Shutdown gave up on it meanwhile and reports it
		}
	}
	aborted := p.aborted
	p.mu.Unlock()
	for _, it := range acked {
		if it != nil {
			it.done(nil)
			p.release(it, !aborted)
		}
	}
}

// settle reports the final outcome of a record (err nil = acked).
func (p *Producer) settle(it *inflight, err error, fromSarama bool) {
	p.mu.Lock()
	if fromSarama {
		p.inSarama--
		p.nudgeLocked()
	}
	ok := p.finishLocked(it)
	aborted := p.aborted
	p.mu.Unlock()
	if !ok {
		return
	}
	if err != nil && !errors.As(err, new(*DeliveryError)) {
		err = p.deliveryError(it, err)
	}
	it.done(err)
	p.release(it, !aborted)
}

func (p *Producer) deliveryError(it *inflight, err error) *DeliveryError {
	perm, reason := Classify(err)
	part := int32(-1)
	if !errors.Is(err, ErrAborted) {
		// The message is ours again (sarama returned it, or never had it). An aborted record
		// may still be inside sarama, which writes Partition.
		part = it.msg.Partition
	}
	return &DeliveryError{Topic: it.rec.Topic, Partition: part, Permanent: perm, Reason: reason, Err: err}
}

// failed handles a record sarama returned with an error: permanent errors are reported,
// everything else goes to recovery for an in-order re-send.
func (p *Producer) failed(it *inflight, err error) {
	perm, reason := Classify(err)
	isolate := perm && needsIsolation(err) && !it.alone
	if perm && !isolate {
		p.settle(it, err, true)
		return
	}
	// Read what the log needs now: once it is on the retry list the recovery goroutine may
	// hand the message back to sarama.
	topic, part, attempt := it.rec.Topic, it.msg.Partition, it.attempts+1
	p.mu.Lock()
	if p.aborted {
		p.mu.Unlock()
		p.settle(it, err, true)
		return
	}
	p.inSarama--
	it.attempts = attempt
	it.isolate = isolate
	p.retry = append(p.retry, it)
	entering := p.state != gateRecovering
	if entering {
		p.episodes++
	}
	p.state = gateRecovering
	p.nudgeLocked()
	p.mu.Unlock()
	if entering {
		p.log.Warn("kafka: delivery failed, holding new records and re-sending in order",
			"topic", topic, "partition", part, "reason", reason, "batch_refused", isolate, "error", err)
	} else {
		p.log.Debug("kafka: delivery failed during recovery", "topic", topic, "partition", part,
			"reason", reason, "attempt", attempt, "error", err)
	}
}
