package bench

import (
	"testing"
	"time"
)

func TestParseCPUPressureSome(t *testing.T) {
	in := []byte("some avg10=51.98 avg60=19.55 avg300=6.08 total=5968739804\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=12\n")
	d, ok := parseCPUPressureSome(in)
	if !ok || d != 5968739804*time.Microsecond {
		t.Fatalf("got %v %v, want 5968739804µs true", d, ok)
	}
	for _, bad := range []string{"", "full avg10=0 total=5\n", "some avg10=1 total=x\n", "some avg10=1\n"} {
		if d, ok := parseCPUPressureSome([]byte(bad)); ok {
			t.Errorf("%q: got %v true, want not ok", bad, d)
		}
	}
}
