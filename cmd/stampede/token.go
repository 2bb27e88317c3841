package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/stampede-sh/stampede/auth"
)

func runToken(ctx context.Context, args []string, stdout io.Writer) error {
	var user int64
	var admin bool
	var ttl time.Duration
	cfg, err := parse("token", args, tokenFlags(&user, &admin, &ttl))
	if err != nil {
		return err
	}
	if user <= 0 {
		return fmt.Errorf("%w: --user must be a positive userId", errUsage)
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: --ttl must be a positive duration (a token that is already expired is refused by every gateway)", errUsage)
	}
	tok, err := auth.Issue([]byte(cfg.JWTSecret), user, admin, ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

// tokenFlags adds the token command's own flags.
func tokenFlags(user *int64, admin *bool, ttl *time.Duration) func(fs *flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		fs.Int64Var(user, "user", 0, "userId (required, > 0)")
		fs.BoolVar(admin, "admin", false, "issue an admin token")
		fs.DurationVar(ttl, "ttl", 24*time.Hour, "token lifetime")
	}
}
