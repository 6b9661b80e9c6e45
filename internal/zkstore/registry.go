package zkstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
)

// A fleet root holds many tenants, each a complete zketcd root of its own
// (registry.go owns every path of it; the tenant roots have layout.go's):
//
//	<fleet>/fleet             the fleet's marker (FleetMeta, JSON)
//	<fleet>/tenants           one child per tenant; its data version counts the registry's changes
//	<fleet>/tenants/<name>    the tenant's record (TenantRecord, JSON)
//	<fleet>/cns/<cn>          the tenant a client certificate CN is served (its name)
//	<fleet>/roots/<name>      the tenant's root: meta, head, log, ... as layout.go
//	<fleet>/roles/<role>      a role of the fleet's administration (its permissions, as given)
//
// A record and its CN znodes are created and deleted in one multi, so a CN
// names at most one tenant and a record never lacks its CNs. Every change
// of a record also sets <fleet>/tenants in the same multi, so one data
// watch on it sees every change.
type fleetLayout struct{ root string }

func (l fleetLayout) marker() string            { return l.root + "/fleet" }
func (l fleetLayout) tenants() string           { return l.root + "/tenants" }
func (l fleetLayout) tenant(name string) string { return l.root + "/tenants/" + name }
func (l fleetLayout) cns() string               { return l.root + "/cns" }
func (l fleetLayout) cn(cn string) string       { return l.root + "/cns/" + cnNode(cn) }
func (l fleetLayout) roots() string             { return l.root + "/roots" }
func (l fleetLayout) roles() string             { return l.root + "/roles" }
func (l fleetLayout) role(name string) string   { return l.root + "/roles/" + name }

// TenantRoot is the root znode of tenant name under the fleet root.
func TenantRoot(fleetRoot, name string) string { return fleetLayout{fleetRoot}.roots() + "/" + name }

// cnNode is the znode name of a certificate CN: CNs may hold '/' and other
// characters a znode name may not, so the name is the CN's hex.
func cnNode(cn string) string { return fmt.Sprintf("%x", cn) }

// FleetFormat is the fleet layout's format; a fleet of a newer one is refused.
const FleetFormat = 1

// FleetMeta marks a fleet root.
type FleetMeta struct {
	Format int `json:"format"`
}

// Tenant states. A tenant being deleted is served by no instance: each
// stops its engine when it sees the state, and Delete waits for the
// tenant's member znodes to go before it deletes the root.
const (
	TenantActive   = "active"
	TenantDeleting = "deleting"
)

// TenantRecord is a tenant's entry in the registry.
type TenantRecord struct {
	// Name is the tenant's name: its root is TenantRoot(fleet, Name).
	Name string `json:"name"`
	// CNs are the verified client certificate CNs whose connections are
	// bound to this tenant.
	CNs []string `json:"cns"`
	// State is TenantActive or TenantDeleting.
	State string `json:"state"`
	// Limits are the tenant's own limits, as the tenant package encodes
	// them (zkstore keeps them as given).
	Limits json.RawMessage `json:"limits,omitempty"`
	// Roles are the administration's roles granted to the tenant (an
	// etcd administrator's view of the fleet: see package fleetadmin).
	Roles []string `json:"roles,omitempty"`
	// Ranges are key ranges the administration keeps mapped to the tenant
	// after the role that granted them was deleted (as its owner encodes
	// them).
	Ranges json.RawMessage `json:"ranges,omitempty"`
	// Root is where the tenant's data lives, if a move (`zketcd tenant
	// move`) took it away from TenantRoot(fleet, Name) ("": there), and
	// Servers the ensemble of Root if it is not the fleet's ("": the
	// fleet's); Place resolves them.
	Root    string `json:"root,omitempty"`
	Servers string `json:"servers,omitempty"`
	// Previous are the places the tenant moved from, oldest first: each
	// keeps its <root>/moved record (which sends an instance that read an
	// older record to where the data went) until the tenant is deleted.
	Previous []TenantPlace `json:"previous,omitempty"`
	// Created is when the tenant was created (UTC).
	Created time.Time `json:"created"`
	// Version is the record znode's data version (not stored): the
	// compare-and-swap of SetTenantLimits.
	Version int32 `json:"-"`
}

// TenantPlace is where a tenant's data lives: a root, on the fleet's
// ensemble (Servers "") or on the one Servers names (comma separated
// host:port, as zkstore.JoinServers).
type TenantPlace struct {
	Servers string `json:"servers,omitempty"`
	Root    string `json:"root"`
}

