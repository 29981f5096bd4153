package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// End-to-end tests of the binary against Apache Kafka 4.4 with TLS, SASL and ACLs: one node
// (testenv.NewSecureApacheKafka) with an SSL listener that requires a client certificate, a
// SASL_SSL listener with SCRAM-SHA-512, and the StandardAuthorizer with
// allow.everyone.if.no.acl.found=false. The certificates are made by the test; the SCRAM users
// and ACLs are created with Kafka's admin API. The subtests share the node (one JVM start for
// the file) and keep apart by topic prefix (sec.<case>.), transactional id and principal. The
// test itself reads and administers the cluster on the PLAINTEXT listener, whose principal
// (ANONYMOUS) is the super user.

const (
	secClientCN  = "outboxd-client" // the client certificate's CN: principal User:outboxd-client on SSL
	secUser      = "outboxd"        // SCRAM user with every needed ACL
	secPassword  = "Scr4m-pa55word-7f3a9c"
	secLimited   = "limited" // SCRAM user for the ACL faults
	secLimitedPW = "L1mited-pa55word-0be4d2"
)

// secGrants are the ACLs of a principal allowed to do everything outboxd does under prefix
// ("sec.<case>." topics, "sec-<case>" transactional ids).
func secGrants(principal, topicPrefix, txnPrefix string) []testenv.ACL {
	topic := func(op kmsg.ACLOperation) testenv.ACL {
		return testenv.ACL{Principal: principal, Resource: kmsg.ACLResourceTypeTopic, Name: topicPrefix, Prefixed: true, Op: op}
	}
	return []testenv.ACL{
		topic(kmsg.ACLOperationWrite), topic(kmsg.ACLOperationRead), topic(kmsg.ACLOperationDescribe),
		topic(kmsg.ACLOperationCreate), topic(kmsg.ACLOperationDescribeConfigs),
		{Principal: principal, Resource: kmsg.ACLResourceTypeTransactionalId, Name: txnPrefix, Prefixed: true, Op: kmsg.ACLOperationWrite},
		{Principal: principal, Resource: kmsg.ACLResourceTypeTransactionalId, Name: txnPrefix, Prefixed: true, Op: kmsg.ACLOperationDescribe},
	}
}

// TestApacheSecurity runs outboxd against Apache Kafka over SSL (client certificate) and
// SASL_SSL (SCRAM-SHA-512), the TLS/SASL mistakes an operator makes, and missing ACLs.
func TestApacheSecurity(t *testing.T) {
	// Its own node (TLS listeners, an authorizer) on any OUTBOXD_TEST_KAFKA, but run once: in the
	// Apache Kafka pass of .ci/test.
	apacheOnly(t, "TLS, SASL and ACLs need the real broker (it starts its own node with SSL, SASL_SSL and an authorizer)")
	start := time.Now()
	k := testenv.NewSecureApacheKafka(t, secClientCN, testenv.ApacheOpts{})
	t.Logf("broker up in %v", time.Since(start).Round(time.Millisecond))
	for _, u := range [][2]string{{secUser, secPassword}, {secLimited, secLimitedPW}} {
		if err := k.AddSCRAMUser(u[0], u[1]); err != nil {
			t.Fatal(err)
		}
	}
	var grants []testenv.ACL
	for _, p := range []string{testenv.Principal(secClientCN), testenv.Principal(secUser)} {
		grants = append(grants, secGrants(p, "sec.", "sec-")...)
	}
	if err := k.Grant(grants...); err != nil {
		t.Fatal(err)
	}
	t.Logf("users and ACLs in %v", time.Since(start).Round(time.Millisecond))
	s := &secSuite{k: k, secrets: [][]byte{[]byte(secPassword), []byte(secLimitedPW)}}
	for _, key := range [][]byte{k.Certs.ClientKeyPEM, k.Certs.BrokerKeyPEM} {
		s.secrets = append(s.secrets, keyLines(key)...)
	}
	t.Run("SSL", s.testSSL)
	t.Run("SASL_SSL", s.testSASL)
	t.Run("Mistakes", s.testMistakes)
	t.Run("ACLNoTopicWrite", s.testNoTopicWrite)
	t.Run("ACLExactlyOnce", s.testEOSACLs)
}

type secSuite struct {
	k       *testenv.SecureKafka
	secrets [][]byte // password and key bytes: none may appear in any output
}

// keyLines are the base64 lines of a PEM private key (each one is secret).
func keyLines(pemKey []byte) [][]byte {
	var out [][]byte
	for _, l := range bytes.Split(pemKey, []byte("\n")) {
		if len(l) >= 16 && !bytes.HasPrefix(l, []byte("-----")) {
			out = append(out, l)
		}
	}
	return out
}

// noSecrets fails when out holds a password or a line of a private key.
func (s *secSuite) noSecrets(t *testing.T, what, out string) {
	t.Helper()
	for _, sec := range s.secrets {
		if strings.Contains(out, string(sec)) {
			t.Errorf("%s shows a secret (%d bytes starting %q):\n%s", what, len(sec), sec[:4], out)
		}
	}
}

