package app

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/sink/kafka"
)

// outboxd check (exactly_once) compares kafka.transaction_timeout with the brokers'
// transaction.max.timeout.ms: above it fails with the fix, within it passes.
func TestCheckTxnTimeout(t *testing.T) {
	b := testenv.NewBroker(t, kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "5000"}))
	adm, err := kafka.Dial(kafka.Config{Brokers: []string{b.Addr()}}, 2, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	c := &config.Config{}
	c.Kafka.TransactionTimeout = 10 * time.Second
	r := checkTxnTimeout(adm, c)
	if r.OK || !strings.Contains(r.Reason, "5s") || !strings.Contains(r.Fix, "kafka.transaction_timeout") {
		t.Fatalf("10s against a 5s maximum: %+v", r)
	}
	c.Kafka.TransactionTimeout = 4 * time.Second
	if r := checkTxnTimeout(adm, c); !r.OK || !strings.Contains(r.Reason, "within") {
		t.Fatalf("4s against a 5s maximum: %+v", r)
	}
}