func (p TenantPlace) String() string { return prefixServers(p.Servers) + p.Root }

// Config is fleet, the fleet's configuration, for the place's root on its
// ensemble.
func (p TenantPlace) Config(fleet Config) Config {
	fleet.Root = p.Root
	if p.Servers != "" {
		fleet.Servers = strings.Split(p.Servers, ",")
	}
	return fleet
}

// Place is where the tenant's data lives, in the fleet rooted at fleet:
// TenantRoot(fleet, Name) on the fleet's ensemble unless a move took it
// elsewhere.
func (rec TenantRecord) Place(fleet string) TenantPlace {
	if rec.Root != "" {
		return TenantPlace{Servers: rec.Servers, Root: rec.Root}
	}
	return TenantPlace{Root: TenantRoot(fleet, rec.Name)}
}

// Places are every place of the tenant: where its data lives, and those
// it moved from.
func (rec TenantRecord) Places(fleet string) []TenantPlace {
	places := []TenantPlace{rec.Place(fleet)}
	for _, p := range rec.Previous {
		if !slices.Contains(places, p) {
			places = append(places, p)
		}
	}
	return places
}

// ErrTenantExists is returned by CreateTenant for a name or CN already
// registered; ErrTenantNotFound by the calls naming a tenant that is not.
var (
	ErrTenantExists   = errors.New("tenant already exists")
	ErrTenantNotFound = errors.New("tenant not found")
	ErrNotFleet       = errors.New("not a fleet root")
)

// Registry is the tenant registry of a fleet root. It is safe for
// concurrent use. Its session is its own; Close ends it.
type Registry struct {
	s *Store
	l fleetLayout
}

// OpenRegistry connects to ZooKeeper and opens the fleet root cfg.Root,
// creating its layout if the root is empty. A root that holds a single
// cluster (its meta znode) is refused with ErrNotFleet.
func OpenRegistry(ctx context.Context, cfg Config) (*Registry, error) {
	s, err := openRaw(ctx, cfg)
	if err != nil {
		return nil, err
	}
	r := &Registry{s: s, l: fleetLayout{cfg.Root}}
	if err := r.ensure(); err != nil {
		s.Close()
		return nil, err
	}
	return r, nil
}

// ensure creates the fleet's layout unless its marker exists.
func (r *Registry) ensure() error {
	s := r.s
	data, _, err := s.conn.Get(r.l.marker())
	switch {
	case err == nil:
		return r.decodeMarker(data)
	case errors.Is(err, zk.ErrNoAuth):
		return s.noAccess(r.l.marker())
	case !errors.Is(err, zk.ErrNoNode):
		return s.wrap("read the fleet marker", err)
	}
	if ok, _, err := s.conn.Exists(s.l.meta()); err != nil {
		return s.wrap("stat "+s.l.meta(), err)
	} else if ok {
		return fmt.Errorf("%w: %s holds a single cluster (serve it without --tenants, or give the fleet another --zk-root)", ErrNotFleet, s.l.root)
	}
	if err := s.ensureRootNode(); err != nil {
		return err
	}
	if s.id != nil {
		if err := s.probeIdentity(); err != nil {
			return err
		}
	}
	marker, _ := json.Marshal(FleetMeta{Format: FleetFormat})
	_, err = s.conn.Multi(
		&zk.CreateRequest{Path: r.l.marker(), Data: marker, Acl: s.acl},
		&zk.CreateRequest{Path: r.l.tenants(), Acl: s.acl},
		&zk.CreateRequest{Path: r.l.cns(), Acl: s.acl},
		&zk.CreateRequest{Path: r.l.roots(), Acl: s.acl},
		&zk.CreateRequest{Path: r.l.roles(), Acl: s.acl},
	)
	switch {
	case err == nil:
		s.log.WithField("root", s.l.root).Info("created a fleet root")
	case errors.Is(err, zk.ErrNodeExists):
		// Created meanwhile by another instance or a command.
	default:
		return s.wrap("create the fleet layout", err)
	}
	data, _, err = s.conn.Get(r.l.marker())
	if err != nil {
		return s.wrap("read the fleet marker", err)
	}
	return r.decodeMarker(data)
}

func (r *Registry) decodeMarker(data []byte) error {
	var m FleetMeta
	if err := decodeJSON(r.l.marker(), data, &m); err != nil {
		return err
	}
	if m.Format > FleetFormat {
		return &FormatError{What: "zketcd fleet " + r.l.root, Got: m.Format, Known: FleetFormat}
	}
	return nil
}