// secEnv is an env whose outboxd reaches the broker on port with kafkaYAML (the tls/sasl
// settings, indented under kafka:) and routes to sec.<name>.<aggregatetype>, dead-letters to
// sec.<name>.dlq.
func (s *secSuite) secEnv(t *testing.T, name string, port int, kafkaYAML string) *env {
	t.Helper()
	e := newEnvOn(t, &testenv.Broker{Port: port}, fmt.Sprintf("outbox:\n  topic: sec.%s.${routedByValue}\n", name))
	e.editConfig("kafka:\n", fmt.Sprintf("kafka:\n  dlq_topic: sec.%s.dlq\n%s", name, kafkaYAML))
	return e
}

func (s *secSuite) sslYAML(caFile string, withCert bool) string {
	y := "  tls:\n    ca_file: " + caFile + "\n"
	if withCert {
		y += "    cert_file: " + s.k.Certs.ClientCert + "\n    key_file: " + s.k.Certs.ClientKey + "\n"
	}
	return y
}

func (s *secSuite) saslYAML(user, password string) string {
	return fmt.Sprintf("  tls:\n    ca_file: %s\n  sasl:\n    mechanism: %s\n    username: %s\n    password: %s\n",
		s.k.Certs.CAFile, testenv.SCRAMMechanism, user, password)
}

