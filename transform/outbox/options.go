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
// (the regex must match the whole value): whole is it anchored as \A(?:re)\z, find is it
// unanchored (Matcher.find, which replaceFirst uses), group the index of routedByValue. Go's RE2 accepts Java's
// named-group syntax (?<name>…) (Go >= 1.22) as well as (?P<name>…). Java-only constructs
// (lookarounds, backreferences, possessive quantifiers) do not compile and are reported.
func compileTopicRegex(expr string) (whole, find *regexp.Regexp, group int, err error) {
	find, err = regexp.Compile(`(?:` + expr + `)`)
	if err == nil {
		whole, err = regexp.Compile(`\A(?:` + expr + `)\z`)
	}
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%q does not compile as an RE2 regular expression (Java-only constructs such as lookarounds, backreferences and possessive quantifiers are not supported): %w", expr, err)
	}
	group = find.SubexpIndex(RoutedByValueGroup)
	if group < 0 {
		return nil, nil, 0, fmt.Errorf("%q has no named group (?<%s>…): add it around the part of the aggregate type that replaces ${routedByValue} in outbox.topic", expr, RoutedByValueGroup)
	}
	return whole, find, group, nil
}

// regexTopic is the topic for aggregate type at under Config.TopicRegex, as Kafka Connect's
// RegexRouter, which Debezium's EventRouterDelegate applies to the routed-by value with
// route.topic.replacement (here: outbox.topic). RegexRouter.apply (apache/kafka
// connect/transforms/.../RegexRouter.java):
//
//	final Matcher matcher = regex.matcher(record.topic());
//	if (matcher.matches()) { final String topic = matcher.replaceFirst(replacement); ... }
//	return record;
//
// so a value that does not match the whole regex keeps its topic, the raw routed-by value
// (without outbox.topic's prefix or suffix; shared/spec/debezium-outbox.md §1 row 1). On a
// match, replaceFirst resets the matcher and replaces the FIRST match found by find() — which
// starts at 0 (a whole-value match exists there) but may end earlier, e.g. with a lazy
// quantifier — and keeps the rest of the value after it: topic = replacement (with
// ${routedByValue} = the group's value in that match, "" when the group took no part, as
// Java's appendReplacement) + value[end:]. r.reFind is the unanchored regex: Go's leftmost-first
// submatch semantics are those of Java's backtracking find().
func (r *Router) regexTopic(at []byte) string {
	if !r.re.Match(at) {
		return string(at)
	}
	m := r.reFind.FindSubmatchIndex(at)
	if m == nil || m[0] != 0 { // cannot happen: a whole-value match starts at 0
		return string(at)
	}
	topic := r.cfg.Topic
	if r.routed {
		var group []byte
		if s := m[2*r.reGroup]; s >= 0 {
			group = at[s:m[2*r.reGroup+1]]
		}
		topic = r.prefix + string(group) + r.suffix
	}
	return topic + string(at[m[1]:])
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
	_, _, _, err := compileTopicRegex(expr)
	return err
}
