package sink

import "fmt"

// ValidTopic checks a Kafka topic name: 1..249 characters of [a-zA-Z0-9._-], not "." or "..".
// It is the one implementation of the rule; the transform (routing) and the Kafka sink both use it.
func ValidTopic(name string) error {
	if name == "" {
		return fmt.Errorf("topic name is empty")
	}
	if len(name) > 249 {
		return fmt.Errorf("topic name is %d characters long, Kafka allows at most 249", len(name))
	}
	if name == "." || name == ".." {
		return fmt.Errorf("topic name %q is not allowed", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q has the illegal character %q (Kafka allows [a-zA-Z0-9._-])", name, c)
		}
	}
	return nil
}
