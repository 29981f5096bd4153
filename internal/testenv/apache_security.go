package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv/harness"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Apache Kafka with TLS, SASL and ACLs: one node (as StartApacheKafka) that also listens on
//
//	SSL       client certificate required (ssl.client.auth=required), the principal is the
//	          certificate's CN (User:<CN>)
//	SASL_SSL  SCRAM-SHA-512 over TLS, no client certificate; the principal is User:<name>
//
// with the StandardAuthorizer and allow.everyone.if.no.acl.found=false: a principal may do only
// what an ACL grants. The PLAINTEXT listener (and the PLAINTEXT controller listener) stays, for
// the test's own admin and read-back: its principal, User:ANONYMOUS, is a super user (the
// broker's own requests to its controller arrive as ANONYMOUS too), so a test reads and
// administers the cluster there and points outboxd at SSLAddr / SASLAddr.
//
// Certificates are made here (crypto/x509, ECDSA P-256, PKCS#8 keys): a CA, the broker's
// certificate for 127.0.0.1 and localhost signed by it (the broker reads them as PEM files:
// ssl.keystore.type=PEM), a client certificate signed by it, and a second, unrelated CA (what a
// wrong kafka.tls.ca_file holds).

// SCRAMMechanism is the SASL mechanism the SASL_SSL listener enables.
const SCRAMMechanism = "SCRAM-SHA-512"

// TestCerts are PEM files in Dir.
type TestCerts struct {
	Dir         string
	CAFile      string // the CA that signed the broker and client certificates
	OtherCAFile string // an unrelated CA: the broker's certificate does not verify against it
	BrokerFile  string // broker private key + certificate chain (Kafka's PEM keystore file)
	ClientCN    string // the client certificate's CN, its principal on the SSL listener
	ClientCert  string // client certificate (kafka.tls.cert_file)
	ClientKey   string // client private key (kafka.tls.key_file)
	// ClientKeyPEM and BrokerKeyPEM are the private keys' PEM bytes, to assert they appear in
	// no output.
	ClientKeyPEM, BrokerKeyPEM []byte
}

