// Package apache runs the end-to-end suite (test/e2e) a second time, on Apache Kafka 4.4: the
// same test binary with OUTBOXD_TEST_KAFKA=apache (one shared KRaft node, topics deleted before
// each test; tests that need a kfake fault hook skip there, saying why). It is a package of its
// own so that `go test ./...` runs it beside the other packages (-p) instead of after them: the
// e2e tests mostly wait on servers.
//
//	go test ./test/e2e/apache/                           # the Apache Kafka pass
//	go test ./test/e2e/apache/ -args -e2e.run=TestEOS    # a part of it
//	OUTBOXD_TEST_KAFKA=apache go test ./test/e2e/ -run X  # the same, directly
package apache

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// e2eTimeout is the inner test binary's -test.timeout (the Apache pass took 434 s on CI).
const e2eTimeout = 20 * time.Minute

var e2eRun = flag.String("e2e.run", "", "run only the test/e2e tests matching this regular expression (its -test.run)")

func TestE2EOnApacheKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Apache Kafka pass of test/e2e needs a broker JVM and minutes")
	}
	kind, err := testenv.KafkaUnderTest()
	if err != nil {
		t.Fatal(err)
	}
	if kind != testenv.KindKfake {
		t.Skipf("%s=%s: test/e2e runs on Apache Kafka itself", testenv.KafkaEnv, kind)
	}
	e2e := filepath.Join(t.TempDir(), "e2e.test")
	if out, err := exec.Command("go", "test", "-c", "-o", e2e, "github.com/outboxd/outboxd/test/e2e").CombinedOutput(); err != nil {
		t.Fatalf("go test -c ./test/e2e: %v\n%s", err, out)
	}
	args := []string{"-test.count=1", "-test.timeout=" + e2eTimeout.String()}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	if *e2eRun != "" {
		args = append(args, "-test.run="+*e2eRun)
	}
	cmd := exec.Command(e2e, args...)
	// The inner binary's own directory: relative paths in test/e2e resolve as under go test.
	cmd.Dir = filepath.Join("..")
	// Not OUTBOXD_TEST_BIN: with it test/e2e takes the binary for an older build and leaves out
	// config keys that build may not know (covOnDemandOnly). Its TestMain builds this tree's.
	cmd.Env = append(os.Environ(), testenv.KafkaEnv+"="+testenv.KindApache)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	start := time.Now()
	err = cmd.Run()
	t.Logf("test/e2e on Apache Kafka %s: %v", testenv.ApacheKafkaVersion, time.Since(start).Round(time.Second))
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("test/e2e on Apache Kafka failed (exit %d): its output is above", ee.ExitCode())
	}
	if err != nil {
		t.Fatalf("run test/e2e on Apache Kafka: %v", err)
	}
}
