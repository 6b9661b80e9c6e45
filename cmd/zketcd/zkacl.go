package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return fmt.Sprint([]string(*l)) }

func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// runZKACL sets the --zk-auth identity's ACL on every znode of an existing
// root (the root last), printing progress, then reads every znode's ACL
// back; with --check it only reads. --zk-former-auth gives the identity
// the root is ACLed to now, when it moves to another one.
func runZKACL(args []string) error {
	fs, f, check := zkACLFlags()
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if f.zk == "" || (f.zkAuth == "" && f.zkAuthFile == "") {
		return errors.New("--zk and --zk-auth (or --zk-auth-file) are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return zkACL(ctx, *f, *check, os.Stdout)
}

// zkACLFlags registers zk-acl's flags: the ZooKeeper ones (with
// --zk-former-auth), logging and --check.
func zkACLFlags() (fs *flag.FlagSet, f *serveFlags, check *bool) {
	f = &serveFlags{}
	fs = flag.NewFlagSet("zketcd zk-acl", flag.ContinueOnError)
	f.registerZK(fs, "ZooKeeper servers, comma separated host:port", "the zketcd root to re-ACL")
	f.registerLog(fs)
	check = fs.Bool("check", false, "only read every znode's ACL and report those not ACLed to --zk-auth")
	return fs, f, check
}

func zkACL(ctx context.Context, f serveFlags, check bool, out io.Writer) error {
	cfg, err := f.loggedStoreConfig()
	if err != nil {
		return err
	}
	cfg.Logger = cfg.Logger.WithField("command", "zk-acl")
	s, err := zkstore.OpenInspector(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	if !check {
		fmt.Fprintf(out, "re-ACLing every znode of %s to %s\n", f.zkRoot, s.Identity())
		n, err := s.ReACL(ctx, func(n int64) { fmt.Fprintf(out, "  %d znodes\n", n) })
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "set the ACL of %d znodes; the simple tokens' secret is rotated by the next instance to start with this identity (or its leader instance within seconds): clients log in again\n", n)
	}
	checked, wrong, err := s.CheckACL(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d znodes checked, %d not ACLed to %s only\n", checked, wrong, s.Identity())
	if wrong > 0 {
		return fmt.Errorf("%d znodes of %s are not ACLed to %s only (run zketcd zk-acl without --check)", wrong, f.zkRoot, s.Identity())
	}
	return nil
}
