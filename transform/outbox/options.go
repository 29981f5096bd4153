package outbox

import (
	"fmt"
	"regexp"
)

// Options beyond the column names and the topic template: Debezium's route.* options.

// NullKey values for Config.NullKey.
const (
	NullKeyDLQ     = "dlq"     // a NULL aggregate id dead-letters the row as missing_column (the default)
	NullKeyProduce = "produce" // a NULL aggregate id gives a record with a null Kafka key, as Debezium
)

// RoutedByValueGroup is the named group of Config.TopicRegex whose value replaces
// ${routedByValue} in Config.Topic (Debezium's route.topic.regex default (?<routedByValue>.*)).
const RoutedByValueGroup = "routedByValue"

// compileTopicRegex compiles a Debezium route.topic.regex for Java's Matcher.matches() semantics
// (the regex must match the whole value): it is anchored as \A(?:re)\z. Go's RE2 accepts Java's
// named-group syntax (?<name>…) (Go >= 1.22) as well as (?P<name>…). Java-only constructs
// (lookarounds, backreferences, possessive quantifiers) do not compile and are reported.
func compileTopicRegex(expr string) (*regexp.Regexp, int, error) {
	re, err := regexp.Compile(`\A(?:` + expr + `)\z`)
	if err != nil {
		return nil, 0, fmt.Errorf("%q does not compile as an RE2 regular expression (Java-only constructs such as lookarounds, backreferences and possessive quantifiers are not supported): %w", expr, err)
	}
	g := re.SubexpIndex(RoutedByValueGroup)
	if g < 0 {
		return nil, 0, fmt.Errorf("%q has no named group (?<%s>…): add it around the part of the aggregate type that replaces ${routedByValue} in outbox.topic", expr, RoutedByValueGroup)
	}
	return re, g, nil
}

// regexTopic is the topic for aggregate type at under Config.TopicRegex, as Kafka Connect's
// RegexRouter, which Debezium's EventRouterDelegate applies to the routed-by value
// (org.apache.kafka.connect.transforms.RegexRouter.apply: `if (matcher.matches()) topic =
// matcher.replaceFirst(replacement) ... else return record` — a value that does not match keeps
// its topic, i.e. the raw routed-by value, without outbox.topic's prefix or suffix; see
// shared/spec/debezium-outbox.md §1 row 1). On a match, ${routedByValue} in outbox.topic becomes
// the group's value ("" when the group took no part in the match, as Java's appendReplacement).
func (r *Router) regexTopic(at []byte) string {
	m := r.re.FindSubmatchIndex(at)
	if m == nil {
		return string(at)
	}
	if !r.routed {
		return r.cfg.Topic
	}
	var group string
	if s := m[2*r.reGroup]; s >= 0 {
		group = string(at[s:m[2*r.reGroup+1]])
	}
	return r.prefix + group + r.suffix
}

// emptyPayload reports whether Debezium's route.tombstone.on.empty.payload counts a payload as
// empty: EventRouterDelegate's `payload == null || payload.toString().trim().isEmpty()`. Java's
// String.trim strips every char <= U+0020 at both ends, and in UTF-8 those are exactly the
// single bytes 0x00–0x20 (bytes of multi-byte characters are >= 0x80), so a payload of only such
// bytes is empty. (Debezium's binary payloads — bytea — print as "[B@…" and are never empty
// there; outboxd does not know a column's type, so an empty or all-blank bytea payload is a
// tombstone here.)
func emptyPayload(v []byte, null bool) bool {
	if null {
		return true
	}
	for _, c := range v {
		if c > ' ' {
			return false
		}
	}
	return true
}

// CheckTopicRegex reports why expr cannot be an outbox.topic_regex ("" is fine: none).
func CheckTopicRegex(expr string) error {
	if expr == "" {
		return nil
	}
	_, _, err := compileTopicRegex(expr)
	return err
}
