package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/etcdformat"
	"github.com/zketcd/zketcd/internal/move"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/tenant"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// tenantFlags are serve's fleet settings: --tenants and the defaults of
// the tenants' limits.
type tenantFlags struct {
	enabled  bool
	adminCNs string
	idle     time.Duration
	balance  time.Duration
	sessions int
	limits   limitFlags
}

// limitFlags are the flags of a tenant's limits, under a prefix
// ("tenant-" for serve's defaults, none for zketcd tenant's own).
type limitFlags struct {
	requests, writeBytes, watchers, leases, quota int64
}

func (l *limitFlags) register(fs *flag.FlagSet, prefix, whose string) {
	fs.Int64Var(&l.requests, prefix+"requests-per-second", 0, "requests a second "+whose+" on each instance (0: the default; negative: no limit)")
	fs.Int64Var(&l.writeBytes, prefix+"write-bytes-per-second", 0, "bytes written a second "+whose+" on each instance (0: the default; negative: no limit)")
	fs.Int64Var(&l.watchers, prefix+"max-watchers", 0, "watchers "+whose+" on each instance (0: the default; negative: no limit)")
	fs.Int64Var(&l.leases, prefix+"max-leases", 0, "live leases "+whose+" (0: the default; negative: no limit)")
	fs.Int64Var(&l.quota, prefix+"quota-backend-bytes", 0, "space quota "+whose+", as etcd's --quota-backend-bytes (0: the default; negative: no quota)")
}

func (l limitFlags) limits() tenant.Limits {
	return tenant.Limits{RequestsPerSecond: l.requests, WriteBytesPerSecond: l.writeBytes, Watchers: l.watchers, Leases: l.leases, QuotaBackendBytes: l.quota}
}

func (f *tenantFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.enabled, "tenants", false, "serve the tenants of the fleet root --zk-root (zketcd tenant create) instead of one cluster; each client connection is bound to a tenant by its verified client certificate's CN (needs --client-cert-auth)")
	fs.StringVar(&f.adminCNs, "tenant-admin-cn", "", "client certificate CNs of the fleet's administrators, comma separated (never a tenant's)")
	fs.DurationVar(&f.idle, "tenant-idle-timeout", embed.DefaultTenantIdleTimeout, "stop a tenant's engine on this instance after this long without a request or a watcher (negative: never)")
	fs.DurationVar(&f.balance, "tenant-balance-interval", embed.DefaultTenantBalanceInterval, "how often this instance hands the leadership of tenants it leads beyond its share to the other instances running them (negative: never)")
	fs.IntVar(&f.sessions, "tenant-zk-sessions", embed.DefaultTenantSessions, "ZooKeeper sessions this instance's tenants share (each tenant on the least used when it starts)")
	f.limits.register(fs, "tenant-", "of a tenant whose own limits do not set it")
}

func (f tenantFlags) config() embed.TenantsConfig {
	return embed.TenantsConfig{Enabled: f.enabled, AdminCNs: splitList(f.adminCNs), IdleTimeout: f.idle, BalanceInterval: f.balance, Sessions: f.sessions, Defaults: f.limits.limits()}
}

// runFleet serves a fleet until ctx ends or serving fails.
func runFleet(ctx context.Context, cfg embed.Config, ready func()) error {
	lg := cfg.Logger
	openCtx, cancel := context.WithTimeout(ctx, time.Minute)
	f, err := embed.StartFleet(openCtx, cfg)
	cancel()
	if err != nil {
		return err
	}
	lg.WithFields(logrus.Fields{"name": cfg.Engine.Name, "zk_root": cfg.Engine.Store.Root, "client_addrs": f.ClientAddrs()}).Info("zketcd is serving a fleet")
	if ready != nil {
		ready()
	}
	select {
	case <-ctx.Done():
		err = nil
	case err = <-f.Err():
	}
	lg.Info("shutting down")
	f.Close(5 * time.Second)
	return err
}

const tenantUsage = `usage: zketcd tenant COMMAND [flags] (the --zk, --zk-root and --zk-auth/--zk-auth-file flags of serve)
  create NAME [--cn CN]... [limits]  register a tenant served to certificates with CN=NAME (or the --cn given)
  list                               the tenants, their CNs, state and limits
  limits NAME [limits]               show a tenant's limits, or change those given
  delete NAME [--wait 2m]            stop serving a tenant and delete every znode of it
  snapshot NAME FILE                 write the tenant's data as an etcd snapshot file (etcdutl snapshot restore)
  move NAME --to-root ROOT [--to-zk SERVERS]  move the tenant's data to a new root (or ensemble) while it is served
  move NAME --free-source            delete the data left in the roots the tenant moved from
`

