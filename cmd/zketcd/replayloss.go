package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/internal/lossfile"
)

// runReplayLoss re-applies a loss file (written by an instance that found
// ZooKeeper's data older than its own) through the etcd API of a running
// zketcd: the last lost change of every key, as a new write, skipping keys
// written since (unless --force), after checking that the target is the
// cluster the file was written for. The logic is in internal/lossfile.
func runReplayLoss(args []string) error {
	fs := flag.NewFlagSet("zketcd replay-loss", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "zketcd (etcd API) endpoints, comma separated (https:// for TLS)")
	dryRun := fs.Bool("dry-run", false, "print what would be written and write nothing")
	force := fs.Bool("force", false, "also overwrite keys written after the fork (by default they are skipped)")
	anyCluster := fs.Bool("ignore-cluster-id", false, "replay even if the target's cluster ID is not the loss file's (a root restored under a new identity)")
	user := fs.String("user", "", "etcd user when authentication is on, as etcdctl's: name (the password is asked on the terminal, or read from --password-file or $ZKETCD_PASSWORD) or name:password (seen by every local user in the process list)")
	passwordFile := fs.String("password-file", "", "file holding the password of --user")
	cacert := fs.String("cacert", "", "verify the server's certificate with this CA bundle (etcdctl's --cacert)")
	cert := fs.String("cert", "", "client certificate for TLS (etcdctl's --cert)")
	key := fs.String("key", "", "key of --cert (etcdctl's --key)")
	insecure := fs.Bool("insecure-skip-tls-verify", false, "accept any server certificate (etcdctl's flag)")
	timeout := fs.Duration("command-timeout", 30*time.Second, "timeout of each request")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: zketcd replay-loss [--endpoints H:P] [--user NAME] [--cacert F] [--dry-run] [--force] FILE")
		fs.PrintDefaults()
	}
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 1 {
		fs.Usage()
		return errors.New("give one loss file")
	}
	hdr, recs, err := readLossFile(files[0])
	if err != nil {
		return err
	}
	cfg := clientv3.Config{Endpoints: splitList(*endpoints), DialTimeout: *timeout}
	if cfg.TLS, err = clientTLS(*cacert, *cert, *key, *insecure); err != nil {
		return err
	}
	if *user != "" {
		if cfg.Username, cfg.Password, err = credentials(*user, *passwordFile, os.Stdin, os.Stderr); err != nil {
			return err
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	return replayLoss(os.Stdout, cli, hdr, recs, lossfile.ReplayOptions{DryRun: *dryRun, Force: *force, AnyCluster: *anyCluster}, *timeout)
}

// clientTLS builds etcdctl's client TLS from --cacert, --cert, --key and
// --insecure-skip-tls-verify (nil when none is given: plaintext, unless
// an endpoint says https://).
func clientTLS(cacert, cert, key string, insecure bool) (*tls.Config, error) {
	if cacert == "" && cert == "" && key == "" && !insecure {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure}
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no certificates", cacert)
		}
		cfg.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("--cert and --key go together")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// passwordEnv holds --user's password when neither the flag nor a file
// gives it.
const passwordEnv = "ZKETCD_PASSWORD"

// credentials splits --user as etcdctl does: name:password, or name with
// the password from passwordFile, $ZKETCD_PASSWORD, or asked on the
// terminal in (echo off), in that order.
func credentials(user, passwordFile string, in *os.File, prompt io.Writer) (name, password string, err error) {
	if name, password, ok := strings.Cut(user, ":"); ok {
		return name, password, nil
	}
	switch {
	case passwordFile != "":
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return "", "", fmt.Errorf("--password-file: %w", err)
		}
		return user, strings.TrimRight(string(b), "\r\n"), nil
	case os.Getenv(passwordEnv) != "":
		return user, os.Getenv(passwordEnv), nil
	}
	fmt.Fprintf(prompt, "Password for %s: ", user)
	pw, err := readPassword(in)
	fmt.Fprintln(prompt)
	if err != nil {
		return "", "", fmt.Errorf("read the password of %s (give --password-file or $%s when there is no terminal): %w", user, passwordEnv, err)
	}
	return user, pw, nil
}

func replayLoss(w io.Writer, kv clientv3.KV, hdr lossfile.Header, recs []lossfile.Record, opts lossfile.ReplayOptions, timeout time.Duration) error {
	fmt.Fprintf(w, "loss of cluster %s (root %s), written by %s at %s: revisions %d–%d lost (the instance had applied %d, ZooKeeper held %d)\n",
		hdr.ClusterID, hdr.Root, hdr.Member, hdr.Written, hdr.ForkRev+1, hdr.AppliedRev, hdr.AppliedRev, hdr.ZooKeeperRev)
	switch {
	case hdr.Compacted && hdr.DeletesUnknown:
		fmt.Fprintln(w, "note: the history was compacted; the file holds final values, and no deletions (ZooKeeper's state at the fork could not be read)")
	case hdr.Compacted:
		fmt.Fprintln(w, "note: the history was compacted; the file holds final values, and deletions without their revision")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout*time.Duration(2*len(recs)+1))
	defer cancel()
	acts, err := lossfile.Replay(ctx, kv, hdr, recs, opts)
	if errors.Is(err, lossfile.ErrOtherCluster) {
		return err
	}
	written, skipped := 0, 0
	for _, a := range acts {
		prefix := ""
		if opts.DryRun && a.Verb != "skip" {
			prefix = "would "
		}
		fmt.Fprintf(w, "%s%v\n", prefix, a)
		if a.Verb == "skip" {
			skipped++
		} else {
			written++
		}
	}
	verb := "written"
	if opts.DryRun {
		verb = "to write"
	}
	fmt.Fprintf(w, "%d keys %s, %d skipped\n", written, verb, skipped)
	return err
}

func readLossFile(path string) (lossfile.Header, []lossfile.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return lossfile.Header{}, nil, err
	}
	defer f.Close()
	hdr, recs, err := lossfile.Read(f)
	if err != nil {
		return lossfile.Header{}, nil, fmt.Errorf("%s: %w", path, err)
	}
	return hdr, recs, nil
}
