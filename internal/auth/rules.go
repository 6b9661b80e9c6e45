package auth

import (
	"context"
	"errors"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// Rules are etcd 3.7's permission checks per RPC on a Store: the checks
// etcd's API layer makes and those it makes when it applies a request,
// here made before the request reaches the engine, and again in its commit
// batch when the auth state changed meanwhile (Recheck). With
// authentication off every check passes. Safe for concurrent use.
type Rules struct {
	st   *Store
	view RulesView
	// canEnable is nil, or why AuthEnable is refused here.
	canEnable func() error
}

// RulesView is what the rules read of the instance's view. Its methods are
// safe for concurrent use.
type RulesView interface {
	// Linearize waits until the view has applied every committed entry:
	// a token issued at a newer auth revision than the view holds (its
	// user logged in through another instance) is checked after it.
	Linearize(ctx context.Context) error
	// LeaseKeys returns the keys attached to a lease, and whether it
	// exists.
	LeaseKeys(id int64) ([][]byte, bool)
	// LeaseIDs lists the leases.
	LeaseIDs() []int64
}

// NewRules returns the rules of st on view. canEnable, if not nil, says
// why AuthEnable is refused (nil: it is not), for the forwarded requests
// Authorize checks.
func NewRules(st *Store, view RulesView, canEnable func() error) *Rules {
	return &Rules{st: st, view: view, canEnable: canEnable}
}

// Store returns the store the rules check against.
func (r *Rules) Store() *Store { return r.st }

// batchKey marks the context of a check made inside the committer's batch
// (Recheck): it must not wait for the log or read the view, whose read
// lock the committer holds.
type batchKey struct{}

// inBatch reports whether ctx is a check inside a commit batch.
func inBatch(ctx context.Context) bool { return ctx.Value(batchKey{}) != nil }

// Info returns who ctx's request comes from, by the state of c. When its
// token was issued at a newer auth revision than this instance has applied
// (it logged in through another instance), the view catches up first, so
// that a user created elsewhere is known here. Errors: AuthInfoAt's, or
// the barrier's.
func (r *Rules) Info(ctx context.Context, c Checker) (*Info, error) {
	ai, err := r.st.AuthInfoAt(ctx, c)
	if err != nil || ai == nil || inBatch(ctx) {
		return ai, err
	}
	if ai.Revision > c.Revision() {
		if err := r.view.Linearize(ctx); err != nil {
			return nil, err
		}
	}
	return ai, nil
}

// Admin is etcd's check for root-only RPCs.
func (r *Rules) Admin(ctx context.Context, c Checker) error {
	ai, err := r.Info(ctx, c)
	if err != nil {
		return err
	}
	return c.CheckAdmin(ai)
}

// requireInfo is etcd's check for RPCs any authenticated user may call.
func (r *Rules) requireInfo(ctx context.Context, c Checker) error {
	ai, err := r.Info(ctx, c)
	if err != nil {
		return err
	}
	if ai == nil {
		return rpctypes.ErrGRPCUserEmpty
	}
	return nil
}

// RecipeService reports the services built as clients of the others
// (zketcd's lockelect): etcd's v3lock and v3election. As etcd, only their
// inner calls are checked, and those carry the caller's identity.
func RecipeService(method string) bool {
	return strings.HasPrefix(method, "/v3lockpb.Lock/") || strings.HasPrefix(method, "/v3electionpb.Election/")
}

// Recheck returns the check of req (client API method) again inside its
// commit batch, as etcd checks writes when it applies them: nothing if the
// auth state is still c's, else the rules on the batch's state (a
// revocation, or auth enabled, committed in between).
func (r *Rules) Recheck(ctx context.Context, method string, req any, c Checker) Check {
	return r.recheck(ctx, c, func(ctx context.Context, at Checker) error {
		if !at.Enabled() {
			return nil
		}
		return r.Check(ctx, method, req, at)
	})
}

// recheck is Recheck with check applied to the batch's state.
func (r *Rules) recheck(ctx context.Context, c Checker, check func(context.Context, Checker) error) Check {
	return func(state []byte) error {
		if c.Same(state) {
			return nil
		}
		at, err := r.st.CheckerFor(state)
		if err != nil {
			return err
		}
		return check(context.WithValue(ctx, batchKey{}, true), at)
	}
}

// Check is etcd's check of req, a request of the client API method (its
// full gRPC name), against the state of c. Health probes and the lock and
// election recipes pass (their inner calls are checked); a service or
// method without a rule of its own is root-only, as in etcd. Errors:
// etcd's (ErrGRPCUserEmpty, ErrGRPCPermissionDenied,
// ErrGRPCInvalidAuthToken, ErrGRPCAuthOldRevision, ...), or the barrier's.
func (r *Rules) Check(ctx context.Context, method string, req any, c Checker) error {
	if strings.HasPrefix(method, "/grpc.health.v1.") {
		return nil // probes never carry credentials
	}
	if RecipeService(method) {
		return nil
	}
	if err, ok := r.checkMethod(ctx, method, req, c); ok {
		return err
	}
	switch q := req.(type) {
	case *pb.RangeRequest:
		ai, err := r.Info(ctx, c)
		if err != nil {
			return err
		}
		return c.CheckRange(ai, q.Key, q.RangeEnd)
	case *pb.PutRequest:
		ai, err := r.Info(ctx, c)
		if err != nil {
			return err
		}
		return r.checkPut(ctx, c, ai, q)
	case *pb.DeleteRangeRequest:
		ai, err := r.Info(ctx, c)
		if err != nil {
			return err
		}
		return checkDelete(c, ai, q)
	case *pb.TxnRequest:
		ai, err := r.Info(ctx, c)
		if err != nil {
			return err
		}
		return r.checkTxn(ctx, c, ai, q)
	case *pb.LeaseRevokeRequest, *pb.LeaseTimeToLiveRequest, *pb.LeaseLeasesRequest:
		return r.checkLease(ctx, c, q)
	}
	// Everything else (Compact, the Auth admin RPCs, Maintenance and
	// membership changes) is root-only, as in etcd; so is any service
	// without checks of its own here.
	return r.Admin(ctx, c)
}

// checkMethod is Check's rules by method, for the methods whose rule is
// not their request's (ok false: none).
func (r *Rules) checkMethod(ctx context.Context, method string, req any, c Checker) (err error, ok bool) {
	switch method {
	case "/etcdserverpb.Auth/Authenticate":
		return nil, true // no credentials needed
	case "/etcdserverpb.Auth/AuthStatus":
		_, err := r.Info(ctx, c) // only a bad token is refused
		return err, true
	case "/etcdserverpb.Cluster/MemberList", "/etcdserverpb.Lease/LeaseGrant", "/etcdserverpb.Maintenance/Status":
		return r.requireInfo(ctx, c), true
	case "/etcdserverpb.Auth/UserGet":
		ai, err := r.Info(ctx, c)
		if err != nil {
			return err, true
		}
		if err := c.CheckAdmin(ai); err != nil && (ai == nil || ai.Username != req.(*pb.AuthUserGetRequest).Name) {
			return err, true
		}
		return nil, true
	case "/etcdserverpb.Auth/RoleGet":
		ai, err := r.Info(ctx, c)
		if err != nil {
			return err, true
		}
		if err := c.CheckAdmin(ai); err != nil && (ai == nil || !c.HasRole(ai.Username, req.(*pb.AuthRoleGetRequest).Role)) {
			return err, true
		}
		return nil, true
	case "/etcdserverpb.Maintenance/Alarm":
		if req.(*pb.AlarmRequest).Action == pb.AlarmRequest_GET {
			return r.requireInfo(ctx, c), true
		}
		return r.Admin(ctx, c), true
	}
	return nil, false
}

// checkLease is etcd's check of the lease requests that name a lease or
// list them: an authenticated user, root or with permission on the
// attached keys (WRITE to revoke; READ to list them, which LeaseTimeToLive
// does only when asked for the keys).
func (r *Rules) checkLease(ctx context.Context, c Checker, req any) error {
	ai, err := r.Info(ctx, c)
	if err != nil {
		return err
	}
	if ai == nil {
		return rpctypes.ErrGRPCUserEmpty
	}
	switch q := req.(type) {
	case *pb.LeaseRevokeRequest:
		return r.checkLeaseKeys(ctx, c, ai, q.ID, false)
	case *pb.LeaseTimeToLiveRequest:
		if !q.Keys {
			return nil // as etcd: attached keys are checked only when listed
		}
		return r.checkLeaseKeys(ctx, c, ai, q.ID, true)
	}
	// LeaseLeases.
	if c.CheckAdmin(ai) == nil {
		return nil
	}
	if inBatch(ctx) {
		return nil // never inside a batch (LeaseLeases writes nothing)
	}
	for _, id := range r.view.LeaseIDs() {
		if err := r.checkLeaseKeys(ctx, c, ai, id, true); err != nil {
			return err
		}
	}
	return nil
}

func (r *Rules) checkPut(ctx context.Context, c Checker, ai *Info, q *pb.PutRequest) error {
	if err := c.CheckPut(ai, q.Key); err != nil {
		return err
	}
	if err := r.checkLeaseKeys(ctx, c, ai, q.Lease, false); err != nil {
		return err
	}
	if q.PrevKv {
		return c.CheckRange(ai, q.Key, nil)
	}
	return nil
}

func checkDelete(c Checker, ai *Info, q *pb.DeleteRangeRequest) error {
	if err := c.CheckDelete(ai, q.Key, q.RangeEnd); err != nil {
		return err
	}
	if q.PrevKv {
		return c.CheckRange(ai, q.Key, q.RangeEnd)
	}
	return nil
}

// checkTxn checks the compares, then every op of both branches, nested
// transactions included, as etcd does.
func (r *Rules) checkTxn(ctx context.Context, c Checker, ai *Info, q *pb.TxnRequest) error {
	for _, cmp := range q.Compare {
		if err := c.CheckRange(ai, cmp.Key, cmp.RangeEnd); err != nil {
			return err
		}
	}
	for _, ops := range [][]*pb.RequestOp{q.Success, q.Failure} {
		for _, op := range ops {
			if err := r.checkTxnOp(ctx, c, ai, op); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkTxnOp checks one op of a transaction's branch.
func (r *Rules) checkTxnOp(ctx context.Context, c Checker, ai *Info, op *pb.RequestOp) error {
	switch v := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		if v.RequestRange != nil {
			return c.CheckRange(ai, v.RequestRange.Key, v.RequestRange.RangeEnd)
		}
	case *pb.RequestOp_RequestPut:
		if v.RequestPut != nil {
			return r.checkPut(ctx, c, ai, v.RequestPut)
		}
	case *pb.RequestOp_RequestDeleteRange:
		if d := v.RequestDeleteRange; d != nil {
			if d.PrevKv {
				if err := c.CheckRange(ai, d.Key, d.RangeEnd); err != nil {
					return err
				}
			}
			return c.CheckDelete(ai, d.Key, d.RangeEnd)
		}
	case *pb.RequestOp_RequestTxn:
		if v.RequestTxn != nil {
			return r.checkTxn(ctx, c, ai, v.RequestTxn)
		}
	}
	return nil
}

// checkLeaseKeys is etcd's check of a lease's attached keys: root passes;
// anyone else needs WRITE (read: READ) permission on each key attached to
// lease id. A lease that does not exist (or 0) has no keys.
func (r *Rules) checkLeaseKeys(ctx context.Context, c Checker, ai *Info, id int64, read bool) error {
	if id == 0 || inBatch(ctx) {
		// Inside the batch the view cannot be read: the lease's keys were
		// checked before.
		return nil
	}
	keys, ok := r.view.LeaseKeys(id)
	if !ok {
		return nil
	}
	if c.CheckAdmin(ai) == nil {
		return nil
	}
	for _, k := range keys {
		var err error
		if read {
			err = c.CheckRange(ai, k, nil)
		} else {
			err = c.CheckPut(ai, k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// LeaseRenew is etcd's check of one keepalive of lease id against the
// current state: an authenticated user, root or with WRITE permission on
// every key attached to the lease.
func (r *Rules) LeaseRenew(ctx context.Context, id int64) error {
	return r.leaseRenewAt(ctx, r.st.Checker(), id)
}

// leaseRenewAt is LeaseRenew against the state of c.
func (r *Rules) leaseRenewAt(ctx context.Context, c Checker, id int64) error {
	if !c.Enabled() {
		return nil
	}
	ai, err := r.Info(ctx, c)
	if err != nil {
		return err
	}
	if ai == nil {
		return rpctypes.ErrGRPCUserEmpty
	}
	return r.checkLeaseKeys(ctx, c, ai, id, false)
}

// WatchCreate checks READ permission on a watch's range [key, end) against
// the current state; it returns the cancel reason etcd sends, or "".
func (r *Rules) WatchCreate(ctx context.Context, key, end []byte) string {
	c := r.st.Checker()
	if !c.Enabled() {
		return ""
	}
	ai, err := r.Info(ctx, c)
	if err == nil {
		err = c.CheckRange(ai, key, end)
	}
	switch {
	case err == nil:
		return ""
	case errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken), errors.Is(err, rpctypes.ErrGRPCAuthOldRevision),
		errors.Is(err, rpctypes.ErrGRPCUserEmpty):
		return err.Error()
	}
	return rpctypes.ErrGRPCPermissionDenied.Error()
}

// Authorize checks req, a request another instance forwarded to this one
// on behalf of caller (package forward's server), as the client API method
// rpc (its full gRPC name, e.g. "/etcdserverpb.KV/Put") would be checked
// on this instance, and returns the context to serve it with: the caller's
// identity (WithForwardedCaller: never the forwarding instance's) and,
// for a write, the check again inside its commit batch if the auth state
// changed by then (as the client API's is). The forwarding instance
// checked the request already, but holding the internal endpoint must not
// be holding root. A refusal is checked once more after a barrier (the
// caller may have been checked on a state this view has not applied yet).
// An alarm activation without a caller is the forwarding instance raising
// it (NOSPACE from its quota check, CORRUPT from its corruption check) and
// is accepted: all a holder of the endpoint can do without a credential
// is stop writes until an administrator disarms the alarm. Errors: etcd's
// (ErrGRPCUserEmpty, ErrGRPCPermissionDenied, ErrGRPCInvalidAuthToken,
// ...), or the barrier's; an AuthEnable refused while ZooKeeper's data is
// world-readable is canEnable's error (code FailedPrecondition: refused
// whoever the caller).
func (r *Rules) Authorize(ctx context.Context, rpc string, req proto.Message, caller Caller) (context.Context, error) {
	if _, ok := req.(*pb.AuthEnableRequest); ok && r.canEnable != nil {
		// Refused here too while ZooKeeper's data is world-readable
		// (whoever forwards it; FailedPrecondition: the request's final
		// failure, not a refusal of its caller's credential, which its
		// origin may answer by committing it itself).
		if err := r.canEnable(); err != nil {
			return nil, err
		}
	}
	ctx = WithForwardedCaller(ctx, caller)
	check := func(ctx context.Context, c Checker) error { return r.checkForwarded(ctx, rpc, req, caller, c) }
	c := r.st.Checker()
	if err := check(ctx, c); err != nil {
		if lerr := r.view.Linearize(ctx); lerr != nil {
			return nil, lerr
		}
		if c = r.st.Checker(); check(ctx, c) != nil {
			return nil, err
		}
	}
	return WithCheck(ctx, r.recheck(ctx, c, check)), nil
}

// checkForwarded is Authorize's check against the state of c.
func (r *Rules) checkForwarded(ctx context.Context, rpc string, req proto.Message, caller Caller, c Checker) error {
	if !c.Enabled() {
		return nil
	}
	switch q := req.(type) {
	case *pb.LeaseKeepAliveRequest:
		return r.leaseRenewAt(ctx, c, q.ID)
	case *pb.AlarmRequest:
		if q.Action == pb.AlarmRequest_ACTIVATE && caller.Empty() {
			return nil
		}
	}
	return r.Check(ctx, rpc, req, c)
}
