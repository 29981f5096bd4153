package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/aws/aws-msk-iam-sasl-signer-go/signer"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/processcreds"
)

// kafka.sasl.mechanism AWS_MSK_IAM: Amazon MSK's IAM access control for clients that are not
// Java. The client sends, over SASL/OAUTHBEARER, a token that is an AWS SigV4-presigned URL
// (https://kafka.<region>.amazonaws.com/?Action=kafka-cluster:Connect&X-Amz-...), base64url
// encoded without padding; the broker checks the signature and the IAM policy of the signing
// identity. github.com/aws/aws-msk-iam-sasl-signer-go builds and signs that URL; outboxd adds
// the credential chain, a cache and renewal before expiry (the URL is valid for 15 minutes and
// sarama asks for a token on every new broker connection).

const (
	// mskTokenTimeout bounds one token: the credential chain (which may call STS, SSO, the
	// container or instance metadata endpoint, or a credential_process) and the signing.
	mskTokenTimeout = 15 * time.Second
	// mskRenewBefore is how long before its expiry a cached token is replaced: a connection
	// made with a token that has at least this long left authenticates well inside its
	// validity, and a failed renewal leaves this long to retry on the next connection.
	mskRenewBefore = 5 * time.Minute
	// mskMinValidity is the shortest remaining validity of a cached token that is still sent
	// when renewing it fails (the broker would refuse an expired one anyway).
	mskMinValidity = 30 * time.Second
)

// mskChain lists the standard chain's sources, for the errors.
const mskChain = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN], AWS_PROFILE with the shared " +
	"config and credentials files, web identity (AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE, as EKS IRSA sets), " +
	"the ECS container role, the EC2 instance role"

// mskCredentialFix is what to do when the standard chain gives no credentials.
const mskCredentialFix = "give outboxd AWS credentials through one of the standard chain's sources (" + mskChain + ")"

const mskPrefix = "AWS_MSK_IAM: "

// mskError is a failed MSK IAM token: an *OAuthError (AWS_MSK_IAM is OAUTHBEARER with a signed
// token), so ConnectHint names the key and the fix. what never holds a secret.
func mskError(key, what, fix string, err error) *OAuthError {
	return &OAuthError{Key: key, What: mskPrefix + what, Fix: fix, err: err}
}

// mskTokenProvider is sarama's AccessTokenProvider for AWS_MSK_IAM. Safe for concurrent use.
type mskTokenProvider struct {
	region   string
	generate func(ctx context.Context) (token string, expiresMs int64, err error)
	now      func() time.Time
	timeout  time.Duration
	log      *slog.Logger

	mu      sync.Mutex
	token   string
	expires time.Time
}

