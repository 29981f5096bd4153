package config

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// expandToken is one token of a value for the reference expansion: $$, ${name}, an
// unterminated ${, a lone $, or a run of other bytes (leftmost alternative first).
var expandToken = regexp.MustCompile(`(?s)\$\$|\$\{([^}]*)\}|\$\{|\$|[^$]+`)

// refExpand is Expand written as a tokenizer: the text and the names it must look up, or ok
// false when Expand must fail (unterminated ${, empty ${}).
func refExpand(s string) (out string, names []string, ok bool) {
	var b strings.Builder
	for _, m := range expandToken.FindAllStringSubmatchIndex(s, -1) {
		tok := s[m[0]:m[1]]
		switch {
		case tok == "$$":
			b.WriteByte('$')
		case tok == "${":
			return "", nil, false
		case m[2] >= 0:
			name := s[m[2]:m[3]]
			switch name {
			case "":
				return "", nil, false
			case "routedByValue":
				b.WriteString(tok)
			default:
				names = append(names, name)
				b.WriteString("<" + name + ">")
			}
		default:
			b.WriteString(tok) // a lone $ or plain text
		}
	}
	return b.String(), names, true
}

// FuzzExpand checks ${NAME} / $$ expansion against refExpand: the same text, the same error
// cases, and exactly the variables the value names looked up, in order (nothing else of the
// environment can reach the value); an unset variable is an error naming it.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{"a${X}b", "$$", "$${X}", "${routedByValue}", "a$b", "${X}${X}", "${", "${}", "$", "${A}$${B}$",
		"postgres://outboxd:${PGPASSWORD}@127.0.0.1:5432/app", "outbox.event.${routedByValue}", "${${X}}", "}{$}", "${X"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var looked []string
		got, err := Expand(s, func(name string) (string, bool) {
			looked = append(looked, name)
			return "<" + name + ">", true
		})
		want, names, ok := refExpand(s)
		if (err == nil) != ok {
			t.Fatalf("Expand(%q) = %q, %v; reference ok=%v", s, got, err, ok)
		}
		if !ok {
			return
		}
		if got != want || !slices.Equal(looked, names) {
			t.Fatalf("Expand(%q) = %q looking up %q; reference %q looking up %q", s, got, looked, want, names)
		}
		if len(names) > 0 {
			_, err := Expand(s, func(string) (string, bool) { return "", false })
			if err == nil || !strings.Contains(err.Error(), names[0]) {
				t.Fatalf("Expand(%q) with nothing set: %v, want an error naming %s", s, err, names[0])
			}
		}
	})
}

// valueScalars returns the text of every scalar of doc that is not a mapping key (the values
// expansion may read), following aliases.
func valueScalars(doc []byte) []string {
	var root yaml.Node
	if yaml.Unmarshal(doc, &root) != nil {
		return nil
	}
	var out []string
	var walk func(n *yaml.Node, depth int)
	walk = func(n *yaml.Node, depth int) {
		if n == nil || depth > 100 {
			return
		}
		switch n.Kind {
		case yaml.ScalarNode:
			out = append(out, n.Value)
		case yaml.AliasNode:
			walk(n.Alias, depth+1)
		case yaml.MappingNode:
			for i := 1; i < len(n.Content); i += 2 {
				walk(n.Content[i], depth+1)
			}
		default:
			for _, c := range n.Content {
				walk(c, depth+1)
			}
		}
	}
	walk(&root, 0)
	return out
}

// reencode writes c back as a config document Parse reads: $ escaped as $$, absent (nil)
// values left out, headers as a column: name mapping.
func reencode(t *testing.T, c *Config) []byte {
	var n yaml.Node
	if err := n.Encode(c); err != nil {
		t.Fatalf("encode %+v: %v", c, err)
	}
	var fix func(n *yaml.Node, path string)
	fix = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.ScalarNode:
			n.Value = strings.ReplaceAll(n.Value, "$", "$$")
		case yaml.MappingNode:
			var kept []*yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := strings.TrimPrefix(path+"."+k.Value, ".")
				if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
					continue
				}
				if p == "outbox.headers" {
					if len(c.Outbox.Headers) == 0 {
						continue
					}
					m := &yaml.Node{Kind: yaml.MappingNode}
					for _, h := range c.Outbox.Headers {
						m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: h.Column},
							&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: strings.ReplaceAll(h.Name, "$", "$$")})
					}
					v = m
				} else {
					fix(v, p)
				}
				kept = append(kept, k, v)
			}
			n.Content = kept
		default:
			for _, c := range n.Content {
				fix(c, path)
			}
		}
	}
	fix(&n, "")
	b, err := yaml.Marshal(&n)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

