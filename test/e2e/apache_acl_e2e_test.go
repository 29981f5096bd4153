package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// The ACL faults of TestApacheSecurity (apache_security_e2e_test.go): the StandardAuthorizer with
// allow.everyone.if.no.acl.found=false, and the SCRAM user "limited" with only the ACLs each
// case grants.

// aclTopic is a topic ACL of the limited user.
func aclTopic(name string, prefixed bool, op kmsg.ACLOperation) testenv.ACL {
	return testenv.ACL{Principal: testenv.Principal(secLimited), Resource: kmsg.ACLResourceTypeTopic, Name: name, Prefixed: prefixed, Op: op}
}

// aclTxn is a transactional-id ACL of the limited user.
func aclTxn(name string, op kmsg.ACLOperation) testenv.ACL {
	return testenv.ACL{Principal: testenv.Principal(secLimited), Resource: kmsg.ACLResourceTypeTransactionalId, Name: name, Op: op}
}

// secIDs returns the id header of each record of topic, in the order read.
func secIDs(recs []testenv.Consumed, topic string) []string {
	var out []string
	for _, r := range recs {
		if r.Topic == topic {
			out = append(out, r.Header("id"))
		}
	}
	return out
}

// testNoTopicWrite (at_least_once): the limited user may describe, read and create the topics
// under sec.acl. and write sec.acl.order, but neither the outbox topic sec.acl.secret nor, at
// first, the DLQ. What outboxd does, none of it silent:
//   - a record Kafka refuses with TOPIC_AUTHORIZATION_FAILED is permanent for that record: it
//     goes to the DLQ (reason topic_authorization_failed, the message naming the topic and the
//     missing WRITE), one WARN line each;
//   - while the DLQ cannot be written either, outboxd exits 1 naming kafka.dlq_topic and the
//     missing WRITE, and stores no position past the refused row;
//   - once the DLQ is writable, every refused row is in it (none skipped); once WRITE on the
//     topic is granted, dlq replay --all delivers each of them, in commit order, and new rows go
//     straight to the topic. Nothing is lost.
func (s *secSuite) testNoTopicWrite(t *testing.T) {
	must(t, s.k.Grant(aclTopic("sec.acl.", true, kmsg.ACLOperationDescribe), aclTopic("sec.acl.", true, kmsg.ACLOperationRead),
		aclTopic("sec.acl.", true, kmsg.ACLOperationCreate), aclTopic("sec.acl.order", false, kmsg.ACLOperationWrite)))
	e := s.secEnv(t, "acl", s.k.SASLPort, s.saslYAML(secLimited, secLimitedPW))
	p := e.start()
	c := e.conn()
	var order, secret []string
	order = append(order, e.insert(c, "O1", 2)...)
	beforeSecret := lsn(t, e.walLSN(c))
	secret = append(secret, e.insertAgg(c, "secret", "S1", 2)...)
	order = append(order, e.insert(c, "O2", 2)...)
	if code := p.WaitExit(t, 60*time.Second, "a dead letter the DLQ refuses"); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	log := p.Out.String()
	s.noSecrets(t, "run's log", log)
	for _, want := range []string{"dead-letter topic sec.acl.dlq cannot be written", "kafka.dlq_topic",
		`the ACLs do not let outboxd's principal write to topic \"sec.acl.dlq\": grant it WRITE and DESCRIBE on that topic`} {
		if !strings.Contains(log, want) {
			t.Fatalf("the exit does not say %q:\n%s", want, log)
		}
	}
	if stored := lsn(t, e.storedPosition()); stored > beforeSecret {
		t.Fatalf("stored position %s is past the refused rows (they start after %s)", stored, beforeSecret)
	}
	if got := secIDs(s.records(t, `sec\.acl\..*`, 0, time.Second), "sec.acl.secret"); len(got) != 0 {
		t.Fatalf("sec.acl.secret holds %d records without WRITE", len(got))
	}

	must(t, s.k.Grant(aclTopic("sec.acl.dlq", false, kmsg.ACLOperationWrite)))
	p = e.start()
	secret = append(secret, e.insertAgg(c, "secret", "S1", 1)...)
	order = append(order, e.insert(c, "O1", 1)...)
	harness.WaitFor(t, 60*time.Second, "every refused row in the DLQ, every other row delivered", func() bool {
		recs := s.records(t, `sec\.acl\..*`, 0, time.Second)
		return len(hasAll(recs, order)) == 0 && len(secIDs(recs, "sec.acl.dlq")) >= len(secret)
	})
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d:\n%s", code, p.Out.String())
	}
	log = p.Out.String()
	s.noSecrets(t, "run's log", log)
	for _, id := range secret {
		if !regexp.MustCompile(`level=WARN msg="dead-lettering record" reason=topic_authorization_failed .*id=` + id).MatchString(log) {
			t.Errorf("no WARN line dead-lettering %s:\n%s", id, log)
		}
	}
	sameSet(t, "dead letters of sec.acl.dlq", secIDs(s.records(t, `sec\.acl\.dlq`, 0, time.Second), "sec.acl.dlq"), secret)
	out, errOut, code := outboxd(t, e.cfgPath, "dlq", "tail")
	s.noSecrets(t, "dlq tail", out+errOut)
	if code != 0 || strings.Count(out, "reason=topic_authorization_failed") != len(secret) ||
		!strings.Contains(out, "grant it WRITE and DESCRIBE on that topic") {
		t.Fatalf("dlq tail: exit %d\n%s%s", code, out, errOut)
	}

	must(t, s.k.Grant(aclTopic("sec.acl.secret", false, kmsg.ACLOperationWrite)))
	out, errOut, code = outboxd(t, e.cfgPath, "dlq", "replay", "--all", "--timeout", "30s")
	s.noSecrets(t, "dlq replay", out+errOut)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d replayed, 0 failed", len(secret))) {
		t.Fatalf("dlq replay after the grant: exit %d\n%s%s", code, out, errOut)
	}
	p = e.start()
	secret = append(secret, e.insertAgg(c, "secret", "S1", 1)...)
	harness.WaitFor(t, 30*time.Second, "a new row to sec.acl.secret", func() bool {
		return len(hasAll(s.records(t, `sec\.acl\.secret`, len(secret), time.Second), secret)) == 0
	})
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	recs := s.records(t, `sec\.acl\..*`, 0, 1500*time.Millisecond)
	if missing := hasAll(recs, order); len(missing) > 0 {
		t.Fatalf("%d rows of sec.acl.order lost", len(missing))
	}
	// Every refused row exactly once on its topic, in commit order (one key, one partition).
	if got := secIDs(recs, "sec.acl.secret"); strings.Join(got, ",") != strings.Join(secret, ",") {
		t.Fatalf("sec.acl.secret holds %v, want %v (each refused row once, in commit order)", got, secret)
	}
}