// runTenant administers the tenants of a fleet root, writing what it did
// to out.
func runTenant(args []string, out io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, tenantUsage)
		return errors.New("a tenant command is required")
	}
	cmd, args := args[0], args[1:]
	var f serveFlags
	fs := flag.NewFlagSet("zketcd tenant "+cmd, flag.ContinueOnError)
	f.registerZK(fs, "ZooKeeper servers, comma separated host:port", "the fleet root")
	f.registerLog(fs)
	var cns stringList
	var lf limitFlags
	var wait time.Duration
	var mf tenantMoveFlags
	switch cmd {
	case "create":
		fs.Var(&cns, "cn", "a client certificate CN the tenant is served to (repeatable; default: its name)")
		lf.register(fs, "", "of this tenant")
	case "limits":
		lf.register(fs, "", "of this tenant")
	case "delete":
		fs.DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for the instances to stop serving the tenant")
	case "move":
		mf.register(fs)
	case "list", "snapshot":
	default:
		fmt.Fprint(os.Stderr, tenantUsage)
		return fmt.Errorf("unknown tenant command %q", cmd)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if f.zk == "" {
		return errors.New("--zk is required")
	}
	lgr, err := f.logger()
	if err != nil {
		return err
	}
	lg := logrus.NewEntry(lgr)
	storeCfg, err := f.storeConfig(lg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, err := zkstore.OpenRegistry(ctx, storeCfg)
	if err != nil {
		return err
	}
	defer reg.Close()
	name := ""
	wantArgs := map[string]int{"create": 1, "limits": 1, "delete": 1, "list": 0, "snapshot": 2, "move": 1}[cmd]
	if len(pos) != wantArgs {
		return fmt.Errorf("zketcd tenant %s takes %d argument(s), got %q", cmd, wantArgs, pos)
	}
	if wantArgs > 0 {
		name = pos[0]
		if err := tenant.ValidName(name); err != nil {
			return err
		}
	}
	switch cmd {
	case "create":
		if len(cns) == 0 {
			cns = stringList{name}
		}
		for _, cn := range cns {
			if err := tenant.ValidCN(cn); err != nil {
				return err
			}
		}
		rec, err := reg.CreateTenant(zkstore.TenantRecord{Name: name, CNs: cns, Limits: lf.limits().Encode()})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "created tenant %s, served to CN %s, root %s\n", rec.Name, strings.Join(rec.CNs, ", "), zkstore.TenantRoot(storeCfg.Root, rec.Name))
		return nil
	case "list":
		recs, _, _, err := reg.Tenants(false)
		if err != nil {
			return err
		}
		return printTenants(out, recs)
	case "limits":
		return tenantLimits(out, reg, name, fs, lf)
	case "delete":
		err := reg.DeleteTenant(context.Background(), name, wait, func(n int64) {
			lg.WithFields(logrus.Fields{"tenant": name, "znodes_deleted": n}).Info("deleting")
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "deleted tenant %s and every znode of it\n", name)
		return nil
	case "move":
		reg.Close() // the mover opens its own
		return tenantMove(out, storeCfg, name, mf)
	default: // snapshot
		rec, err := reg.Tenant(name)
		if err != nil {
			return err
		}
		return tenantSnapshot(out, storeCfg, rec, pos[1])
	}
}

// tenantMoveFlags are zketcd tenant move's.
type tenantMoveFlags struct {
	toRoot, toZK string
	free         bool
	release      time.Duration
}

func (m *tenantMoveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.toRoot, "to-root", "", "the root to move the tenant's data into (new, or one this move started), on the fleet's ensemble")
	fs.StringVar(&m.toZK, "to-zk", "", "ZooKeeper servers of the destination, comma separated host:port (default: the fleet's)")
	fs.BoolVar(&m.free, "free-source", false, "delete the data left in the roots the tenant moved from, keeping the records that send instances on")
	fs.DurationVar(&m.release, "release-timeout", 2*time.Minute, "how long to wait for every instance to leave the fenced source")
}

// tenantMove is zketcd tenant move: the tenant's data into a new root
// (package move's RunTenant), or its previous roots freed.
func tenantMove(out io.Writer, fleet zkstore.Config, name string, m tenantMoveFlags) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if m.free {
		if m.toRoot != "" {
			return errors.New("--free-source and --to-root are separate steps: move first, free once it finished")
		}
		freed, err := move.FreeTenantSources(ctx, fleet, name)
		for _, root := range freed {
			fmt.Fprintf(out, "freed %s (tenant %s moved from it)\n", root, name)
		}
		return err
	}
	if m.toRoot == "" {
		return errors.New("--to-root (or --free-source) is required")
	}
	dst := fleet
	dst.Root = m.toRoot
	if m.toZK != "" {
		dst.Servers = splitList(m.toZK)
	}
	res, err := move.RunTenant(ctx, name, move.Config{Source: fleet, Dest: dst, Logger: fleet.Logger.WithField("cmd", "tenant move"), ReleaseTimeout: m.release})
	if err != nil {
		return err
	}
	if res.AlreadyMoved {
		fmt.Fprintf(out, "tenant %s lives in %s already\n", name, m.toRoot)
		return nil
	}
	fmt.Fprintf(out, "moved tenant %s from %s to %s at log entry %d, revision %d (writes paused %v); free its previous root with --free-source\n",
		name, res.From, m.toRoot, res.FenceLSN, res.Rev, res.Paused.Round(time.Millisecond))
	return nil
}

