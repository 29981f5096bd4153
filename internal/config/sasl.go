package config

import (
	"fmt"
	"net/url"
)

// validateSASL checks kafka.sasl for its mechanism: PLAIN and SCRAM-* need username and
// password, OAUTHBEARER needs token_url (http or https),
// client_id and client_secret, AWS_MSK_IAM needs none of them (the AWS credential chain). A key
// that belongs to another mechanism is refused, so a half-edited config does not silently
// authenticate another way. AWS_MSK_IAM needs kafka.tls (tls says whether it is set): MSK's IAM
// listeners (port 9098, 9198 for public access) are TLS only.
func validateSASL(s *SASL, tls bool) error {
	if err := oneOf("kafka.sasl.mechanism", s.Mechanism, "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "AWS_MSK_IAM"); err != nil {
		return err
	}
	type key struct {
		name string
		set  bool
	}
	userKeys := []key{{"kafka.sasl.username", s.Username != ""}, {"kafka.sasl.password", s.Password != ""}}
	oauthKeys := []key{{"kafka.sasl.token_url", s.TokenURL != ""}, {"kafka.sasl.client_id", s.ClientID != ""},
		{"kafka.sasl.client_secret", s.ClientSecret != ""}, {"kafka.sasl.scope", s.Scope != ""}}
	awsKeys := []key{{"kafka.sasl.region", s.Region != ""}}
	refuse := func(keys []key) error {
		for _, k := range keys {
			if k.set {
				return &Error{Key: k.name, Msg: fmt.Sprintf("is not used with kafka.sasl.mechanism %s: remove it", s.Mechanism)}
			}
		}
		return nil
	}
	var others [][]key
	switch s.Mechanism {
	case "OAUTHBEARER":
		for _, k := range oauthKeys[:3] {
			if !k.set {
				return &Error{Key: k.name, Msg: "is required with kafka.sasl.mechanism OAUTHBEARER"}
			}
		}
		u, err := url.Parse(s.TokenURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return &Error{Key: "kafka.sasl.token_url", Msg: fmt.Sprintf("%q is not an http(s) URL of the OAuth 2.0 token endpoint", s.TokenURL)}
		}
		others = [][]key{userKeys, awsKeys}
	case "AWS_MSK_IAM":
		if !tls {
			return &Error{Key: "kafka.tls", Msg: "is required with kafka.sasl.mechanism AWS_MSK_IAM: Amazon MSK's IAM " +
				"listeners (port 9098, 9198 for public access) accept only TLS; add kafka.tls: {} (the system CAs " +
				"verify MSK's certificates) and use the cluster's IAM bootstrap brokers"}
		}
		others = [][]key{userKeys, oauthKeys}
	default: // PLAIN, SCRAM-*
		if s.Username == "" {
			return &Error{Key: "kafka.sasl.username", Msg: "is required with kafka.sasl.mechanism " + s.Mechanism}
		}
		if s.Password == "" {
			return &Error{Key: "kafka.sasl.password", Msg: "is required with kafka.sasl.mechanism " + s.Mechanism +
				" (put it in an environment variable: password: ${KAFKA_PASSWORD})"}
		}
		others = [][]key{oauthKeys, awsKeys}
	}
	for _, keys := range others {
		if err := refuse(keys); err != nil {
			return err
		}
	}
	return nil
}
