package bench

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"time"
)

// cpuPressureSome reads the kernel's CPU pressure stall counter (/proc/pressure/cpu, "some"
// line, total=µs): the time during which at least one runnable task waited for a CPU. ok is
// false where PSI is not available.
func cpuPressureSome() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0, false
	}
	return parseCPUPressureSome(b)
}

// parseCPUPressureSome finds total=<µs> on the "some" line of a /proc/pressure/cpu text.
func parseCPUPressureSome(b []byte) (time.Duration, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 || string(f[0]) != "some" {
			continue
		}
		for _, kv := range f[1:] {
			if v, ok := bytes.CutPrefix(kv, []byte("total=")); ok {
				us, err := strconv.ParseUint(string(v), 10, 64)
				if err != nil {
					return 0, false
				}
				return time.Duration(us) * time.Microsecond, true
			}
		}
	}
	return 0, false
}