// parseSeeds are FuzzParse's seeds; all but the last are valid configs (TestParseSeedsLoad), so
// the seeds alone exercise the round trip.
var parseSeeds = []struct{ doc, name, val string }{
	{full, "PGPASSWORD", "s3cr$t"},
	{minimalYAML, "X", "1"},
	{"source:\n  type: postgres\n  dsn: x\n  tables: [a.b]\n  postgres:\n    heartbeat_interval: 0\nkafka:\n  brokers: [h:1]\n", "X", "1"},
	{"source: {type: mysql, dsn: 'u:${PW}@tcp(h:3306)/app', tables: [app.outbox], mysql: {server_id: 7, start: current}}\n" +
		"kafka: {brokers: ['k:9092'], delivery: exactly_once, dlq_max_rate: 10/1000, sasl: {mechanism: PLAIN, username: u, password: '${PW}'}}\n" +
		"outbox: {headers: {type: eventType}}\nhttp: {listen: ''}\nlog: {level: debug, format: json}\n", "PW", "12345"},
	{"source: &s {type: postgres, dsn: '${A}', tables: [a.b]}\nkafka: {brokers: ['k:9092'], linger: 1s, tls: {insecure_skip_verify: true}}\n" +
		"offsets: {store: kafka, topic: o, commit_interval: 1s, key: k}\nshutdown_timeout: 1m\n", "A", "postgres://x@h/db"},
	{"${KEY}: 1\nsource: {dsn: $${X}}\n", "KEY", "v"},
}

func TestParseSeedsLoad(t *testing.T) {
	for _, seed := range parseSeeds[:len(parseSeeds)-1] {
		if _, err := Parse([]byte(seed.doc), env(map[string]string{seed.name: seed.val}), "postgres", "mysql"); err != nil {
			t.Errorf("seed does not load: %v\n%s", err, seed.doc)
		}
	}
}

// FuzzParse feeds arbitrary documents (and one variable of the environment) to Parse. It must
// never panic; it looks up only variables named as ${NAME} in a value of the document (never
// in a key); it is deterministic; and a document it accepts gives a config that validates
// again unchanged and that, written back out, parses to the same config.
func FuzzParse(f *testing.F) {
	for _, seed := range parseSeeds {
		f.Add([]byte(seed.doc), seed.name, seed.val)
	}
	f.Fuzz(func(t *testing.T, doc []byte, name, val string) {
		if len(doc) > 4096 {
			return
		}
		checkParse(t, doc, name, val)
		// The fuzzer's strings as the values of a valid document, written by yaml.Marshal (any
		// text, quoted as YAML needs), so the round trip sees arbitrary values.
		values, err := yaml.Marshal(map[string]any{
			"source": map[string]any{"type": "mysql", "dsn": val, "tables": []string{"db.t"}},
			"outbox": map[string]any{"headers": map[string]string{name: "h-" + val}},
			"kafka": map[string]any{"brokers": []string{"h:1"}, "client_id": val,
				"sasl": map[string]string{"mechanism": "PLAIN", "username": "u" + name, "password": val}},
			"offsets": map[string]string{"path": val, "key": name},
		})
		if err != nil {
			t.Fatal(err)
		}
		checkParse(t, values, name, val)
	})
}

// checkParse checks FuzzParse's properties for one document (name=val in the environment,
// every other variable set too).
func checkParse(t *testing.T, doc []byte, name, val string) {
	scalars := valueScalars(doc)
	var looked []string
	lookup := func(n string) (string, bool) {
		looked = append(looked, n)
		if n == name {
			return val, true
		}
		return "value-of-" + n, true
	}
	c, err := Parse(doc, lookup, "postgres", "mysql")
	for _, n := range looked {
		named := false
		for _, s := range scalars {
			if strings.Contains(s, "${"+n+"}") {
				named = true
			}
		}
		if !named {
			t.Fatalf("Parse looked up %q, which no value of the document names:\n%s", n, doc)
		}
	}
	again, err2 := Parse(doc, lookup, "postgres", "mysql")
	if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() || !reflect.DeepEqual(c, again) {
		t.Fatalf("Parse is not deterministic: %+v, %v then %+v, %v", c, err, again, err2)
	}
	if err != nil {
		if !IsConfigError(err) {
			t.Fatalf("Parse error is not a config error: %v", err)
		}
		return
	}
	before := *c
	if err := c.Validate("postgres", "mysql"); err != nil || !reflect.DeepEqual(before, *c) {
		t.Fatalf("accepted config does not validate again unchanged: %v\n%+v\n%+v", err, before, *c)
	}
	out := reencode(t, c)
	back, err := Parse(out, func(n string) (string, bool) {
		t.Fatalf("the re-encoded config looked up %q:\n%s", n, out)
		return "", false
	}, "postgres", "mysql")
	if err != nil {
		t.Fatalf("accepted config, written back, does not parse: %v\ninput:\n%s\nwritten:\n%s", err, doc, out)
	}
	if back.HTTP.Listen != c.HTTP.Listen {
		t.Fatalf("http.listen %q, written back %q", c.HTTP.Listen, back.HTTP.Listen)
	}
	back.HTTP = c.HTTP // set records whether the key was present: the written form always has it
	if !reflect.DeepEqual(c, back) {
		t.Fatalf("accepted config, written back, parses differently:\n%+v\n%+v\ninput:\n%s\nwritten:\n%s", *c, *back, doc, out)
	}
}
