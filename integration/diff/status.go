package diff

import (
	"context"
	"testing"
	"time"

	"github.com/coreos/go-semver/semver"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// MinServerVersion is the lowest server version CheckStatus accepts: the
// oldest etcd release that current Kubernetes supports.
var MinServerVersion = semver.Version{Major: 3, Minor: 5, Patch: 13}

// CheckStatus is a non-differential check of Maintenance.Status on the
// client's first endpoint: the call must succeed, carry a response header
// and report a Version that parses as semver and is at least
// MinServerVersion. Status fields differ legitimately between servers (db
// size, raft indexes, member IDs), so they are not compared. It returns the
// response for further checks.
func CheckStatus(t testing.TB, c *clientv3.Client) *clientv3.StatusResponse {
	t.Helper()
	eps := c.Endpoints()
	if len(eps) == 0 {
		t.Fatalf("CheckStatus: client has no endpoints")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Status(ctx, eps[0])
	if err != nil {
		t.Fatalf("CheckStatus: Status(%s): %v", eps[0], err)
	}
	if resp.Header == nil {
		t.Errorf("CheckStatus: response has no header")
	}
	v, err := semver.NewVersion(resp.Version)
	if err != nil {
		t.Fatalf("CheckStatus: version %q is not semver: %v", resp.Version, err)
	}
	if v.LessThan(MinServerVersion) {
		t.Errorf("CheckStatus: version %s < %s", v, &MinServerVersion)
	}
	return resp
}
