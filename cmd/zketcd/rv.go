package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/backend"
	"github.com/zketcd/zketcd/revision"
	"github.com/zketcd/zketcd/zkstore"
)

// runRV prints, for each key, its revisions and the zxids of the ZooKeeper
// transactions that wrote them, and for each --revision the log entry and
// zxid that made it. It reads the log directly, not through a zketcd.
func runRV(args []string) error {
	fs := flag.NewFlagSet("zketcd rv", flag.ContinueOnError)
	zkServers := fs.String("zk", "127.0.0.1:2181", "ZooKeeper servers, comma separated")
	root := fs.String("zk-root", "/zketcd", "zketcd's root znode")
	auth := fs.String("zk-auth", "", "ZooKeeper credentials scheme:credential")
	var revs revList
	fs.Var(&revs, "revision", "a revision to map to its zxid (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: zketcd rv [--zk H:P] [--zk-root /zketcd] [--revision N]... KEY...")
		fs.PrintDefaults()
	}
	keys, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(keys) == 0 && len(revs) == 0 {
		fs.Usage()
		return errors.New("give at least one key or --revision")
	}
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	cfg := zkstore.Config{Servers: splitList(*zkServers), Root: *root, Logger: logrus.NewEntry(lg)}
	if *auth != "" {
		cfg.Auth = []string{*auth}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := zkstore.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	var entries []entrySpan
	view, head, _, err := backend.Replay(ctx, st, backend.DefaultReadWindow, func(e *revision.Entry) {
		if first := e.FirstRev(); first > 0 {
			entries = append(entries, entrySpan{first: first, last: e.LastRev(), lsn: e.LSN, zxid: e.Zxid})
		}
	})
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "# root %s: head entry %d, revision %d, zxid %s\n", *root, head.LSN, head.Rev, zxidString(head.Zxid))
	if len(keys) > 0 {
		fmt.Fprintln(w, "KEY\tCREATE_REV\tMOD_REV\tVERSION\tCZXID\tMZXID")
		err = view.Read(func(r revision.Reader) error {
			for _, k := range keys {
				var kv *revision.KeyValue
				_ = r.Range([]byte(k), nil, 0, func(v *revision.KeyValue) bool { kv = v; return false })
				if kv == nil {
					fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\n", k)
					continue
				}
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\n", k, kv.CreateRevision, kv.ModRevision, kv.Version,
					zxidString(kv.CreateZxid), zxidString(kv.ModZxid))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(revs) > 0 {
		fmt.Fprintln(w, "REVISION\tLOG_ENTRY\tZXID")
		for _, rv := range revs {
			i := sort.Search(len(entries), func(i int) bool { return entries[i].last >= rv })
			if rv == 1 {
				fmt.Fprintf(w, "%d\t1\t(empty store)\n", rv)
			} else if i == len(entries) || entries[i].first > rv {
				fmt.Fprintf(w, "%d\t-\t-\n", rv)
			} else {
				fmt.Fprintf(w, "%d\t%d\t%s\n", rv, entries[i].lsn, zxidString(entries[i].zxid))
			}
		}
	}
	return w.Flush()
}

type entrySpan struct {
	first, last, lsn, zxid int64
}

// zxidString shows a zxid in hex and as epoch:counter.
func zxidString(z int64) string {
	if z == 0 {
		return "-"
	}
	return fmt.Sprintf("0x%x (%d:%d)", z, z>>32, z&0xffffffff)
}

type revList []int64

func (r *revList) String() string { return fmt.Sprint([]int64(*r)) }

func (r *revList) Set(s string) error {
	var v int64
	if _, err := fmt.Sscanf(s, "%d", &v); err != nil || v < 1 {
		return fmt.Errorf("revision %q: want a positive integer", s)
	}
	*r = append(*r, v)
	return nil
}