// NewTestCerts writes a CA, a broker certificate (SANs 127.0.0.1, localhost), a client
// certificate with CN clientCN, and an unrelated CA into dir.
func NewTestCerts(dir, clientCN string) (*TestCerts, error) {
	c := &TestCerts{Dir: dir, ClientCN: clientCN,
		CAFile: filepath.Join(dir, "ca.pem"), OtherCAFile: filepath.Join(dir, "other-ca.pem"),
		BrokerFile: filepath.Join(dir, "broker.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem")}
	ca, caKey, _, caPEM, err := newCert(&x509.Certificate{Subject: pkix.Name{CommonName: "outboxd test CA"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, nil, nil)
	if err != nil {
		return nil, err
	}
	_, _, _, otherPEM, err := newCert(&x509.Certificate{Subject: pkix.Name{CommonName: "outboxd unrelated CA"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	if err != nil {
		return nil, err
	}
	_, _, brokerKey, brokerPEM, err := newCert(&x509.Certificate{Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}, ca, caKey)
	if err != nil {
		return nil, err
	}
	_, _, clientKey, clientPEM, err := newCert(&x509.Certificate{Subject: pkix.Name{CommonName: clientCN, Organization: []string{"outboxd tests"}},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, caKey)
	if err != nil {
		return nil, err
	}
	c.BrokerKeyPEM, c.ClientKeyPEM = brokerKey, clientKey
	for _, f := range []struct {
		path string
		data []byte
	}{
		{c.CAFile, caPEM}, {c.OtherCAFile, otherPEM},
		{c.BrokerFile, append(append(append([]byte(nil), brokerKey...), brokerPEM...), caPEM...)},
		{c.ClientCert, clientPEM}, {c.ClientKey, clientKey},
	} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// newCert makes a key and a certificate from tmpl, signed by parent/parentKey (self-signed when
// parent is nil), and returns the certificate, its key, the key as PKCS#8 PEM and the
// certificate as PEM.
func newCert(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("create certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// SecureKafka is an Apache Kafka node with SSL and SASL_SSL listeners and an authorizer.
type SecureKafka struct {
	*ApacheKafka
	SSLPort  int // SSL listener (client certificate required)
	SASLPort int // SASL_SSL listener (SCRAM-SHA-512)
	Certs    *TestCerts
}

// SSLAddr is the SSL listener's host:port.
func (k *SecureKafka) SSLAddr() string { return fmt.Sprintf("127.0.0.1:%d", k.SSLPort) }

// SASLAddr is the SASL_SSL listener's host:port.
func (k *SecureKafka) SASLAddr() string { return fmt.Sprintf("127.0.0.1:%d", k.SASLPort) }

// StartSecureApacheKafka makes the certificates (client CN clientCN) and starts the node on free
// ports. opts.Props are appended last. Call Destroy when done (it removes the certificates too).
func StartSecureApacheKafka(clientCN string, opts ApacheOpts) (*SecureKafka, error) {
	certDir, err := os.MkdirTemp("", "outboxd-kafka-certs-")
	if err != nil {
		return nil, err
	}
	certs, err := NewTestCerts(certDir, clientCN)
	if err != nil {
		os.RemoveAll(certDir)
		return nil, err
	}
	sk, err := retryPortTaken(func() (*SecureKafka, error) { return startSecure(certs, opts) })
	if err != nil {
		os.RemoveAll(certDir)
		return nil, err
	}
	return sk, nil
}

func startSecure(certs *TestCerts, opts ApacheOpts) (*SecureKafka, error) {
	lib, err := KafkaLibDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outboxd-kafka-")
	if err != nil {
		return nil, err
	}
	k := &ApacheKafka{NodeID: 1, Dir: dir, lib: lib}
	sk := &SecureKafka{ApacheKafka: k, Certs: certs}
	for _, p := range []*int{&k.Port, &k.ControllerPort, &sk.SSLPort, &sk.SASLPort} {
		if *p, err = FreePort(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	// As startApacheKafka (one node, replication factor 1), plus the secure listeners.
	props := append(k.baseProps(), fmt.Sprintf("controller.quorum.bootstrap.servers=127.0.0.1:%d", k.ControllerPort),
		"default.replication.factor=1", "min.insync.replicas=1",
		"offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
		"share.coordinator.state.topic.replication.factor=1", "share.coordinator.state.topic.min.isr=1")
	props = append(props, sk.props()...)
	props = append(props, opts.Props...)
	if err := k.format(props, newClusterID(), "--standalone"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := k.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return sk, nil
}

// props are the listener, TLS, SASL and authorizer settings (they override baseProps' listeners).
func (k *SecureKafka) props() []string {
	c := k.Certs
	return []string{
		fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,SSL://127.0.0.1:%d,SASL_SSL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d",
			k.Port, k.SSLPort, k.SASLPort, k.ControllerPort),
		fmt.Sprintf("advertised.listeners=PLAINTEXT://127.0.0.1:%d,SSL://127.0.0.1:%d,SASL_SSL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d",
			k.Port, k.SSLPort, k.SASLPort, k.ControllerPort),
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL",
		"ssl.keystore.type=PEM",
		"ssl.keystore.location=" + c.BrokerFile,
		"ssl.truststore.type=PEM",
		"ssl.truststore.location=" + c.CAFile,
		"listener.name.ssl.ssl.client.auth=required",
		"listener.name.sasl_ssl.ssl.client.auth=none",
		// The principal of a client certificate is its CN (by default it is the whole DN).
		`ssl.principal.mapping.rules=RULE:^CN=([^,]*)(,.*)?$/$1/,DEFAULT`,
		"sasl.enabled.mechanisms=" + SCRAMMechanism,
		"listener.name.sasl_ssl.sasl.enabled.mechanisms=" + SCRAMMechanism,
		"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
		"authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"allow.everyone.if.no.acl.found=false",
		"super.users=User:ANONYMOUS",
	}
}

// Destroy kills the node (its data is thrown away: no controlled shutdown to wait for) and
// removes its data and certificates.
func (k *SecureKafka) Destroy() {
	k.Kill()
	os.RemoveAll(k.Dir)
	os.RemoveAll(k.Certs.Dir)
}

// NewSecureApacheKafka is StartSecureApacheKafka for a test: destroyed at the end, a failure
// (CI) or skip (elsewhere) when it cannot start, its log printed when the test failed.
func NewSecureApacheKafka(t testing.TB, clientCN string, opts ApacheOpts) *SecureKafka {
	t.Helper()
	k, err := StartSecureApacheKafka(clientCN, opts)
	if err != nil {
		Unavailable(t, "Apache Kafka "+ApacheKafkaVersion+" with SSL and SASL_SSL", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Apache Kafka log (%s):\n%s", k.Dir, k.Log())
		}
		k.Destroy()
	})
	return k
}

// admin runs one request as the super user (PLAINTEXT listener).
func (k *SecureKafka) admin(req kmsg.Request) (kmsg.Response, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return cl.Request(ctx, req)
}

// AddSCRAMUser creates (or changes the password of) a SCRAM-SHA-512 user with the admin API
// (AlterUserScramCredentials, as kafka-configs.sh --alter --add-config 'SCRAM-SHA-512=[...]'),
// and waits until the SASL_SSL listener accepts the password.
func (k *SecureKafka) AddSCRAMUser(name, password string) error {
	salt := make([]byte, 16)
	rand.Read(salt)
	const iterations = 4096 // Kafka's minimum for SCRAM-SHA-512
	salted, err := pbkdf2.Key(sha512.New, password, salt, iterations, sha512.Size)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
	up.Name, up.Mechanism, up.Iterations, up.Salt, up.SaltedPassword = name, 2, iterations, salt, salted
	req.Upsertions = append(req.Upsertions, up)
	resp, err := k.admin(req)
	if err != nil {
		return fmt.Errorf("AlterUserScramCredentials %s: %w", name, err)
	}
	for _, r := range resp.(*kmsg.AlterUserSCRAMCredentialsResponse).Results {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("AlterUserScramCredentials %s: %w (%v)", name, err, r.ErrorMessage)
		}
	}
	if err := harness.Until(30*time.Second, 100*time.Millisecond, func() error { return k.scramLogin(name, password) }); err != nil {
		return fmt.Errorf("SCRAM user %s still cannot log in on %s: %w", name, k.SASLAddr(), err)
	}
	return nil
}

// scramLogin authenticates on the SASL_SSL listener and sends one ApiVersions request.
func (k *SecureKafka) scramLogin(name, password string) error {
	pool, err := k.Certs.pool()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.SASLAddr()), kgo.RequestRetries(0),
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: name, Pass: password}.AsSha512Mechanism()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	return err
}

func (c *TestCerts) pool() (*x509.CertPool, error) {
	b, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	return pool, nil
}

// ACL is one ALLOW entry: principal (User:name) may do Op on the resource (for the cluster,
// Name is "kafka-cluster").
type ACL struct {
	Principal string
	Resource  kmsg.ACLResourceType
	Name      string
	Prefixed  bool // a prefix pattern instead of a literal name
	Op        kmsg.ACLOperation
}

func (a ACL) pattern() kmsg.ACLResourcePatternType {
	if a.Prefixed {
		return kmsg.ACLResourcePatternTypePrefixed
	}
	return kmsg.ACLResourcePatternTypeLiteral
}

// Grant creates ALLOW ACLs (host *) and waits until the broker lists them.
func (k *SecureKafka) Grant(acls ...ACL) error {
	req := kmsg.NewPtrCreateACLsRequest()
	for _, a := range acls {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = a.Resource, a.Name, a.pattern()
		c.Principal, c.Host, c.Operation, c.PermissionType = a.Principal, "*", a.Op, kmsg.ACLPermissionTypeAllow
		req.Creations = append(req.Creations, c)
	}
	resp, err := k.admin(req)
	if err != nil {
		return fmt.Errorf("CreateAcls: %w", err)
	}
	for _, r := range resp.(*kmsg.CreateACLsResponse).Results {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("CreateAcls: %w (%v)", err, r.ErrorMessage)
		}
	}
	return k.waitACLs(acls, true)
}

// Revoke deletes ALLOW ACLs and waits until the broker no longer lists them.
func (k *SecureKafka) Revoke(acls ...ACL) error {
	req := kmsg.NewPtrDeleteACLsRequest()
	for _, a := range acls {
		f := kmsg.NewDeleteACLsRequestFilter()
		name, principal, host := a.Name, a.Principal, "*"
		f.ResourceType, f.ResourceName, f.ResourcePatternType = a.Resource, &name, a.pattern()
		f.Principal, f.Host, f.Operation, f.PermissionType = &principal, &host, a.Op, kmsg.ACLPermissionTypeAllow
		req.Filters = append(req.Filters, f)
	}
	resp, err := k.admin(req)
	if err != nil {
		return fmt.Errorf("DeleteAcls: %w", err)
	}
	for _, r := range resp.(*kmsg.DeleteACLsResponse).Results {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("DeleteAcls: %w (%v)", err, r.ErrorMessage)
		}
	}
	return k.waitACLs(acls, false)
}

// waitACLs waits until DescribeAcls lists (present) or stops listing each of acls.
func (k *SecureKafka) waitACLs(acls []ACL, present bool) error {
	start := time.Now()
	for _, a := range acls {
		err := harness.Until(max(20*time.Second-time.Since(start), 0), 50*time.Millisecond, func() error {
			req := kmsg.NewPtrDescribeACLsRequest()
			name, principal := a.Name, a.Principal
			req.ResourceType, req.ResourceName, req.ResourcePatternType = a.Resource, &name, a.pattern()
			req.Principal, req.Operation, req.PermissionType = &principal, a.Op, kmsg.ACLPermissionTypeAllow
			resp, err := k.admin(req)
			if err != nil {
				return err
			}
			if (len(resp.(*kmsg.DescribeACLsResponse).Resources) > 0) != present {
				return errors.New("not listed as wanted yet")
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("ACL %+v: broker does not list it as present=%v (%v)", a, present, err)
		}
	}
	return nil
}

// CreateTopic creates a topic (as the super user) with the given partitions, replication 1.
func (k *SecureKafka) CreateTopic(name string, partitions int32, configs map[string]string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	tr := kmsg.NewCreateTopicsRequestTopic()
	tr.Topic, tr.NumPartitions, tr.ReplicationFactor = name, partitions, 1
	for key, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = key, &v
		tr.Configs = append(tr.Configs, c)
	}
	req.Topics = append(req.Topics, tr)
	req.TimeoutMillis = 15000
	resp, err := k.admin(req)
	if err != nil {
		return fmt.Errorf("CreateTopics %s: %w", name, err)
	}
	for _, t := range resp.(*kmsg.CreateTopicsResponse).Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && err != kerr.TopicAlreadyExists {
			return fmt.Errorf("CreateTopics %s: %w", name, err)
		}
	}
	return nil
}

// Principal is "User:name".
func Principal(name string) string { return "User:" + name }

// SetTopicConfig sets one topic config (IncrementalAlterConfigs, as kafka-configs.sh --alter)
// as the super user.
func (k *SecureKafka) SetTopicConfig(topic, key, value string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = key, kmsg.IncrementalAlterConfigOpSet, &value
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := k.admin(req)
	if err != nil {
		return fmt.Errorf("IncrementalAlterConfigs %s %s: %w", topic, key, err)
	}
	for _, res := range resp.(*kmsg.IncrementalAlterConfigsResponse).Resources {
		if err := kerr.ErrorForCode(res.ErrorCode); err != nil {
			return fmt.Errorf("IncrementalAlterConfigs %s %s: %w (%v)", topic, key, err, res.ErrorMessage)
		}
	}
	return nil
}
