package delivery

import (
	"testing"
	"time"
)

// The guard age: TxnTimeout − max(TxnTimeout/10, 2s), the margin at most half the timeout.
func TestEOSGuardAge(t *testing.T) {
	for _, c := range []struct{ timeout, guard time.Duration }{
		{60 * time.Second, 54 * time.Second}, {15 * time.Minute, 810 * time.Second},
		{10 * time.Second, 8 * time.Second}, {2 * time.Second, time.Second}, {time.Second, 500 * time.Millisecond},
	} {
		e := &eosCore{cfg: &Config{TxnTimeout: c.timeout}}
		if g := e.guard(); g != c.guard {
			t.Errorf("timeout %v: guard %v, want %v", c.timeout, g, c.guard)
		}
	}
}