// outboxd runs the binary with args (and -c cfg) and returns stdout, stderr and the status.
func outboxd(t *testing.T, cfg string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append(args, "-c", cfg)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// records reads topics matching pattern on the PLAINTEXT listener (read_committed).
func (s *secSuite) records(t *testing.T, pattern string, want int, d time.Duration) []testenv.Consumed {
	t.Helper()
	return testenv.Consume(t, s.k.Addr(), pattern, want, d)
}

// deliverAndReplay is the happy path over one listener: check passes; run delivers 20 rows to
// sec.<name>.order and dead-letters a row too big for sec.<name>.big (max.message.bytes 512,
// and the payload barely compresses);
// dlq tail shows it; after the topic's limit is raised, dlq replay --all delivers it. Every
// output is free of secrets. With eos, delivery is exactly_once (offsets in Kafka).
func (s *secSuite) deliverAndReplay(t *testing.T, name string, e *env, eos bool) {
	big := "sec." + name + ".big"
	if err := s.k.CreateTopic(big, 3, map[string]string{"max.message.bytes": "512"}); err != nil {
		t.Fatal(err)
	}
	if eos {
		e.editConfig("kafka:\n", fmt.Sprintf("kafka:\n  delivery: exactly_once\n  transactional_id: sec-%s\n", name))
		e.editConfig("offsets:\n", fmt.Sprintf("offsets:\n  store: kafka\n  topic: sec.%s.offsets\n", name))
	}
	out, errOut, code := outboxd(t, e.cfgPath, "check")
	s.noSecrets(t, "check", out+errOut)
	if code != 0 || !strings.Contains(out, "OK   kafka reachable") {
		t.Fatalf("check over %s: exit %d\n%s%s", name, code, out, errOut)
	}

	p := e.start()
	c := e.conn()
	var want []string
	for i := 0; i < 10; i++ {
		want = append(want, e.insert(c, fmt.Sprintf("K%d", i%3), 2)...)
	}
	bigID := e.insertRows(c, 1, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES (gen_random_uuid(), 'big', 'B', 'x', jsonb_build_object('pad', (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 80) i))) RETURNING id::text`,
		func(int) []any { return nil }, nil)[0]
	want = append(want, e.insert(c, "K0", 1)...)
	got := s.records(t, `sec\.`+name+`\.order`, len(want), 60*time.Second)
	if n, dups := countDistinct(got); n != len(want) || dups != 0 || len(hasAll(got, want)) > 0 {
		t.Fatalf("over %s: %d distinct records (%d duplicates) on sec.%s.order, want %d", name, n, dups, name, len(want))
	}
	harness.WaitFor(t, 30*time.Second, "the big row dead-lettered", func() bool {
		return len(s.records(t, `sec\.`+name+`\.dlq`, 1, time.Second)) == 1
	})
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d:\n%s", code, p.Out.String())
	}
	s.noSecrets(t, "run's log", p.Out.String())

	out, errOut, code = outboxd(t, e.cfgPath, "dlq", "tail")
	s.noSecrets(t, "dlq tail", out+errOut)
	if code != 0 || !strings.Contains(out, "reason=record_too_large") || !strings.Contains(out, "id="+bigID) {
		t.Fatalf("dlq tail over %s: exit %d\n%s%s", name, code, out, errOut)
	}
	if err := s.k.SetTopicConfig(big, "max.message.bytes", "1048576"); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = outboxd(t, e.cfgPath, "dlq", "replay", "--all", "--timeout", "30s")
	s.noSecrets(t, "dlq replay", out+errOut)
	if code != 0 || !strings.Contains(out, "replayed dlq=") || !strings.Contains(out, "1 replayed, 0 failed") {
		t.Fatalf("dlq replay over %s: exit %d\n%s%s", name, code, out, errOut)
	}
	if r := s.records(t, `sec\.`+name+`\.big`, 1, 20*time.Second); len(r) != 1 || r[0].Header("id") != bigID {
		t.Fatalf("after replay sec.%s.big holds %d records, want the big row %s", name, len(r), bigID)
	}
}

// testSSL: run, check, dlq tail and dlq replay over SSL with a client certificate.
func (s *secSuite) testSSL(t *testing.T) {
	e := s.secEnv(t, "ssl", s.k.SSLPort, s.sslYAML(s.k.Certs.CAFile, true))
	s.deliverAndReplay(t, "ssl", e, false)
}

// testSASL: the same over SASL_SSL with SCRAM-SHA-512, with exactly_once delivery (the
// transactional producer and the offsets topic over SASL too).
func (s *secSuite) testSASL(t *testing.T) {
	e := s.secEnv(t, "sasl", s.k.SASLPort, s.saslYAML(secUser, secPassword))
	s.deliverAndReplay(t, "sasl", e, true)
}

const hungUp = "kafka.tls / kafka.sasl: the broker closed the connection before answering, as a listener does " +
	"when the client's security does not match it (this client: "

// mistake is one TLS/SASL misconfiguration and the config key its error must name.
type mistake struct {
	name string
	port int
	yaml string
	key  string // the config key the messages must name
}

// testMistakes: a wrong CA, a wrong SASL password (or user), a missing client certificate, and
// a client whose TLS/SASL does not match the listener each make check, run, dlq tail and dlq
// replay fail (exit 1) with a message naming the config key at fault, and no output shows a
// secret.
func (s *secSuite) testMistakes(t *testing.T) {
	e := s.secEnv(t, "mistakes", s.k.SSLPort, "")
	base, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []mistake{
		{"wrong CA", s.k.SSLPort, s.sslYAML(s.k.Certs.OtherCAFile, true), "kafka.tls.ca_file"},
		{"wrong CA on SASL_SSL", s.k.SASLPort, strings.Replace(s.saslYAML(secUser, secPassword), s.k.Certs.CAFile, s.k.Certs.OtherCAFile, 1), "kafka.tls.ca_file"},
		{"wrong password", s.k.SASLPort, s.saslYAML(secUser, "Wr0ng-pa55word-e81c"), "kafka.sasl.password"},
		{"unknown user", s.k.SASLPort, s.saslYAML("nobody", secPassword), "kafka.sasl.password"},
		{"missing client certificate", s.k.SSLPort, s.sslYAML(s.k.Certs.CAFile, false), "kafka.tls.cert_file"},
		// The listener hangs up: the hint names both keys and what each listener needs.
		{"TLS to the PLAINTEXT listener", s.k.Port, s.sslYAML(s.k.Certs.CAFile, true), hungUp + "SSL)"},
		{"no TLS to the SSL listener", s.k.SSLPort, "", hungUp + "PLAINTEXT)"},
		{"no SASL to the SASL_SSL listener", s.k.SASLPort, s.sslYAML(s.k.Certs.CAFile, false), hungUp + "SSL)"},
	} {
		m := m
		cfg := filepath.Join(e.dir, strings.ReplaceAll(m.name, " ", "-")+".yaml")
		y := strings.Replace(string(base), e.broker.Addr(), fmt.Sprintf("127.0.0.1:%d", m.port), 1)
		writeFile(t, cfg, strings.Replace(y, "kafka:\n", "kafka:\n"+m.yaml, 1))
		secrets := append([][]byte{[]byte("Wr0ng-pa55word-e81c")}, s.secrets...)
		t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
			t.Parallel() // the commands mostly wait on the broker's answers and sarama's backoff
			check := func(cmd, out string, code int) {
				t.Helper()
				for _, sec := range secrets {
					if strings.Contains(out, string(sec)) {
						t.Errorf("%s: %s shows a secret:\n%s", m.name, cmd, out)
					}
				}
				if code != 1 || !strings.Contains(out, m.key) {
					t.Errorf("%s: %s exit %d, want 1 and a message naming %s:\n%s", m.name, cmd, code, m.key, out)
				}
				t.Logf("%s: %s says:\n%s", m.name, cmd, out)
			}
			out, errOut, code := outboxd(t, cfg, "check")
			check("check", out+errOut, code)
			out, errOut, code = outboxd(t, cfg, "run")
			check("run", out+errOut, code)
			out, errOut, code = outboxd(t, cfg, "dlq", "tail")
			check("dlq tail", out+errOut, code)
			out, errOut, code = outboxd(t, cfg, "dlq", "replay", "--all", "--timeout", "10s")
			check("dlq replay", out+errOut, code)
		})
	}
}
