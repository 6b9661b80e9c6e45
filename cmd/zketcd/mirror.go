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
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zketcd/zketcd/internal/mirror"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// runMirror is `zketcd mirror [cutover] --from URLS [--cacert F --cert F
// --key F] [--prefix P] --zk ... --zk-root ... [--tenant NAME]`: it copies a running etcd, or one prefix
// of it, into a root with the same revisions and follows it (package
// mirror) until interrupted or, with --until-caught-up, until it has
// copied everything; run again, it continues where it stopped. `cutover`
// catches up, waits for the source to be quiet under the prefix, and
// finishes the mirror so that instances may serve the root.
func runMirror(args []string) error {
	cutover := len(args) > 0 && args[0] == "cutover"
	name := "zketcd mirror"
	if cutover {
		args, name = args[1:], "zketcd mirror cutover"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var f serveFlags
	from := fs.String("from", "", "client URLs of the etcd to copy, comma separated")
	prefix := fs.String("prefix", "", "copy only the keys under this prefix (one cluster of a shared etcd); empty: every key")
	tenant := fs.String("tenant", "", "copy into this fleet tenant's root (--zk-root is then the fleet's root)")
	untilCaughtUp := fs.Bool("until-caught-up", false, "exit once every revision the source has is copied")
	interval := fs.Duration("status-interval", 5*time.Second, "how often to show the position and sync leases")
	quiet := fs.Duration("quiet", time.Second, "cutover: how long the source must take no write under the prefix")
	onSignal := fs.Bool("on-signal", false, "cutover: copy and follow until SIGUSR1 (send it once the writers stopped), then cut over")
	pageSize := fs.Int("page-size", 1000, "keys per Range of a prefix's initial copy and of the cut-over's hash")
	cacert := fs.String("cacert", "", "verify the source etcd's certificate with this CA bundle (etcdctl's --cacert)")
	cert := fs.String("cert", "", "client certificate for TLS to the source etcd (etcdctl's --cert)")
	key := fs.String("key", "", "key of --cert (etcdctl's --key)")
	insecure := fs.Bool("insecure-skip-tls-verify", false, "accept any certificate of the source etcd (etcdctl's flag)")
	f.registerZK(fs, "ZooKeeper servers, comma separated host:port", "root znode to copy into: absent, empty, or a mirror's to continue")
	f.registerLog(fs)
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if *from == "" || f.zk == "" {
		fs.Usage()
		return errors.New("--from and --zk are required")
	}
	sc, err := f.loggedStoreConfig()
	if err != nil {
		return err
	}
	if *tenant != "" {
		sc.Root = zkstore.TenantRoot(sc.Root, *tenant)
	}
	srcTLS, err := clientTLS(*cacert, *cert, *key, *insecure)
	if err != nil {
		return err
	}
	src, err := clientv3.New(clientv3.Config{Endpoints: splitList(*from), TLS: srcTLS, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("connect to %s: %w", *from, err)
	}
	defer src.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := mirror.Config{Source: src, SourceURLs: *from, Prefix: []byte(*prefix), Store: sc, UntilCaughtUp: *untilCaughtUp,
		StatusInterval: *interval, Quiet: *quiet, PageSize: *pageSize}
	var last mirror.Status
	var shown mirror.Status
	progress := func(s mirror.Status) {
		last = s
		if s != shown {
			shown = s
			showProgress(os.Stderr, s)
		}
	}
	what := *from
	if *prefix != "" {
		what = fmt.Sprintf("%q of %s", *prefix, *from)
	}
	if cutover && *onSignal {
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		defer signal.Stop(usr1)
		start := make(chan struct{})
		cfg.Start = start
		fmt.Fprintf(os.Stderr, "following; send SIGUSR1 (kill -USR1 %d) once the writers of the prefix stopped\n", os.Getpid())
		go func() {
			select {
			case <-usr1:
				fmt.Fprintln(os.Stderr, "cut-over: waiting for the source to be quiet")
				close(start)
			case <-ctx.Done():
			}
		}()
	}
	if cutover {
		res, err := mirror.Cutover(ctx, cfg, progress)
		if err != nil {
			return err
		}
		fmt.Printf("cut over %s into %s at revision %d: prefix hash %08x on both sides (%d keys, %d leases); instances may serve the root\n",
			what, sc.Root, res.Rev, res.RootHash, res.Keys, res.Leases)
		return nil
	}
	if err := mirror.Run(ctx, cfg, progress); err != nil {
		return err
	}
	fmt.Printf("mirrored %s into %s up to revision %d (source at %d, every change up to %d copied); run `zketcd mirror cutover` with the same flags to finish\n",
		what, sc.Root, last.Rev, last.SourceRev, last.Seen)
	return nil
}

// showProgress writes one line of a mirror's position.
func showProgress(w io.Writer, s mirror.Status) {
	if s.Initial {
		fmt.Fprintf(w, "initial copy: %d keys at revision %d\n", s.Copied, s.Rev)
		return
	}
	fmt.Fprintf(w, "revision %d, source at %d, behind %d, %d leases\n", s.Rev, s.SourceRev, s.Behind(), s.Leases)
}