// testEOSACLs (exactly_once): the limited user may describe, read and create the topics under
// sec.acleos. and write sec.acleos.order, the offsets topic and the DLQ, but not
// sec.acleos.secret; after a first run it also loses the transactional id sec-acleos.
//   - a row for sec.acleos.secret fails its transaction (TOPIC_AUTHORIZATION_FAILED); outboxd
//     aborts and redoes the transaction with that row dead-lettered (WARN line, reason
//     topic_authorization_failed): read_committed sees every other row once, the refused one
//     once in the DLQ, nothing on the refused topic;
//   - without WRITE and DESCRIBE on the transactional id, outboxd exits 1 naming the missing
//     permission and kafka.transactional_id, having written nothing; once they are granted it
//     delivers every row committed meanwhile, exactly once for a read_committed reader.
func (s *secSuite) testEOSACLs(t *testing.T) {
	txn := []testenv.ACL{aclTxn("sec-acleos", kmsg.ACLOperationWrite), aclTxn("sec-acleos", kmsg.ACLOperationDescribe)}
	grants := append(txn, aclTopic("sec.acleos.", true, kmsg.ACLOperationDescribe), aclTopic("sec.acleos.", true, kmsg.ACLOperationRead),
		aclTopic("sec.acleos.", true, kmsg.ACLOperationCreate))
	for _, w := range []string{"sec.acleos.order", "sec.acleos.offsets", "sec.acleos.dlq"} {
		grants = append(grants, aclTopic(w, false, kmsg.ACLOperationWrite))
	}
	must(t, s.k.Grant(grants...))
	e := s.secEnv(t, "acleos", s.k.SASLPort, s.saslYAML(secLimited, secLimitedPW))
	e.editConfig("kafka:\n", "kafka:\n  delivery: exactly_once\n  transactional_id: sec-acleos\n")
	e.editConfig("offsets:\n", "offsets:\n  store: kafka\n  topic: sec.acleos.offsets\n")
	p := e.start()
	c := e.conn()
	want := e.insert(c, "E1", 3)
	refused := e.insertAgg(c, "secret", "E1", 1)[0]
	want = append(want, e.insert(c, "E1", 1)...)
	harness.WaitFor(t, 60*time.Second, "first rows delivered, the refused one dead-lettered", func() bool {
		recs := s.records(t, `sec\.acleos\.(order|dlq)`, len(want)+1, time.Second)
		return len(hasAll(recs, want)) == 0 && len(hasAll(recs, []string{refused})) == 0
	})
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	if !regexp.MustCompile(`level=WARN msg="dead-lettering record" reason=topic_authorization_failed .*id=` + refused).MatchString(p.Out.String()) {
		t.Fatalf("no WARN line dead-lettering %s:\n%s", refused, p.Out.String())
	}
	recs := s.records(t, `sec\.acleos\..*`, 0, 1500*time.Millisecond)
	if dl := secIDs(recs, "sec.acleos.dlq"); len(dl) != 1 || dl[0] != refused {
		t.Fatalf("read_committed DLQ holds %v, want the refused row %s once", dl, refused)
	}
	if got := secIDs(recs, "sec.acleos.secret"); len(got) != 0 {
		t.Fatalf("sec.acleos.secret holds %d records without WRITE", len(got))
	}
	first := len(want)

	must(t, s.k.Revoke(txn...))
	for i := 0; i < 4; i++ {
		want = append(want, e.insert(c, fmt.Sprintf("E%d", i%2), 2)...)
	}
	p = e.startWith(false)
	if code := p.WaitExit(t, 60*time.Second, "the transactional id is refused"); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	log := p.Out.String()
	t.Logf("without the transactional-id ACL:\n%s", log)
	s.noSecrets(t, "run's log", log)
	for _, w := range []string{"kafka.transactional_id", "sec-acleos", "grant WRITE and DESCRIBE"} {
		if !strings.Contains(log, w) {
			t.Fatalf("the exit does not say %q:\n%s", w, log)
		}
	}
	if got := secIDs(s.records(t, `sec\.acleos\.order`, 0, time.Second), "sec.acleos.order"); len(got) != first {
		t.Fatalf("read_committed sees %d records while the transactional id was refused, want the first %d", len(got), first)
	}

	must(t, s.k.Grant(txn...))
	p = e.start()
	harness.WaitFor(t, 60*time.Second, "rows committed meanwhile delivered", func() bool {
		return len(hasAll(s.records(t, `sec\.acleos\.order`, len(want), time.Second), want)) == 0
	})
	if code := p.Stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	got := s.records(t, `sec\.acleos\.order`, 0, 1500*time.Millisecond)
	if n, dups := countDistinct(got); n != len(want) || dups != 0 {
		t.Fatalf("read_committed: %d distinct, %d duplicates; want %d and 0", n, dups, len(want))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// insertAgg commits one transaction with n outbox rows of aggregate type typ for aggregate agg.
func (e *env) insertAgg(c *pgx.Conn, typ, agg string, n int) []string {
	e.t.Helper()
	return e.insertRows(c, n, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES (gen_random_uuid(), $1, $2, 'created', jsonb_build_object('agg', $2::text, 'i', $3::int)) RETURNING id::text`,
		func(i int) []any { return []any{typ, agg, i} }, nil)
}
