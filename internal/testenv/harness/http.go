package harness

import (
	"io"
	"net/http"
	"time"
)

// Get fetches http://<addr><path> (a 2 s timeout) and returns the status and body; code is 0
// when the server does not answer.
func Get(addr, path string) (code int, body string) {
	c := http.Client{Timeout: 2 * time.Second}
	r, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, ""
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// Readyz is the status of /readyz at addr (0 when unreachable).
func Readyz(addr string) int {
	code, _ := Get(addr, "/readyz")
	return code
}

// Metrics is the text of /metrics at addr ("" when unreachable).
func Metrics(addr string) string {
	_, body := Get(addr, "/metrics")
	return body
}
