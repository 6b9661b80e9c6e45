package main

import (
	"flag"
	"fmt"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/zketcd/zketcd/internal/auth"
	"github.com/zketcd/zketcd/internal/grpcsrv"
)

// registerAuth registers etcd's authentication flags.
func (f *serveFlags) registerAuth(fs *flag.FlagSet) {
	fs.StringVar(&f.authToken, "auth-token", "simple", "token type: simple, or jwt,pub-key=<file>,priv-key=<file>,sign-method=<alg>[,ttl=<duration>] (as etcd's)")
	fs.UintVar(&f.authTokenTTL, "auth-token-ttl", 300, "seconds a simple token lives after its last use")
	fs.UintVar(&f.bcryptCost, "bcrypt-cost", uint(bcrypt.DefaultCost), fmt.Sprintf("bcrypt cost of password hashes (%d..%d)", bcrypt.MinCost, bcrypt.MaxCost))
}

// authConfig builds the token provider from --auth-token and
// --auth-token-ttl. Errors: a malformed --auth-token, unreadable or
// mismatched keys, a --bcrypt-cost out of bcrypt's range.
func (f *serveFlags) authConfig() (grpcsrv.AuthConfig, error) {
	if int(f.bcryptCost) < bcrypt.MinCost || int(f.bcryptCost) > bcrypt.MaxCost {
		return grpcsrv.AuthConfig{}, fmt.Errorf("--bcrypt-cost %d: must be between %d and %d", f.bcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	tp, err := auth.NewTokenProvider(f.authToken, time.Duration(f.authTokenTTL)*time.Second)
	if err != nil {
		return grpcsrv.AuthConfig{}, fmt.Errorf("--auth-token: %w", err)
	}
	return grpcsrv.AuthConfig{Tokens: tp, BcryptCost: int(f.bcryptCost)}, nil
}
