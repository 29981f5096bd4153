package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// Close stops accepting records, waits until every queued record's done has been called
// (however long transient failures take to clear), then closes sarama. It is
// Shutdown(context.Background()).
func (p *Producer) Close() error { return p.Shutdown(context.Background()) }

// Shutdown is Close bounded by ctx: if ctx ends first, every record not yet reported gets
// done(*DeliveryError wrapping ErrAborted) (from the result goroutine, as usual), sarama is
// told to give up, and Shutdown returns an error wrapping ctx.Err(). It may be called more than
// once and concurrently; each call waits (bounded by its own ctx) for the same shutdown.
func (p *Producer) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.closing)
		if p.outstanding == 0 && !p.drainedSent {
			p.drainedSent = true
			close(p.drained)
		}
	}
	p.mu.Unlock()

	var err error
	select {
	case <-p.drained:
	case <-ctx.Done():
		if n := p.abort(); n > 0 {
			err = fmt.Errorf("kafka: shutdown gave up with %d records unacknowledged: %w", n, ctx.Err())
		}
		<-p.drained // the result goroutine reports the aborted records
	}
	p.finalOnce.Do(func() {
		p.ctl.aborted.Store(true) // sarama's metadata retry loops end promptly
		p.ap.AsyncClose()
		p.mu.Lock()
		aborted := p.aborted
		p.mu.Unlock()
		<-p.recovDone
		if aborted {
			// sarama may still hold records for a dead cluster; closing the client makes its
			// goroutines fail fast instead of waiting for the cluster.
			_ = p.client.Close()
			return
		}
		<-p.resultDone
		_ = p.client.Close()
	})
	return err
}

// abort queues every outstanding record for done(ErrAborted) and returns how many; records
// sarama reports in the meantime keep their real outcome.
func (p *Producer) abort() int {
	n := 0
	p.abortOnce.Do(func() {
		p.ctl.aborted.Store(true)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.aborted = true
		close(p.abortCh)
		p.held, p.retry = nil, nil
		for it := p.list.next; it != &p.list; it = it.next {
			n++
			if !it.inLocal {
				it.inLocal = true
				it.err = ErrAborted
				p.local <- it // never blocks: at most one entry per outstanding record
			}
		}
		if n > 0 {
			p.log.Warn("kafka: shutdown timed out, reporting unacknowledged records as aborted", "records", n)
		}
	})
	return n
}

// Partitions returns the number of partitions of topic with one metadata request to the
// least loaded broker. It never creates the topic and never waits for an unreachable
// cluster longer than the network timeouts.
func (p *Producer) Partitions(topic string) (int32, error) {
	if err := ValidTopicName(topic); err != nil {
		return 0, err
	}
	b := p.client.LeastLoadedBroker()
	if b == nil {
		return 0, fmt.Errorf("kafka: partitions of topic %q: %w", topic, sarama.ErrOutOfBrokers)
	}
	req := sarama.NewMetadataRequest(p.client.Config().Version, []string{topic})
	req.AllowAutoTopicCreation = false
	resp, err := b.GetMetadata(req)
	if err != nil {
		return 0, fmt.Errorf("kafka: partitions of topic %q from broker %s: %w", topic, b.Addr(), err)
	}
	for _, t := range resp.Topics {
		if t.Name != topic {
			continue
		}
		if !errors.Is(t.Err, sarama.ErrNoError) {
			return 0, fmt.Errorf("kafka: partitions of topic %q: %w", topic, t.Err)
		}
		return int32(len(t.Partitions)), nil
	}
	return 0, fmt.Errorf("kafka: partitions of topic %q: %w", topic, sarama.ErrUnknownTopicOrPartition)
}

// Client is the producer's sarama client (for admin calls such as creating the DLQ topic).
// Do not close it. Its metadata refreshes retry while the cluster is unreachable (see
// SaramaConfig), so calls that refresh metadata can block for a long time.
func (p *Producer) Client() sarama.Client { return p.client }
