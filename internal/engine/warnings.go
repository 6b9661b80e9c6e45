package engine

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// aclReporter is implemented by a Log that knows its root's ZooKeeper ACL
// (*zkstore.Store; memlog has none).
type aclReporter interface{ ACLReport() zkstore.ACLReport }

// worldReadable reports whether the log's root is readable by anyone and
// that is not accepted (Config.WorldReadableOK), with the root's ACL.
func (b *Engine) worldReadable() (bool, string) {
	r, ok := b.store.(aclReporter)
	if !ok || b.cfg.WorldReadableOK {
		return false, ""
	}
	rep := r.ACLReport()
	return rep.WorldReadable, rep.ACL
}

// Warnings lists what an operator must fix that does not stop the
// instance from serving, for Status.Errors and /health: a --read-lease
// refused (readlease.go), a root whose ZooKeeper data is world-readable.
func (b *Engine) Warnings() []string {
	out := b.reads.warnings()
	if open, acl := b.worldReadable(); open {
		out = append(out, fmt.Sprintf("zketcd: ZooKeeper's data under %s is world-readable (%s): whoever reaches ZooKeeper reads every key and value, "+
			"and could mint auth tokens from the auth state; give every instance a ZooKeeper identity with --zk-auth (digest, x509 or sasl)", b.store.Root(), acl))
	}
	return out
}

// CanEnableAuth returns nil, or the error AuthEnable answers while the
// root's ZooKeeper data is world-readable: the password hashes and the
// simple-token secret would be readable by whoever reaches ZooKeeper.
func (b *Engine) CanEnableAuth() error {
	if open, _ := b.worldReadable(); open {
		return status.Error(codes.FailedPrecondition, "etcdserver: authentication cannot be enabled while ZooKeeper's data under "+b.store.Root()+" is world-readable "+
			"(its tokens could be minted by reading ZooKeeper): start every instance with --zk-auth (digest, x509 or sasl)")
	}
	return nil
}

// registerACLGauge registers zketcd_zookeeper_world_readable (1 while the
// root's ZooKeeper data is readable by anyone) when the log reports its
// ACL and reg is not nil.
func (b *Engine) registerACLGauge(reg prometheus.Registerer) {
	r, ok := b.store.(aclReporter)
	if !ok || reg == nil {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "zketcd", Name: "zookeeper_world_readable",
		Help: "1 while anyone who reaches ZooKeeper may read the root (no --zk-auth identity); read every minute.",
	}, func() float64 {
		if r.ACLReport().WorldReadable {
			return 1
		}
		return 0
	}))
}
