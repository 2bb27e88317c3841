package app

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/stampede-sh/stampede/auth"
)

// Identity settings (issue 26): which tokens the gateway and push accept
// and how they are checked. One home for their rules, used by Validate,
// buildVerifier and `stampede token`.

// providers pairs STAMPEDE_JWT_JWKS_URL and STAMPEDE_JWT_ISSUER by position.
func (c *Config) providers() ([]auth.Provider, error) {
	urls, issuers := splitList(c.JWKSURL), splitList(c.JWTIssuer)
	if len(urls) == 0 {
		if len(issuers) > 0 {
			return nil, errors.New("STAMPEDE_JWT_ISSUER is set without STAMPEDE_JWT_JWKS_URL")
		}
		return nil, nil
	}
	if len(issuers) != len(urls) {
		return nil, fmt.Errorf("STAMPEDE_JWT_JWKS_URL lists %d key sets, STAMPEDE_JWT_ISSUER %d issuers: give one issuer per key set, in the same order", len(urls), len(issuers))
	}
	out := make([]auth.Provider, len(urls))
	for i := range urls {
		out[i] = auth.Provider{Issuer: issuers[i], JWKSURL: urls[i]}
	}
	return out, nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// hs256Default is STAMPEDE_JWT_HS256 when it is not given: HS256 tokens are
// accepted only when no identity provider is configured.
func (c *Config) hs256Default() bool { return strings.TrimSpace(c.JWKSURL) == "" }

// validateIdentity checks the identity settings in every mode: the provider
// lists pair up, each JWKS URL is an http(s) URL (https in production,
// http only on loopback), issuers are distinct and not the HS256 issuer,
// and some kind of token is accepted.
func (c *Config) validateIdentity() []error {
	var errs []error
	provs, err := c.providers()
	if err != nil {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for _, p := range provs {
		if err := auth.CheckJWKSURL(p.JWKSURL, c.Mode == modeProduction); err != nil {
			errs = append(errs, fmt.Errorf("STAMPEDE_JWT_JWKS_URL: %w", err))
		}
		switch {
		case !auth.ValidSubject(p.Issuer):
			errs = append(errs, fmt.Errorf("STAMPEDE_JWT_ISSUER %q: an issuer is 1 to %d bytes of printable UTF-8", p.Issuer, auth.MaxSubjectBytes))
		case seen[p.Issuer]:
			errs = append(errs, fmt.Errorf("STAMPEDE_JWT_ISSUER lists %q twice", p.Issuer))
		case c.JWTHS256 && p.Issuer == c.JWTHS256Issuer:
			errs = append(errs, fmt.Errorf("STAMPEDE_JWT_ISSUER %q is also STAMPEDE_JWT_HS256_ISSUER: the two kinds of tokens need issuers of their own", p.Issuer))
		}
		seen[p.Issuer] = true
	}
	if c.JWTProviderMaxTTL < time.Minute || c.JWTProviderMaxTTL > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("STAMPEDE_JWT_PROVIDER_MAX_TTL %s is not from 1m to 720h", c.JWTProviderMaxTTL))
	}
	if c.JWTHS256 && (c.JWTHS256Issuer == "" || c.JWTHS256Audience == "") {
		errs = append(errs, errors.New("STAMPEDE_JWT_HS256_ISSUER and STAMPEDE_JWT_HS256_AUDIENCE must not be empty"))
	}
	if roles, _ := c.roleSet(); !c.JWTHS256 && len(provs) == 0 && (roles["gateway"] || roles["push"]) && c.isServe() {
		errs = append(errs, errors.New("STAMPEDE_JWT_HS256 is off and no STAMPEDE_JWT_JWKS_URL is set: no token would be accepted"))
	}
	return errs
}

func (c *Config) isServe() bool { return c.command == "" || c.command == "serve" }

// verifierOptions is auth.Options of the configuration (the subject mapper
// and the logger are the caller's).
func (c *Config) verifierOptions() auth.Options {
	provs, _ := c.providers() // validated
	o := auth.Options{
		Providers: provs, Audience: c.JWTAudience, RequireHTTPS: c.Mode == modeProduction,
		AdminGroup: c.JWTAdminGroup, GroupsClaim: c.JWTGroupsClaim, MaxProviderTokenTTL: c.JWTProviderMaxTTL,
		HS256Issuer: c.JWTHS256Issuer, HS256Audience: c.JWTHS256Audience,
		Cache: tokenCache(c.TokenCache),
	}
	if c.JWTHS256 {
		o.Secret = []byte(c.JWTSecret)
	}
	return o
}

// signer makes the HS256 tokens this configuration's verifiers accept
// (`stampede token`, the demo login).
func (c *Config) signer() auth.Signer {
	return auth.Signer{Secret: []byte(c.JWTSecret), Issuer: c.JWTHS256Issuer, Audience: c.JWTHS256Audience,
		AdminGroup: c.JWTAdminGroup, GroupsClaim: c.JWTGroupsClaim}
}

