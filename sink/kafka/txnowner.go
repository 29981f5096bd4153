package kafka

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// Who holds a transactional id (DescribeTransactions, KIP-664, Kafka 3.0+).
//
// A producer that is replaced mid-run (its commit had an unknown outcome, its abort failed, it
// broke) initialises the transactional id again, and an initialisation fences whoever holds the
// id. That is right when the holder is this instance's broken producer, and wrong when another
// instance initialised the id in the meantime but the broker told this one something other than
// PRODUCER_FENCED (Apache Kafka 4.4 answered an EndTxn that raced another instance's
// InitProducerId with UNKNOWN_SERVER_ERROR): the replacement would fence the instance that took
// over. So NewTxn records the producer id and epoch the coordinator gave it, and a replacement
// (TxnOptions.Succeeds) first checks that the coordinator still holds exactly those.
//
// The epoch is stable over a producer's life with the transaction protocol sarama speaks
// (EndTxn ≤ v3, KIP-98 transactions): it changes on InitProducerId and when the coordinator
// aborts a transaction after its timeout (accepted: timedOut). sarama bumps it itself
// (InitProducerId with the current id and epoch, KIP-360) when a transaction ends after an
// abortable error; TxnProducer then describes again (learnEpoch). Left open: another instance's
// initialisation between the check and the replacement's own InitProducerId (milliseconds) or
// seen while its fencing abort is still under way (the check passes as for a timeout), and a
// bump whose response was lost (the replacement then stops as fenced, loudly; a restart resumes
// from the committed position).

// TxnEpoch is one initialisation of a transactional id: the producer id and epoch its
// coordinator handed out.
type TxnEpoch struct {
	ProducerID int64
	Epoch      int16
}

func (e TxnEpoch) String() string {
	return fmt.Sprintf("producer id %d epoch %d", e.ProducerID, e.Epoch)
}

// errTxnIDNotFound is TRANSACTIONAL_ID_NOT_FOUND (105): the coordinator holds no state for the id.
const errTxnIDNotFound = sarama.KError(105)

// describeTxn asks the id's coordinator which producer id and epoch hold it now; found is false
// when the coordinator knows no such id. It opens a client of its own: sarama sends
// DescribeTransactions only with Version ≥ 3.0, and the producers speak 2.8 (config.go).
func (c Config) describeTxn(id string) (cur TxnEpoch, state string, found bool, err error) {
	sc, err := c.saramaConfig(&control{min: c.RetryBackoffMin, max: c.RetryBackoffMax})
	if err != nil {
		return TxnEpoch{}, "", false, err
	}
	sc.Version = sarama.V3_0_0_0
	client, err := sarama.NewClient(c.Brokers, sc)
	if err != nil {
		return TxnEpoch{}, "", false, fmt.Errorf("kafka.brokers %v: %w", c.Brokers, err)
	}
	defer client.Close()
	for attempt := 1; ; attempt++ {
		cur, state, found, err = describeOnce(client, id)
		if err == nil {
			return cur, state, found, nil
		}
		if attempt == 3 || !coordinatorMoving(err) {
			return TxnEpoch{}, "", false, fmt.Errorf("kafka: DescribeTransactions of transactional id %q: %w", id, err)
		}
		_ = client.RefreshTransactionCoordinator(id)
	}
}

// coordinatorMoving reports errors that mean "ask the coordinator again, after a refresh".
func coordinatorMoving(err error) bool {
	return errors.Is(err, sarama.ErrNotCoordinatorForConsumer) || errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) ||
		errors.Is(err, sarama.ErrOffsetsLoadInProgress)
}

func describeOnce(client sarama.Client, id string) (TxnEpoch, string, bool, error) {
	coord, err := client.TransactionCoordinator(id)
	if err != nil {
		return TxnEpoch{}, "", false, err
	}
	res, err := coord.DescribeTransactions(&sarama.DescribeTransactionsRequest{TransactionalIDs: []string{id}})
	if err != nil {
		_ = coord.Close()
		return TxnEpoch{}, "", false, err
	}
	for _, st := range res.TransactionStates {
		if st.TransactionalID != id {
			continue
		}
		switch st.ErrorCode {
		case sarama.ErrNoError:
			return TxnEpoch{ProducerID: st.ProducerID, Epoch: st.ProducerEpoch}, st.TransactionState, true, nil
		case errTxnIDNotFound:
			return TxnEpoch{}, "", false, nil
		default:
			return TxnEpoch{}, "", false, st.ErrorCode
		}
	}
	return TxnEpoch{}, "", false, errors.New("the coordinator's answer does not name the transactional id")
}

// checkStillHeld returns nil when the coordinator holds id with prev (or knows no such id),
// and an error wrapping sarama.ErrProducerFenced when another producer initialised it since.
func (c Config) checkStillHeld(id string, prev TxnEpoch) error {
	cur, state, found, err := c.describeTxn(id)
	if err != nil {
		return fmt.Errorf("kafka: before initialising transactional id %q again, cannot check that no other producer took it over: %w", id, err)
	}
	if !found || cur == prev || timedOut(prev, cur, state) {
		return nil
	}
	return fmt.Errorf("kafka: transactional id %q (kafka.transactional_id) is held by %s (state %s), no longer by this instance's %s: "+
		"another producer initialised it since, and initialising it again would fence that one: %w", id, cur, state, prev, sarama.ErrProducerFenced)
}

// timedOut reports whether cur is what the coordinator leaves when it aborts prev's open
// transaction itself (transaction.timeout.ms: the abort bumps the epoch once, KIP-360) and no
// producer initialised the id since: an InitProducerId leaves the state Empty or, with a
// transaction open, bumps the epoch twice (the fencing abort, then its own).
func timedOut(prev, cur TxnEpoch, state string) bool {
	if cur.ProducerID != prev.ProducerID || cur.Epoch != prev.Epoch+1 {
		return false
	}
	switch state {
	case "PrepareEpochFence", "PrepareAbort", "CompleteAbort":
		return true
	}
	return false
}

// Epoch is the producer id and epoch the coordinator holds for this producer; ok is false when
// they could not be learnt (DescribeTransactions refused or failed), and then a replacement
// cannot check that no other producer took the id over.
func (p *TxnProducer) Epoch() (e TxnEpoch, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch, p.epochKnown
}

// learnEpoch describes the id after this producer's InitProducerId (or sarama's epoch bump).
func (p *TxnProducer) learnEpoch(what string) {
	cur, state, found, err := p.cfg.describeTxn(p.id)
	p.mu.Lock()
	p.epoch, p.epochKnown = cur, err == nil && found
	p.mu.Unlock()
	switch {
	case err != nil:
		p.log.Warn("cannot learn which producer epoch holds the transactional id: a replacement producer will initialise it without checking "+
			"that no other instance took it over (grant DESCRIBE on the transactional id)", "after", what, "transactional_id", p.id, "err", err)
	case !found:
		p.log.Warn("the coordinator does not know the transactional id just initialised", "after", what, "transactional_id", p.id)
	default:
		p.log.Debug("transactional id held", "after", what, "transactional_id", p.id, "producer_id", cur.ProducerID, "epoch", cur.Epoch, "state", state)
	}
}
