package move

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// ErrDestinationTaken is wrapped by RunTenant for a destination that is,
// holds, or lies inside a root of another tenant (or of the tenant
// itself), or the fleet's own znodes.
var ErrDestinationTaken = errors.New("the destination is not free for a tenant's data")

// RunTenant moves the data of tenant name of the fleet whose root is
// cfg.Source.Root (on cfg.Source's ensemble) into cfg.Dest.Root, on
// cfg.Dest's ensemble (no servers: the fleet's), while the fleet's
// instances serve it, as Run moves a root: the source is where the
// registry's record says the tenant's data lives; once the destination is
// finished, the record names it (and keeps the source among the tenant's
// previous places, for FreeTenantSources and the tenant's delete). Run
// again after a crash, it continues; run again after it finished, it
// reports AlreadyMoved. Errors: zkstore.ErrTenantNotFound for a tenant the
// registry does not hold; ErrDestinationTaken or zkstore.ErrNotFresh (a
// destination that holds something else) before anything is written;
// Run's.
func RunTenant(ctx context.Context, name string, cfg Config) (Result, error) {
	fleet := cfg.Source
	if len(cfg.Dest.Servers) == 0 {
		cfg.Dest.Servers = fleet.Servers
	}
	reg, err := zkstore.OpenRegistry(ctx, fleet)
	if err != nil {
		return Result{}, fmt.Errorf("move: %w", err)
	}
	defer reg.Close()
	to := zkstore.TenantPlace{Root: cfg.Dest.Root}
	if !sameServers(cfg.Dest.Servers, fleet.Servers) {
		// The fleet's ensemble spelled otherwise is the fleet's: its
		// checks apply, and the place names no servers.
		if same, err := reg.SameEnsemble(ctx, cfg.Dest); err != nil {
			return Result{}, fmt.Errorf("move: the destination's ensemble: %w", err)
		} else if same {
			cfg.Dest.Servers = fleet.Servers
		} else {
			to.Servers = zkstore.JoinServers(cfg.Dest.Servers)
		}
	}
	rec, err := reg.Tenant(name)
	if err != nil {
		return Result{}, fmt.Errorf("move: %w", err)
	}
	if rec.State != zkstore.TenantActive {
		return Result{}, fmt.Errorf("move: tenant %s is %s, not moved", name, rec.State)
	}
	from := rec.Place(fleet.Root)
	if from == to {
		return Result{AlreadyMoved: true, From: from.String()}, nil
	}
	recs, _, _, err := reg.Tenants(false)
	if err != nil {
		return Result{}, fmt.Errorf("move: %w", err)
	}
	if err := destinationFree(fleet.Root, to, recs); err != nil {
		return Result{}, fmt.Errorf("move: tenant %s: %w", name, err)
	}
	cfg.Source = from.Config(fleet)
	cfg.tenant = &zkstore.TenantRef{Fleet: fleet.Root, Name: name}
	cfg.Logger = cfg.Logger.WithFields(logrus.Fields{"tenant": name, "fleet": fleet.Root})
	res, err := Run(ctx, cfg)
	res.From = from.String()
	if err != nil {
		return res, err
	}
	if cfg.AfterFinish != nil {
		if err := cfg.AfterFinish(); err != nil {
			return res, err
		}
	}
	if _, err := reg.SetTenantPlace(name, from, to); err != nil {
		return res, fmt.Errorf("move: %s is finished, but the registry does not name it yet (run the move again: it continues): %w", to, err)
	}
	cfg.Logger.WithFields(logrus.Fields{"from": from.String(), "to": to.String()}).Warn("the registry names the tenant's new place")
	return res, nil
}

// destinationFree fails with ErrDestinationTaken if to is no place for
// a tenant's data in the fleet at fleetRoot whose tenants are recs: on
// the fleet's ensemble, the fleet root or above it, or inside the fleet
// but for a new <fleet>/roots/X that no tenant is named X; on any
// ensemble, equal to, inside or around a place of a tenant (recs' Places
// and default roots).
func destinationFree(fleetRoot string, to zkstore.TenantPlace, recs []zkstore.TenantRecord) error {
	dest := to.Root
	if !strings.HasPrefix(dest, "/") || path.Clean(dest) != dest {
		return fmt.Errorf("%w: %q is not a clean absolute znode path", ErrDestinationTaken, dest)
	}
	if to.Servers == "" {
		if within(fleetRoot, dest) {
			return fmt.Errorf("%w: %s holds the fleet root %s", ErrDestinationTaken, dest, fleetRoot)
		}
		if within(dest, fleetRoot) && path.Dir(dest) != path.Dir(zkstore.TenantRoot(fleetRoot, "x")) {
			return fmt.Errorf("%w: %s is among the fleet's own znodes (a root in the fleet is %s)", ErrDestinationTaken, dest, zkstore.TenantRoot(fleetRoot, "NAME"))
		}
	}
	for _, r := range recs {
		for _, p := range append(r.Places(fleetRoot), zkstore.TenantPlace{Root: zkstore.TenantRoot(fleetRoot, r.Name)}) {
			if p.Servers == to.Servers && (within(dest, p.Root) || within(p.Root, dest)) {
				return fmt.Errorf("%w: %s and %s, a place of tenant %s, overlap", ErrDestinationTaken, to, p, r.Name)
			}
		}
	}
	return nil
}

// within reports whether p is root or inside it.
func within(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}

// FreeTenantSources deletes the data left in the places tenant name of
// the fleet at fleet.Root moved from, all but each one's moved record
// (which sends an instance reading an older registry record to the data),
// and returns those places (TenantPlace.String). The tenant's delete
// removes them whole.
func FreeTenantSources(ctx context.Context, fleet zkstore.Config, name string) ([]string, error) {
	reg, err := zkstore.OpenRegistry(ctx, fleet)
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	rec, err := reg.Tenant(name)
	if err != nil {
		return nil, err
	}
	if len(rec.Previous) == 0 {
		return nil, fmt.Errorf("tenant %s did not move (it lives in %s): nothing freed", name, rec.Place(fleet.Root))
	}
	var freed []string
	for _, p := range rec.Previous {
		if _, err := zkstore.FreeMovedSource(ctx, p.Config(fleet)); err != nil {
			return freed, fmt.Errorf("free %s, tenant %s's place before its move: %w", p, name, err)
		}
		freed = append(freed, p.String())
	}
	return freed, nil
}
