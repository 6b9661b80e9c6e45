package engine

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/translate"
)

// Alarms live in the revision log (revision.OpAlarm), so every instance
// applies the same raises and disarms at the same position, refuses the
// same writes (translate.AlarmGate, evaluated in the batch), and finds them
// again after a restart (they are in base generations too).

// Alarm serves etcd's AlarmRequest: GET after a read barrier (etcd answers
// it through raft), ACTIVATE and DEACTIVATE committed as an OpAlarm in log
// order. It returns the response's alarms (see translate.AlarmResponse).
func (b *Engine) Alarm(ctx context.Context, req *pb.AlarmRequest) ([]*pb.AlarmMember, error) {
	if req.Action == pb.AlarmRequest_GET {
		if err := b.Linearize(ctx); err != nil {
			return nil, err
		}
		alarms, _ := translate.AlarmResponse(b.view.Alarms(), req)
		return alarms, nil
	}
	resp, err := alarmKind.write(ctx, b, req, nil)
	if err != nil {
		return nil, err
	}
	return resp.Alarms, nil
}

// Alarms returns the active alarms of the view, without a barrier (Status,
// /health). Safe for concurrent use.
func (b *Engine) Alarms() []*pb.AlarmMember {
	var out []*pb.AlarmMember
	for _, a := range b.view.Alarms() {
		out = append(out, &pb.AlarmMember{MemberID: a.Member, Alarm: pb.AlarmType(a.Type)})
	}
	return out
}

// checkQuota is etcd's quota check before a Put, Txn or LeaseGrant enters
// the log: if the request's cost does not fit beside DBSize (the bytes
// before compression) under the quota, or, with --zk-heap-bytes, beside
// ZooKeeperBytes (as stored) under what ZooKeeper's heap holds
// (zkHeapLimit), it raises the NOSPACE alarm for this member (once: a raise
// of an active alarm stages nothing) and refuses the request with
// ErrGRPCNoSpace.
func (b *Engine) checkQuota(req any) error {
	cost := translate.QuotaCost(req)
	if cost == 0 {
		return nil
	}
	limit, size, stored := b.QuotaBytes(), b.DBSize(), int64(-1)
	what := "space quota exceeded"
	if translate.QuotaAvailable(limit, size, cost) {
		heap := b.cfg.zkHeapLimit()
		if heap < 0 {
			return nil
		}
		if stored = b.ZooKeeperBytes(); translate.QuotaAvailable(heap, stored, cost) {
			return nil
		}
		limit, what = heap, "ZooKeeper's heap full (half of --zk-heap-bytes)"
	}
	b.metrics.quotaRefused.Inc()
	if stored < 0 {
		stored = b.ZooKeeperBytes()
	}
	if !revision.HasAlarm(b.view.Alarms(), int32(pb.AlarmType_NOSPACE)) {
		b.log.WithFields(logrus.Fields{"db_size": size, "zookeeper_bytes": stored, "limit": limit, "cost": cost}).
			Warn(what + ": raising the NOSPACE alarm")
		raise := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: b.memberID, Alarm: pb.AlarmType_NOSPACE}
		// The server raises it, not the client: not under the request's
		// auth check or deadline (the refusal still waits for the raise).
		rctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		if _, err := b.Alarm(rctx, raise); err != nil {
			b.log.WithError(err).Warn("raise the NOSPACE alarm")
		}
	}
	return rpctypes.ErrGRPCNoSpace
}