// validateSecrets checks what production requires of the secrets the
// process uses (jwt: HS256 on and a gateway, push or `stampede token`;
// payment: a gateway): set, not the built-in keys, at least minSecretBytes,
// not obviously low in entropy, and not the same secret twice.
func (c *Config) validateSecrets() []error {
	roles, _ := c.roleSet()
	serve := c.isServe()
	needJWT := c.JWTHS256 && (c.command == "token" || serve && (roles["gateway"] || roles["push"]))
	needPay := serve && roles["gateway"]
	var errs []error
	if needJWT {
		if err := checkSecret("STAMPEDE_JWT_SECRET", c.JWTSecret, devJWTSecret); err != nil {
			errs = append(errs, err)
		}
	}
	if needPay {
		if err := checkSecret("STAMPEDE_PAYMENT_SECRET", c.PaymentSecret, devPaymentSecret); err != nil {
			errs = append(errs, err)
		}
	}
	if needJWT && needPay && c.JWTSecret != "" && c.JWTSecret == c.PaymentSecret {
		errs = append(errs, errors.New("STAMPEDE_JWT_SECRET and STAMPEDE_PAYMENT_SECRET are the same: whoever holds one could sign with the other; use two secrets"))
	}
	// The proof-of-work key: STAMPEDE_POW_SECRET, checked like the others,
	// or (unset) derived from the payment secret checked above.
	if needPay && c.PowSecret != "" {
		if err := checkSecret("STAMPEDE_POW_SECRET", c.PowSecret, ""); err != nil {
			errs = append(errs, err)
		}
		if c.PowSecret == c.PaymentSecret || c.PowSecret == c.JWTSecret {
			errs = append(errs, errors.New("STAMPEDE_POW_SECRET is the payment or the JWT secret: whoever could see one would hold the other; "+
				"use a secret of its own, or leave it unset (derived from the payment secret)"))
		}
	}
	return errs
}

// checkSecret is nil for a secret production accepts.
func checkSecret(env, v, dev string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s is not set: production mode needs a secret of at least %d bytes (or run with STAMPEDE_MODE=development)", env, minSecretBytes)
	case v == dev:
		return fmt.Errorf("%s is the built-in development key, which anyone can read in the source: set a secret of your own", env)
	case len(v) < minSecretBytes:
		return fmt.Errorf("%s is %d bytes: production mode needs at least %d", env, len(v), minSecretBytes)
	}
	if why := lowEntropy(v); why != "" {
		return fmt.Errorf("%s %s: generate one, e.g. openssl rand -hex 32", env, why)
	}
	return nil
}

// Entropy floor of a secret: what its bytes' frequencies say it holds (a
// Shannon estimate; 32 random hex digits give about 115 bits, 64 about 250).
const minSecretBits = 96

// lowEntropy says why v is an obviously weak secret ("" if it is not):
// fewer than 8 distinct bytes, a repetition of a shorter pattern, or an
// estimate under minSecretBits. It catches the typed and repeated secrets,
// not every guessable one.
func lowEntropy(v string) string {
	var count [256]int
	distinct := 0
	for i := 0; i < len(v); i++ {
		if count[v[i]] == 0 {
			distinct++
		}
		count[v[i]]++
	}
	if distinct < 8 {
		return fmt.Sprintf("has only %d distinct characters", distinct)
	}
	for p := 1; p <= len(v)/2; p++ {
		if v[p:] == v[:len(v)-p] {
			return fmt.Sprintf("repeats a pattern of %d characters", p)
		}
	}
	var bits float64
	for _, n := range count {
		if n > 0 {
			f := float64(n) / float64(len(v))
			bits -= float64(n) * math.Log2(f)
		}
	}
	if bits < minSecretBits {
		return fmt.Sprintf("holds about %.0f bits of entropy, under %d", bits, minSecretBits)
	}
	return ""
}

// tokenTTL is the lifetime of `stampede token`: ttl, or when it is 0 the
// longest allowed (auth.MaxTokenTTL, admins auth.MaxAdminTokenTTL).
func tokenTTL(ttl time.Duration, admin bool) (time.Duration, error) {
	bound := auth.MaxTokenTTL
	if admin {
		bound = auth.MaxAdminTokenTTL
	}
	switch {
	case ttl == 0:
		return bound, nil
	case ttl < 0:
		return 0, fmt.Errorf("%w: --ttl must be a positive duration (a token that is already expired is refused by every gateway)", errUsage)
	case ttl > bound:
		return 0, fmt.Errorf("%w: --ttl %s exceeds %s, the longest %s token may live", errUsage, ttl, bound, map[bool]string{false: "a buyer", true: "an admin"}[admin])
	}
	return ttl, nil
}