// parseInterleaved parses fs over args whose flags and positional
// arguments may come in any order (zketcd tenant create NAME --cn X).
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// printTenants writes the registry as a table.
func printTenants(w io.Writer, recs []zkstore.TenantRecord) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCNS\tSTATE\tCREATED\tROOT\tLIMITS")
	for _, r := range recs {
		limits := string(r.Limits)
		if limits == "" || limits == "{}" {
			limits = "defaults"
		}
		root := "-" // the fleet's roots/NAME
		if r.Root != "" {
			root = r.Place("").String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, strings.Join(r.CNs, ","), r.State, r.Created.Format(time.RFC3339), root, limits)
	}
	return tw.Flush()
}

// tenantLimits shows a tenant's limits, or sets the ones given on the
// command line (a compare-and-swap on its record, retried on a race).
func tenantLimits(w io.Writer, reg *zkstore.Registry, name string, fs *flag.FlagSet, lf limitFlags) error {
	for range 10 {
		rec, err := reg.Tenant(name)
		if err != nil {
			return err
		}
		cur, err := tenant.DecodeLimits(rec.Limits)
		if err != nil {
			return err
		}
		set := lf.limits()
		changed := false
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "requests-per-second":
				cur.RequestsPerSecond = set.RequestsPerSecond
			case "write-bytes-per-second":
				cur.WriteBytesPerSecond = set.WriteBytesPerSecond
			case "max-watchers":
				cur.Watchers = set.Watchers
			case "max-leases":
				cur.Leases = set.Leases
			case "quota-backend-bytes":
				cur.QuotaBackendBytes = set.QuotaBackendBytes
			default:
				return // a connection flag
			}
			changed = true
		})
		if !changed {
			data, _ := json.MarshalIndent(cur, "", "  ")
			fmt.Fprintf(w, "%s (0: the fleet's default)\n", data)
			return nil
		}
		if _, err := reg.SetTenantLimits(rec, cur.Encode()); err != nil {
			if errors.Is(err, zkstore.ErrTenantNotFound) {
				return err
			}
			continue // changed meanwhile: read it again
		}
		fmt.Fprintf(w, "limits of tenant %s set: %s (the quota applies when its engines next start)\n", name, cur.Encode())
		return nil
	}
	return fmt.Errorf("the limits of tenant %s kept changing under this command", name)
}

// tenantSnapshot writes the tenant's data, as an instance recovers it
// from ZooKeeper, to file as an etcd snapshot (with etcd's SHA-256
// trailer). It reads through a session of its own and writes nothing in
// ZooKeeper.
func tenantSnapshot(w io.Writer, cfg zkstore.Config, rec zkstore.TenantRecord, file string) error {
	name := rec.Name
	cfg = rec.Place(cfg.Root).Config(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	st, err := zkstore.OpenInspector(ctx, cfg)
	if err != nil {
		if errors.Is(err, zkstore.ErrNoRoot) {
			return fmt.Errorf("tenant %s holds no data yet (no instance served it): %w", name, err)
		}
		return err
	}
	defer st.Close()
	began := time.Now()
	applied := 0
	v, head, _, err := engine.Replay(ctx, st, engine.DefaultReadWindow, func(*revision.Entry) {
		if applied++; applied%10000 == 0 {
			cfg.Logger.WithFields(logrus.Fields{"tenant": name, "entries": applied}).Info("reading the tenant's log")
		}
	})
	if err != nil {
		return fmt.Errorf("read tenant %s: %w", name, err)
	}
	snap := v.Snapshot()
	tmp := file + ".part"
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	os.Remove(tmp)
	stats, err := etcdformat.WriteDB(tmp, snap, etcdformat.DBInfo{ConsistentIndex: uint64(head.LSN), Term: max(uint64(head.Zxid>>32), 1)})
	if err != nil {
		return err
	}
	if err := etcdformat.AppendTrailer(tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return err
	}
	fmt.Fprintf(w, "snapshot of tenant %s at revision %d (compacted %d, %d keys, %d leases, %d bytes) written to %s in %v\n",
		name, stats.Rev, stats.Compacted, stats.Keys, stats.Leases, stats.Size, file, time.Since(began).Round(time.Millisecond))
	return nil
}
