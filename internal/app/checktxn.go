package app

import (
	"fmt"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/sink/kafka"
)

// checkTxnTimeout (exactly_once): kafka.transaction_timeout is within the brokers'
// transaction.max.timeout.ms (a larger one is refused when the producer initialises). A broker
// whose configuration cannot be described is reported, not failed.
func checkTxnTimeout(adm *kafka.Admin, c *config.Config) CheckResult {
	name := "kafka transaction timeout"
	want := c.Kafka.TransactionTimeout
	values, err := adm.BrokerConfig("transaction.max.timeout.ms")
	if err != nil {
		return CheckResult{Name: name, OK: true, Reason: fmt.Sprintf("%v (the brokers' transaction.max.timeout.ms could not be read: %v)", want, err)}
	}
	limit := time.Duration(0)
	for _, v := range values {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			if d := time.Duration(ms) * time.Millisecond; limit == 0 || d < limit {
				limit = d
			}
		}
	}
	switch {
	case limit == 0:
		return CheckResult{Name: name, OK: true, Reason: fmt.Sprintf("%v (the brokers did not report transaction.max.timeout.ms)", want)}
	case want > limit:
		return CheckResult{Name: name, Reason: fmt.Sprintf("kafka.transaction_timeout %v is above the brokers' transaction.max.timeout.ms %v: the producer would be refused", want, limit),
			Fix: "lower kafka.transaction_timeout, or raise transaction.max.timeout.ms on every broker"}
	}
	return CheckResult{Name: name, OK: true, Reason: fmt.Sprintf("%v, within the brokers' transaction.max.timeout.ms %v; the largest source transaction must be delivered within it", want, limit)}
}
