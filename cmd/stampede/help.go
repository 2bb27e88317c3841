package main

import (
	"net/url"

	"github.com/go-sql-driver/mysql"
)

// maskPassword hides the password of a URL or MySQL DSN (for -h).
func maskPassword(v string) string {
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
