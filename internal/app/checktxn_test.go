package app

import (
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/testenv"
)

// outboxd check (exactly_once) compares kafka.transaction_timeout with the brokers'
// transaction.max.timeout.ms: above it fails with the fix, within it passes.
func TestCheckTxnTimeout(t *testing.T) {
	b := testenv.NewBroker(t, kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "5000"}))
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	client, err := sarama.NewClient([]string{b.Addr()}, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := &config.Config{}
	c.Kafka.TransactionTimeout = 10 * time.Second
	r := checkTxnTimeout(client, c)
	if r.OK || !strings.Contains(r.Reason, "5s") || !strings.Contains(r.Fix, "kafka.transaction_timeout") {
		t.Fatalf("10s against a 5s maximum: %+v", r)
	}
	c.Kafka.TransactionTimeout = 4 * time.Second
	if r := checkTxnTimeout(client, c); !r.OK || !strings.Contains(r.Reason, "within") {
		t.Fatalf("4s against a 5s maximum: %+v", r)
	}
}
