package main

import (
	"fmt"
	"io"
)

// dlqCmd runs `outboxd dlq tail|replay` (being built for issue 4).
func dlqCmd(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "outboxd dlq: not available in this build yet")
	return 1
}
