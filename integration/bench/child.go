package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // the pprof child serves /debug/pprof on its own listener
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/embed"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/grpcsrv"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// ServeZketcd is `zkbench serve-zketcd`: a zketcd instance with the
// defaults of `zketcd serve` (same embed/engine configuration), run
// in-process next to net/http/pprof so the harness can take CPU profiles
// of the server. It runs until SIGTERM or SIGINT.
func ServeZketcd(args []string) error {
	fs := flag.NewFlagSet("serve-zketcd", flag.ContinueOnError)
	zk := fs.String("zk", "", "ZooKeeper servers, comma separated")
	root := fs.String("zk-root", "/zketcd", "ZooKeeper root")
	listen := fs.String("listen", "127.0.0.1:2379", "etcd API host:port")
	pprofAddr := fs.String("pprof", "127.0.0.1:6060", "host:port for /debug/pprof")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *zk == "" {
		return errors.New("--zk is required")
	}
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	entry := logrus.NewEntry(lg)
	pl, err := net.Listen("tcp", *pprofAddr)
	if err != nil {
		return err
	}
	go func() {
		hs := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
		_ = hs.Serve(pl)
	}()
	cfg := embed.Config{
		Engine: engine.Config{
			Store: zkstore.Config{
				Servers: splitComma(*zk), Root: *root, SessionTimeout: 10 * time.Second, Logger: entry,
			},
			Name:       "bench-" + filepath.Base(*listen),
			ClientURLs: []string{"http://" + *listen},
		},
		GRPC: grpcsrv.Config{
			KeepaliveMinTime:            5 * time.Second,
			KeepaliveInterval:           2 * time.Hour,
			KeepaliveTimeout:            20 * time.Second,
			WatchProgressNotifyInterval: 10 * time.Minute,
		},
		ClientAddrs: []string{*listen},
		Logger:      entry,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	openCtx, cancel := context.WithTimeout(ctx, time.Minute)
	z, err := embed.Start(openCtx, cfg)
	cancel()
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err = <-z.Err():
	}
	z.Close(5 * time.Second)
	return err
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// profilePath names the CPU profile of one cell.
func profilePath(dir, server, workload string, clients int) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%s-%d.pb.gz", server, workload, clients))
}
