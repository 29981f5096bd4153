package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// Helpers of the `outboxd republish` end-to-end tests (republish_e2e_test.go).

// republishRun runs `outboxd republish -c cfgPath ARGS` (at most 60 s) and returns its stdout,
// stderr and exit status.
func republishRun(t *testing.T, cfgPath string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"republish", "-c", cfgPath}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("outboxd republish %v did not finish within 60 s:\n%s\n%s", args, out.String(), errb.String())
	}
	return out.String(), errb.String(), code
}

// partitionKey is one topic partition.
type partitionKey struct {
	topic     string
	partition int32
}

// checkRepublished checks that the outbox topics (all, as ConsumeAll read them) hold each id of
// want exactly twice, the stream's record first, and that the second record (the republished
// one) is the first one again: topic, partition, key, value and every header; and that, in
// each partition, the republished records come in the order the stream delivered them.
func checkRepublished(t *testing.T, all []testenv.Consumed, want []string) {
	t.Helper()
	byID := map[string][]testenv.Consumed{}
	for _, r := range all {
		byID[r.Header("id")] = append(byID[r.Header("id")], r)
	}
	streamOrder, republishOrder := map[partitionKey][]string{}, map[partitionKey][]string{}
	for _, id := range want {
		recs := byID[id]
		if len(recs) != 2 {
			t.Fatalf("id %s: %d records, want 2 (the stream's and the republished one)", id, len(recs))
		}
		slices.SortFunc(recs, func(x, y testenv.Consumed) int { return int(x.Offset - y.Offset) }) // one partition: one key
		a, b := recs[0], recs[1]
		if a.Topic != b.Topic || a.Partition != b.Partition || !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Value, b.Value) ||
			!maps.Equal(a.Headers, b.Headers) {
			t.Errorf("id %s: republished %s/%d key %q value %s headers %v\n  the stream gave %s/%d key %q value %s headers %v",
				id, b.Topic, b.Partition, b.Key, b.Value, b.Headers, a.Topic, a.Partition, a.Key, a.Value, a.Headers)
		}
		k := partitionKey{a.Topic, a.Partition}
		streamOrder[k] = append(streamOrder[k], fmt.Sprintf("%d:%s", a.Offset, id))
		republishOrder[k] = append(republishOrder[k], fmt.Sprintf("%d:%s", b.Offset, id))
	}
	for k := range streamOrder {
		if !slices.Equal(idsByOffset(streamOrder[k]), idsByOffset(republishOrder[k])) {
			t.Errorf("%s/%d: republished in the order %v, the stream's was %v", k.topic, k.partition,
				idsByOffset(republishOrder[k]), idsByOffset(streamOrder[k]))
		}
	}
	if len(byID) != len(want) {
		t.Errorf("%d distinct ids in the topics, want %d", len(byID), len(want))
	}
}

// idsByOffset sorts "offset:id" entries by offset and returns the ids.
func idsByOffset(entries []string) []string {
	type e struct {
		off int
		id  string
	}
	var es []e
	for _, s := range entries {
		var x e
		off, id, _ := strings.Cut(s, ":")
		fmt.Sscan(off, &x.off)
		x.id = id
		es = append(es, x)
	}
	slices.SortFunc(es, func(a, b e) int { return a.off - b.off })
	var out []string
	for _, x := range es {
		out = append(out, x.id)
	}
	return out
}

// newRecords are the records of after that are not in before (by topic, partition, offset).
func newRecords(before, after []testenv.Consumed) []testenv.Consumed {
	seen := map[string]bool{}
	for _, r := range before {
		seen[fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)] = true
	}
	var out []testenv.Consumed
	for _, r := range after {
		if !seen[fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)] {
			out = append(out, r)
		}
	}
	return out
}

// sortedIDs is the ids of recs, sorted.
func sortedIDs(recs []testenv.Consumed) []string {
	return slices.Sorted(slices.Values(ids(recs)))
}

// regexpMatch tells whether the regular expression re matches s.
func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
