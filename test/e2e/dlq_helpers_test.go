package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// Helpers of the dead-letter end-to-end tests (dlq_e2e_test.go).

// dlqRow is one outbox row to insert; nil means NULL.
type dlqRow struct {
	aggType, aggID *string
	payload        string
}

func sp(s string) *string { return &s }

func goodRow(i int) dlqRow {
	return dlqRow{aggType: sp("order"), aggID: sp("g"), payload: fmt.Sprintf(`{"n": %d}`, i)}
}

// insertTx commits rows in one transaction and returns their ids.
func (e *env) insertTx(c *pgx.Conn, rows ...dlqRow) []string {
	e.t.Helper()
	ctx := context.Background()
	tx, err := c.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		var id string
		if err := tx.QueryRow(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES (gen_random_uuid(), $1::text, $2::text, 'created', $3::jsonb) RETURNING id::text`, r.aggType, r.aggID, r.payload).Scan(&id); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) walLSN(c *pgx.Conn) string {
	e.t.Helper()
	var s string
	if err := c.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// editConfig replaces old by new in the config file (the env's YAML already has the top-level
// kafka and http keys, which cannot be given twice).
func (e *env) editConfig(old, new string) {
	e.t.Helper()
	b, err := os.ReadFile(e.cfgPath)
	if err != nil || !bytes.Contains(b, []byte(old)) {
		e.t.Fatalf("config has no %q (%v)", old, err)
	}
	writeFile(e.t, e.cfgPath, strings.Replace(string(b), old, new, 1))
}

// dlqRun runs `outboxd dlq ARGS -c CONFIG` and returns stdout, stderr and the exit status.
func (e *env) dlqRun(args ...string) (string, string, int) {
	e.t.Helper()
	args = append(append([]string{"dlq"}, args...), "-c", e.cfgPath)
	cmd := exec.Command(binPath, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func clusterAdmin(t *testing.T, addr string) sarama.ClusterAdmin {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	a, err := sarama.NewClusterAdmin([]string{addr}, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func topicConfig(t *testing.T, a sarama.ClusterAdmin, topic, key string) string {
	t.Helper()
	var entries []sarama.ConfigEntry
	// A topic created a moment ago may not be in the answering broker's metadata yet (seen on
	// Apache Kafka under load: UNKNOWN_TOPIC_OR_PARTITION right after CreateTopic).
	err := harness.Until(30*time.Second, 100*time.Millisecond, func() (err error) {
		entries, err = a.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{key}})
		if err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return harness.Final(err)
		}
		return err
	})
	if err != nil {
		t.Fatalf("describe config %s of topic %s: %v", key, topic, err)
	}
	for _, e := range entries {
		if e.Name == key {
			return e.Value
		}
	}
	return ""
}

// dlqMetric returns outboxd_dlq_events_total by reason from /metrics.
func dlqMetric(t *testing.T, addr string) map[string]int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^outboxd_dlq_events_total\{reason="([a-z_]+)"\} (\d+)$`).FindAllStringSubmatch(string(body), -1) {
		out[m[1]], _ = strconv.Atoi(m[2])
	}
	return out
}

// dlqPoison is the poison row written inside a transaction of good rows, and how it must fail.
type dlqPoison struct {
	name, reason, topic string
	row                 dlqRow
}

func byEventID(recs []testenv.Consumed) map[string]testenv.Consumed {
	m := map[string]testenv.Consumed{}
	for _, r := range recs {
		m[r.Header("id")] = r
	}
	return m
}
