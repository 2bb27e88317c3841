package app

import (
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/stampede-sh/stampede/auth"
)

// maskPassword hides the password of a URL or MySQL DSN (for -h), and the
// user and query of an http(s) URL (a JWKS URL may carry an API key in
// either: auth.RedactURL).
func maskPassword(v string) string {
	if strings.Contains(v, ",") && strings.Contains(v, "://") { // a node list: each URL
		parts := strings.Split(v, ",")
		for i, p := range parts {
			parts[i] = maskPassword(p)
		}
		return strings.Join(parts, ",")
	}
	if u, err := url.Parse(v); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
		return auth.RedactURL(v)
	}
	if u, err := url.Parse(v); err == nil && u.User != nil && u.Scheme != "" {
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
		return v
	}
	if cfg, err := mysql.ParseDSN(v); err == nil && cfg.Passwd != "" {
		cfg.Passwd = "xxxxx"
		return cfg.FormatDSN()
	}
	return v
}