// SameEnsemble reports whether cfg's servers reach the ensemble the
// registry is on (the same fleet marker znode: created by the same
// transaction), however they are spelled (another order, a name for an
// address, a member left out). Errors: connecting to cfg's servers, or
// reading there.
func (r *Registry) SameEnsemble(ctx context.Context, cfg Config) (bool, error) {
	_, mine, err := r.s.conn.Get(r.l.marker())
	if err != nil {
		return false, r.s.wrap("read the fleet marker", err)
	}
	cfg.Root = r.l.root
	o, err := openRaw(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer o.Close()
	_, theirs, err := o.conn.Get(r.l.marker())
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, o.wrap("read "+r.l.marker(), err)
	}
	return theirs.Czxid == mine.Czxid && theirs.Ctime == mine.Ctime, nil
}

// Close ends the registry's session.
func (r *Registry) Close() { r.s.Close() }

// Root returns the fleet root.
func (r *Registry) Root() string { return r.l.root }

// Store returns the registry's session as a Store (for ACL reports and
// re-ACLs of the whole fleet). It must not be used to commit.
func (r *Registry) Store() *Store { return r.s }

// CreateTenant registers rec (State and Created are set here) with its
// CNs, in one multi. A name or CN already registered fails with
// ErrTenantExists and registers nothing, and so does a name whose root
// exists (another tenant's data moved there). The tenant's root is
// created by the first instance that serves it (Open on TenantRoot).
func (r *Registry) CreateTenant(rec TenantRecord) (TenantRecord, error) {
	s := r.s
	if ok, _, err := s.conn.Exists(TenantRoot(r.l.root, rec.Name)); err != nil {
		return TenantRecord{}, s.wrap("stat the root of tenant "+rec.Name, err)
	} else if ok {
		return TenantRecord{}, fmt.Errorf("%w: %s exists (another tenant's data was moved there): choose another name", ErrTenantExists, TenantRoot(r.l.root, rec.Name))
	}
	rec.State, rec.Created = TenantActive, time.Now().UTC().Truncate(time.Second)
	rec.Root, rec.Servers, rec.Previous = "", "", nil
	data, err := json.Marshal(rec)
	if err != nil {
		return TenantRecord{}, fmt.Errorf("encode tenant %s: %w", rec.Name, err)
	}
	ops := []any{
		&zk.CreateRequest{Path: r.l.tenant(rec.Name), Data: data, Acl: s.acl},
		&zk.SetDataRequest{Path: r.l.tenants(), Version: -1},
	}
	for _, cn := range rec.CNs {
		ops = append(ops, &zk.CreateRequest{Path: r.l.cn(cn), Data: []byte(rec.Name), Acl: s.acl})
	}
	if _, err := s.conn.Multi(ops...); err != nil {
		if errors.Is(err, zk.ErrNodeExists) {
			return TenantRecord{}, r.whyExists(rec)
		}
		return TenantRecord{}, s.wrap("create tenant "+rec.Name, err)
	}
	s.log.WithFields(logrus.Fields{"tenant": rec.Name, "cns": rec.CNs}).Info("tenant created")
	return rec, nil
}

// whyExists names what of rec is registered already.
func (r *Registry) whyExists(rec TenantRecord) error {
	if ok, _, _ := r.s.conn.Exists(r.l.tenant(rec.Name)); ok {
		return fmt.Errorf("%w: tenant %q", ErrTenantExists, rec.Name)
	}
	for _, cn := range rec.CNs {
		if data, _, err := r.s.conn.Get(r.l.cn(cn)); err == nil {
			return fmt.Errorf("%w: the CN %q is served to tenant %q", ErrTenantExists, cn, data)
		}
	}
	return fmt.Errorf("%w: tenant %q or one of its CNs", ErrTenantExists, rec.Name)
}

// Tenant returns one tenant's record.
func (r *Registry) Tenant(name string) (TenantRecord, error) {
	data, st, err := r.s.conn.Get(r.l.tenant(name))
	if errors.Is(err, zk.ErrNoNode) {
		return TenantRecord{}, fmt.Errorf("%w: %q", ErrTenantNotFound, name)
	}
	if err != nil {
		return TenantRecord{}, r.s.wrap("read tenant "+name, err)
	}
	var rec TenantRecord
	if err := decodeJSON(r.l.tenant(name), data, &rec); err != nil {
		return TenantRecord{}, err
	}
	rec.Version = st.Version
	return rec, nil
}

