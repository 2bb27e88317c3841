package app

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
	if user <= 0 || user > auth.MaxDirectUserID {
		return fmt.Errorf("%w: --user must be a userId from 1 to %d (ids above are identity providers' subjects)", errUsage, auth.MaxDirectUserID)
	}
	if !cfg.JWTHS256 {
		return fmt.Errorf("%w: HS256 tokens are off (STAMPEDE_JWT_JWKS_URL is set and STAMPEDE_JWT_HS256 is not true): "+
			"get a token from the identity provider, or enable HS256 tokens on every gateway and push", errUsage)
	}
	if ttl, err = tokenTTL(ttl, admin); err != nil {
		return err
	}
	tok, err := cfg.signer().Issue(user, admin, ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

// tokenFlags adds the token command's own flags.
func tokenFlags(user *int64, admin *bool, ttl *time.Duration) func(fs *flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		fs.Int64Var(user, "user", 0, "userId (required, 1 … 999999999999999)")
		fs.BoolVar(admin, "admin", false, "issue an admin token (with -jwt-admin-group set, it lists that group)")
		fs.DurationVar(ttl, "ttl", 0, "token lifetime, at most 24h (admin: 1h); 0: the longest allowed")
	}
}
