// Command zketcd serves the etcd v3 API with Apache ZooKeeper as storage.
//
//	zketcd serve --zk 127.0.0.1:2181 [flags]   serve on an existing ensemble
//	zketcd dev [flags]                         start a local ZooKeeper and serve on it
//	zketcd rv --zk ... KEY...                  map keys' revisions to ZooKeeper zxids
//	zketcd snapshot restore FILE --zk ...      load an etcd snapshot into a fresh root
//	zketcd move --zk ... --to-root ROOT        move a served cluster to another root or ensemble
//	zketcd mirror [cutover] --from URLS [--prefix P] --zk ...  copy a running etcd (or one prefix) with the same revisions
//	zketcd replay-loss [--dry-run] FILE        re-apply what ZooKeeper lost in a rollback
//	zketcd zk-acl --zk ... --zk-auth ID        ACL every znode of a root to one ZooKeeper identity
//	zketcd tenant create|list|limits|delete|snapshot|move --zk ...  administer a fleet's tenants
//	zketcd version
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"

	"go.etcd.io/etcd/api/v3/version"

	"github.com/zketcd/zketcd/internal/buildinfo"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = runServe(os.Args[2:])
	case "dev":
		err = runDev(os.Args[2:])
	case "rv":
		err = runRV(os.Args[2:])
	case "snapshot":
		err = runSnapshot(os.Args[2:])
	case "move":
		err = runMove(os.Args[2:], os.Stdout)
	case "mirror":
		err = runMirror(os.Args[2:])
	case "replay-loss":
		err = runReplayLoss(os.Args[2:])
	case "zk-acl":
		err = runZKACL(os.Args[2:])
	case "tenant":
		err = runTenant(os.Args[2:], os.Stdout)
	case "version", "--version":
		printVersion(os.Stdout)
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "zketcd: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "zketcd: %v\n", err)
		os.Exit(1)
	}
}

// printVersion writes what `zketcd version` prints, in the shape of
// `etcd --version`: the build (internal/buildinfo, the version set at link
// time by make build) and the etcd API it serves.
func printVersion(w io.Writer) {
	b := buildinfo.Get()
	commit := b.Commit
	if b.Modified {
		commit += " (modified)"
	}
	fmt.Fprintf(w, "zketcd Version: %s\nGit SHA: %s\nGo Version: %s\nGo OS/Arch: %s/%s\netcd API Version: %s\n",
		b.Version, commit, b.GoVersion, runtime.GOOS, runtime.GOARCH, version.Version)
}

func usage() {
	fmt.Fprint(os.Stderr, `zketcd serves the etcd v3 API with Apache ZooKeeper as storage.

Usage:
  zketcd serve --zk HOST:PORT[,...] [flags]   serve on an existing ZooKeeper ensemble
  zketcd dev [flags]                          start a local ZooKeeper and serve on it
  zketcd rv --zk HOST:PORT KEY...             show keys' revisions and the zxids that wrote them
  zketcd snapshot restore FILE --zk HOST:PORT --zk-root /ROOT
                                              load an etcd snapshot into a fresh root
  zketcd move --zk HOST:PORT --zk-root /ROOT --to-root /NEW [--to-zk HOST:PORT] [--free-source]
                                              move a cluster to another root or ensemble while it serves
  zketcd mirror --from URLS [--prefix P] --zk HOST:PORT --zk-root /ROOT [--tenant NAME] [--until-caught-up]
                                              copy a running etcd (or one prefix of it), same revisions,
                                              and follow it; run again, it continues where it stopped
  zketcd mirror cutover --from URLS [--prefix P] --zk HOST:PORT --zk-root /ROOT [--quiet 1s] [--on-signal]
                                              catch up, wait for quiet, check both sides' prefix hash,
                                              and hand the root to the instances
  zketcd replay-loss [--endpoints H:P] [--dry-run] FILE
                                              re-apply the changes ZooKeeper lost (a loss file)
  zketcd zk-acl --zk HOST:PORT --zk-root /ROOT --zk-auth ID [--zk-former-auth ID] [--check]
                                              ACL every znode of a root to one ZooKeeper identity
  zketcd tenant create|list|limits|delete|snapshot|move --zk HOST:PORT --zk-root /FLEET ...
                                              administer the tenants of a fleet (serve --tenants)
  zketcd version

Run "zketcd serve -h" for the flags. Every flag can also be set with an
environment variable: --max-txn-ops is ZKETCD_MAX_TXN_OPS.
`)
}