// Tenants lists every tenant's record, sorted by name, and the registry's
// change count they were read at or after; if watch, changed is closed at
// the registry's next change after that (or when the session is lost).
func (r *Registry) Tenants(watch bool) (recs []TenantRecord, changes int32, changed <-chan struct{}, err error) {
	s := r.s
	var st *zk.Stat
	var ev <-chan zk.Event
	if watch {
		_, st, ev, err = s.conn.GetW(r.l.tenants())
	} else {
		_, st, err = s.conn.Get(r.l.tenants())
	}
	if err != nil {
		return nil, 0, nil, s.wrap("read "+r.l.tenants(), err)
	}
	if watch {
		ch := make(chan struct{})
		go func() {
			select {
			case <-ev:
			case <-s.closed:
			}
			close(ch)
		}()
		changed = ch
	}
	names, _, err := s.conn.Children(r.l.tenants())
	if err != nil {
		return nil, 0, nil, s.wrap("list tenants", err)
	}
	slices.Sort(names)
	for _, n := range names {
		rec, err := r.Tenant(n)
		if errors.Is(err, ErrTenantNotFound) {
			continue // deleted meanwhile: the watch fires
		}
		if err != nil {
			return nil, 0, nil, err
		}
		recs = append(recs, rec)
	}
	return recs, st.Version, changed, nil
}

// UpdateTenant writes rec's roles and ranges over its record if the
// record is still at rec.Version (else zk's ErrBadVersion, wrapped;
// ErrTenantNotFound if it went). Its name, CNs, state and creation stay.
func (r *Registry) UpdateTenant(rec TenantRecord) (TenantRecord, error) {
	cur, err := r.Tenant(rec.Name)
	if err != nil {
		return TenantRecord{}, err
	}
	cur.Roles, cur.Ranges, cur.Version = rec.Roles, rec.Ranges, rec.Version
	return r.update(cur)
}

// SetTenantLimits replaces a tenant's limits if its record is still at
// rec.Version (else zk's ErrBadVersion, wrapped: read it again).
func (r *Registry) SetTenantLimits(rec TenantRecord, limits json.RawMessage) (TenantRecord, error) {
	rec.Limits = limits
	return r.update(rec)
}

// update writes rec over the record at rec.Version.
func (r *Registry) update(rec TenantRecord) (TenantRecord, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return TenantRecord{}, fmt.Errorf("encode tenant %s: %w", rec.Name, err)
	}
	res, err := r.s.conn.Multi(
		&zk.SetDataRequest{Path: r.l.tenant(rec.Name), Data: data, Version: rec.Version},
		&zk.SetDataRequest{Path: r.l.tenants(), Version: -1},
	)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return TenantRecord{}, fmt.Errorf("%w: %q", ErrTenantNotFound, rec.Name)
	case err != nil:
		return TenantRecord{}, r.s.wrap("update tenant "+rec.Name, err)
	}
	rec.Version = res[0].Stat.Version
	return rec, nil
}

// SetTenantPlace records that tenant name's data moved from the place
// from to the place to (from joins the record's Previous places), with a
// compare-and-swap on its record. A record that names to already is left
// as it is (a move's record updated twice); one that names neither fails,
// as does a tenant being deleted.
func (r *Registry) SetTenantPlace(name string, from, to TenantPlace) (TenantRecord, error) {
	for {
		rec, err := r.Tenant(name)
		if err != nil {
			return TenantRecord{}, err
		}
		cur := rec.Place(r.l.root)
		switch {
		case cur == to:
			return rec, nil
		case rec.State != TenantActive:
			return TenantRecord{}, fmt.Errorf("tenant %s is being deleted: its data stays in %s", name, cur)
		case cur != from:
			return TenantRecord{}, fmt.Errorf("tenant %s lives in %s, not %s: its place is not changed to %s", name, cur, from, to)
		}
		rec.Root, rec.Servers = to.Root, to.Servers
		if !slices.Contains(rec.Previous, from) {
			rec.Previous = append(rec.Previous, from)
		}
		rec, err = r.update(rec)
		if err == nil || !errors.Is(err, zk.ErrBadVersion) {
			return rec, err
		}
	}
}

// MarkDeleting marks a tenant's record deleting (no instance serves it
// from then on; DeleteTenant completes the delete) and returns it.
func (r *Registry) MarkDeleting(name string) (TenantRecord, error) {
	for {
		rec, err := r.Tenant(name)
		if err != nil || rec.State == TenantDeleting {
			return rec, err
		}
		rec.State = TenantDeleting
		rec, err = r.update(rec)
		if err == nil || !errors.Is(err, zk.ErrBadVersion) {
			return rec, err
		}
	}
}

