package config

import (
	"strings"
	"testing"
)

const minimalYAML = `source:
  type: postgres
  dsn: postgres://u@127.0.0.1/app
  tables: [public.outbox]
kafka:
  brokers: [127.0.0.1:9092]
`

func noEnv(string) (string, bool) { return "", false }

// TestParseRefusesASecondDocument (issue 11 case 18): settings after a second `---` were
// silently ignored; now they are a config error naming the problem.
func TestParseRefusesASecondDocument(t *testing.T) {
	for _, doc := range []string{
		minimalYAML + "---\nshutdown_timeout: 1s\n",
		minimalYAML + "---\n---\nkafka:\n  delivery: exactly_once\n",
		"---\n" + minimalYAML + "...\n---\nhttp:\n  listen: \"\"\n",
	} {
		_, err := Parse([]byte(doc), noEnv)
		if err == nil || !IsConfigError(err) || !strings.Contains(err.Error(), "more than one YAML document (a second `---`") {
			t.Errorf("Parse(%q) = %v, want the more-than-one-document error", doc, err)
		}
	}
	for _, doc := range []string{
		minimalYAML,
		"---\n" + minimalYAML,
		"# comment\n---\n" + minimalYAML,
		minimalYAML + "---\n",
		minimalYAML + "---\n# only a comment\n",
	} {
		if _, err := Parse([]byte(doc), noEnv); err != nil {
			t.Errorf("Parse(%q) = %v, want OK", doc, err)
		}
	}
}