// newMSKTokenProvider resolves the region (kafka.sasl.region, else the AWS chain's: AWS_REGION,
// AWS_DEFAULT_REGION, the shared config file's profile) and the credential chain, without any
// network call; credentials are retrieved when sarama first asks for a token.
func newMSKTokenProvider(s *SASLConfig) (sarama.AccessTokenProvider, error) {
	ctx, cancel := context.WithTimeout(context.Background(), mskTokenTimeout)
	defer cancel()
	var opts []func(*awsconfig.LoadOptions) error
	if s.Region != "" {
		opts = append(opts, awsconfig.WithRegion(s.Region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		// A bad AWS_PROFILE or shared config file; the SDK's message names which.
		return nil, fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: loading the AWS configuration "+
			"(environment, shared config and credentials files) failed; fix it or the AWS_* variables: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("kafka.sasl.region: required with kafka.sasl.mechanism AWS_MSK_IAM when " +
			"the AWS configuration names no region (AWS_REGION, AWS_DEFAULT_REGION or region in the " +
			"shared config file): set it to the MSK cluster's region, e.g. us-east-1")
	}
	return newMSKProvider(cfg.Region, cfg.Credentials), nil
}

// newMSKProvider signs with the credentials creds gives (LoadDefaultConfig wraps the chain in
// an aws.CredentialsCache, so temporary credentials are reused until they expire).
func newMSKProvider(region string, creds aws.CredentialsProvider) *mskTokenProvider {
	p := &mskTokenProvider{region: region, now: time.Now, timeout: mskTokenTimeout, log: slog.Default()}
	p.generate = func(ctx context.Context) (string, int64, error) {
		if creds == nil {
			return "", 0, mskError("kafka.sasl.mechanism", "no AWS credentials in the standard chain", mskCredentialFix, nil)
		}
		v, err := creds.Retrieve(ctx)
		if err == nil && (v.AccessKeyID == "" || v.SecretAccessKey == "") {
			err = errors.New("the chain returned an empty access key or secret")
		}
		if err != nil {
			return "", 0, mskCredentialError(err)
		}
		static := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return v, nil })
		tok, exp, err := signer.GenerateAuthTokenFromCredentialsProvider(ctx, region, static)
		if err != nil {
			return "", 0, mskError("kafka.sasl.region", fmt.Sprintf("signing the token for region %s failed: %v", region, err),
				"check kafka.sasl.region (the MSK cluster's region)", err)
		}
		return tok, exp, nil
	}
	return p
}

// mskCredentialError is a failed credential retrieval: what the chain said, except where the
// SDK's error quotes a credential_process's output (output that is not the credential JSON:
// it may hold the secret), which is described without it and not wrapped.
func mskCredentialError(err error) error {
	what := "no AWS credentials in the standard chain"
	var pe *processcreds.ProviderError
	if errors.As(err, &pe) && strings.Contains(err.Error(), "parse failed of process output") {
		return mskError("kafka.sasl.mechanism", what+": the profile's credential_process printed something that is "+
			"not the credential JSON (output not shown: it may hold secrets)", "run the credential_process by hand and fix its output", nil)
	}
	return mskError("kafka.sasl.mechanism", what+": "+err.Error(), mskCredentialFix, err)
}

// Token returns the cached token while it has more than mskRenewBefore left, else a new one.
// When renewing fails and the cached token still has mskMinValidity left, that token is
// returned (and the failure logged) so a passing credential hiccup does not fail connections;
// otherwise the error is returned and sarama's connection attempt fails with it. The token is
// never logged.
func (p *mskTokenProvider) Token() (*sarama.AccessToken, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.token != "" && now.Before(p.expires.Add(-mskRenewBefore)) {
		return &sarama.AccessToken{Token: p.token}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	tok, expMs, err := p.generate(ctx)
	if err == nil && tok == "" {
		err = errors.New("the signer returned an empty token")
	}
	if err != nil {
		var oe *OAuthError
		isOE := errors.As(err, &oe)
		switch {
		case ctx.Err() != nil:
			cause := err.Error()
			if isOE {
				cause = strings.TrimPrefix(oe.What, mskPrefix)
			}
			err = mskError("kafka.sasl.mechanism", fmt.Sprintf("no token within %s (%s)", p.timeout, cause),
				"the AWS credential chain did not answer in time: check this host's access to its credential source "+
					"(STS, the EC2 or ECS metadata endpoint, SSO, a credential_process)", err)
		case !isOE:
			err = mskError("kafka.sasl.mechanism", err.Error(), mskCredentialFix, err)
		}
		if p.token != "" && now.Before(p.expires.Add(-mskMinValidity)) {
			p.log.Warn("kafka.sasl.mechanism AWS_MSK_IAM: renewing the MSK IAM token failed; using the current one until it expires",
				"expires", p.expires.UTC().Format(time.RFC3339), "err", err)
			return &sarama.AccessToken{Token: p.token}, nil
		}
		return nil, err
	}
	p.token, p.expires = tok, time.UnixMilli(expMs)
	return &sarama.AccessToken{Token: tok}, nil
}