// DeleteTenant deletes a tenant and every znode of its roots (where its
// data lives and those it moved from, on whichever ensemble:
// TenantRecord.Places): it marks the
// record deleting (instances then stop serving it and their member znodes
// go), waits up to wait for the tenant's members to leave, deletes the
// roots and then the record and its CNs. progress, if not nil, is told the
// znodes deleted so far every few seconds. Re-running it after a failure
// continues where it stopped.
func (r *Registry) DeleteTenant(ctx context.Context, name string, wait time.Duration, progress func(deleted int64)) error {
	rec, err := r.MarkDeleting(name)
	if err != nil {
		return err
	}
	places := rec.Places(r.l.root)
	stores := make([]*Store, len(places))
	for i, p := range places {
		if p.Servers == "" {
			stores[i] = r.s
			continue
		}
		st, err := openRaw(ctx, p.Config(r.s.cfg))
		if err != nil {
			return fmt.Errorf("tenant %s: connect to %s, where its data lives: %w", name, p.Servers, err)
		}
		defer st.Close()
		stores[i] = st
	}
	deadline := time.Now().Add(wait)
	for i, p := range places {
		members := layout{p.Root}.members()
		for {
			kids, _, err := stores[i].conn.Children(members)
			if errors.Is(err, zk.ErrNoNode) || (err == nil && len(kids) == 0) {
				break
			}
			if err != nil {
				return stores[i].wrap("list "+members, err)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("tenant %s: %d instance(s) still serve it after %v (their member znodes under %s remain); run the delete again once they stopped", name, len(kids), wait, TenantPlace{Servers: p.Servers, Root: members})
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	var deleted atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	if progress != nil {
		go func() {
			t := time.NewTicker(2 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					progress(deleted.Load())
				}
			}
		}()
	}
	for i, p := range places {
		if err := stores[i].deleteTreeCounting(ctx, p.Root, &deleted); err != nil {
			return fmt.Errorf("delete %s, where tenant %s's data lives or lived: %w", p, name, err)
		}
	}
	ops := []any{
		&zk.DeleteRequest{Path: r.l.tenant(name), Version: rec.Version},
		&zk.SetDataRequest{Path: r.l.tenants(), Version: -1},
	}
	for _, cn := range rec.CNs {
		ops = append(ops, &zk.DeleteRequest{Path: r.l.cn(cn), Version: -1})
	}
	if _, err := r.s.conn.Multi(ops...); err != nil {
		if _, terr := r.Tenant(name); errors.Is(terr, ErrTenantNotFound) {
			return nil // another deleter (an instance, a command) completed it
		}
		return r.s.wrap("delete the record of tenant "+name, err)
	}
	r.s.log.WithFields(logrus.Fields{"tenant": name, "znodes": deleted.Load()}).Info("tenant deleted")
	return nil
}

// deleteTreeBatch bounds the deletes of one multi (each a path of at most
// a few hundred bytes: well inside jute.maxbuffer).
const deleteTreeBatch = 500

// deleteTreeCounting deletes p and everything under it: it lists the tree
// (listings pipelined on the session), then deletes deepest first, many
// znodes per multi, adding each deleted znode to deleted. A znode deleted
// meanwhile is not an error; one created meanwhile under a deleted parent
// fails it (ZooKeeper's NotEmpty: something still writes there).
func (s *Store) deleteTreeCounting(ctx context.Context, p string, deleted *atomic.Int64) error {
	var paths []string
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	var list func(q string, depth int)
	levels := map[int][]string{}
	list = func(q string, depth int) {
		defer wg.Done()
		sem <- struct{}{}
		kids, _, err := s.conn.Children(q)
		<-sem
		mu.Lock()
		defer mu.Unlock()
		if errors.Is(err, zk.ErrNoNode) {
			return
		}
		if err != nil {
			if firstErr == nil {
				firstErr = s.wrap("list "+q, err)
			}
			return
		}
		levels[depth] = append(levels[depth], q)
		paths = append(paths, q)
		if ctx.Err() != nil {
			return
		}
		for _, k := range kids {
			wg.Add(1)
			go list(child(q, k), depth+1)
		}
	}
	wg.Add(1)
	list(p, 0)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for depth := len(levels) - 1; depth >= 0; depth-- {
		level := levels[depth]
		for len(level) > 0 {
			n := min(len(level), deleteTreeBatch)
			if err := s.deleteBatch(level[:n], deleted); err != nil {
				return err
			}
			level = level[n:]
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteBatch deletes the childless znodes ps in one multi, or one by one
// when some went meanwhile.
func (s *Store) deleteBatch(ps []string, deleted *atomic.Int64) error {
	ops := make([]any, len(ps))
	for i, q := range ps {
		ops[i] = &zk.DeleteRequest{Path: q, Version: -1}
	}
	_, err := s.conn.Multi(ops...)
	if err == nil {
		deleted.Add(int64(len(ps)))
		return nil
	}
	if !errors.Is(err, zk.ErrNoNode) {
		return s.wrap(fmt.Sprintf("delete %d znodes from %s", len(ps), ps[0]), err)
	}
	for _, q := range ps {
		switch err := s.conn.Delete(q, -1); {
		case err == nil:
			deleted.Add(1)
		case errors.Is(err, zk.ErrNoNode):
		default:
			return s.wrap("delete "+q, err)
		}
	}
	return nil
}

// Changes returns the registry's change count: it moves at every change
// of a tenant or a role.
func (r *Registry) Changes() (int32, error) {
	_, st, err := r.s.conn.Get(r.l.tenants())
	if err != nil {
		return 0, r.s.wrap("read "+r.l.tenants(), err)
	}
	return st.Version, nil
}

// ErrRoleExists and ErrRoleNotFound are the role calls' refusals.
var (
	ErrRoleExists   = errors.New("role already exists")
	ErrRoleNotFound = errors.New("role not found")
)

// Role is a role of the fleet's administration: its name and data (the
// permissions, as its owner encodes them), at a znode version.
type Role struct {
	Name    string
	Data    []byte
	Version int32
}

// ensureRoles creates the roles znode of a fleet made before it existed.
func (r *Registry) ensureRoles() error {
	if _, err := r.s.conn.Create(r.l.roles(), nil, 0, r.s.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return r.s.wrap("create "+r.l.roles(), err)
	}
	return nil
}

// CreateRole registers a role (ErrRoleExists if it is).
func (r *Registry) CreateRole(name string, data []byte) error {
	if err := r.ensureRoles(); err != nil {
		return err
	}
	_, err := r.s.conn.Multi(
		&zk.CreateRequest{Path: r.l.role(name), Data: data, Acl: r.s.acl},
		&zk.SetDataRequest{Path: r.l.tenants(), Version: -1},
	)
	switch {
	case errors.Is(err, zk.ErrNodeExists):
		return fmt.Errorf("%w: %q", ErrRoleExists, name)
	case err != nil:
		return r.s.wrap("create role "+name, err)
	}
	return nil
}

// GetRole reads a role (ErrRoleNotFound if there is none).
func (r *Registry) GetRole(name string) (Role, error) {
	data, st, err := r.s.conn.Get(r.l.role(name))
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return Role{}, fmt.Errorf("%w: %q", ErrRoleNotFound, name)
	case err != nil:
		return Role{}, r.s.wrap("read role "+name, err)
	}
	return Role{Name: name, Data: data, Version: st.Version}, nil
}

// SetRole replaces a role's data if it is still at role.Version (else
// zk's ErrBadVersion, wrapped; ErrRoleNotFound if it went).
func (r *Registry) SetRole(role Role) error {
	_, err := r.s.conn.Multi(
		&zk.SetDataRequest{Path: r.l.role(role.Name), Data: role.Data, Version: role.Version},
		&zk.SetDataRequest{Path: r.l.tenants(), Version: -1},
	)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("%w: %q", ErrRoleNotFound, role.Name)
	case err != nil:
		return r.s.wrap("update role "+role.Name, err)
	}
	return nil
}

// DeleteRole deletes a role (ErrRoleNotFound if there is none); the
// tenants granted it keep its name until their roles are rewritten.
func (r *Registry) DeleteRole(name string) error {
	_, err := r.s.conn.Multi(
		&zk.DeleteRequest{Path: r.l.role(name), Version: -1},
		&zk.SetDataRequest{Path: r.l.tenants(), Version: -1},
	)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("%w: %q", ErrRoleNotFound, name)
	case err != nil:
		return r.s.wrap("delete role "+name, err)
	}
	return nil
}

// RoleNames lists the roles, sorted.
func (r *Registry) RoleNames() ([]string, error) {
	names, _, err := r.s.conn.Children(r.l.roles())
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, r.s.wrap("list roles", err)
	}
	slices.Sort(names)
	return names, nil
}
