package etcdctl

import (
	"strings"
	"testing"
)

// testAuth is the script's auth section: users and roles, permissions on
// keys and prefixes, auth enable, what a permitted and a forbidden user
// get, root-only commands, and auth disable. It runs last: it leaves auth
// disabled, but with users in the store.
func testAuth(t *testing.T, run func(*testing.T, step)) {
	ok := func(t *testing.T, z, e result) {
		if e.code != 0 {
			t.Errorf("etcd failed: %s", e)
		}
	}
	fails := func(want string) func(t *testing.T, z, e result) {
		return func(t *testing.T, z, e result) {
			if e.code == 0 || !strings.Contains(e.stderr, want) {
				t.Errorf("etcd: want a failure with %q: %s", want, e)
			}
		}
	}
	alice := "--user=alice:alicepw"
	root := "--user=root:rootpw"
	for _, s := range []step{
		{args: []string{"auth", "status"}},
		{args: []string{"auth", "enable"}, check: fails("etcdserver: root user does not exist")},
		{args: []string{"user", "add", "root:rootpw"}, check: ok},
		{args: []string{"user", "add", "alice:alicepw"}, check: ok},
		{args: []string{"user", "add", "alice:again"}, check: fails("etcdserver: user name already exists")},
		{args: []string{"user", "add", "nopw", "--no-password"}, check: ok},
		{args: []string{"role", "add", "app"}, check: ok},
		{args: []string{"role", "add", "app"}, check: fails("etcdserver: role name already exists")},
		{args: []string{"role", "grant-permission", "app", "--prefix=true", "readwrite", "app/"}, check: ok},
		{args: []string{"role", "grant-permission", "app", "read", "config"}, check: ok},
		{args: []string{"role", "grant-permission", "app", "write", "logs/a", "logs/m"}, check: ok},
		{args: []string{"role", "grant-permission", "app", "--from-key", "read", "zz"}, check: ok},
		{args: []string{"role", "grant-permission", "nosuch", "read", "x"}, check: fails("etcdserver: role name not found")},
		{args: []string{"user", "grant-role", "alice", "app"}, check: ok},
		{args: []string{"user", "grant-role", "alice", "nosuch"}, check: fails("etcdserver: role name not found")},
		{args: []string{"role", "get", "app"}},
		{args: []string{"role", "get", "app", "-w", "json"}},
		{args: []string{"user", "get", "alice"}},
		{args: []string{"user", "get", "alice", "--detail"}},
		{args: []string{"user", "list"}},
		{args: []string{"role", "list"}},
		{args: []string{"put", "config", "c1"}, check: ok},
		{args: []string{"put", "secret", "s1"}, check: ok},
		// root has no root role yet: etcdctl creates it, grants it and
		// enables again once the server says so.
		{args: []string{"auth", "enable"}, check: ok},
		{args: []string{root, "user", "get", "root"}, check: ok},
		{args: []string{"auth", "status"}, check: ok}, // as etcd: no user needed
		{args: []string{root, "auth", "status"}},
		{args: []string{"get", "config"}, check: fails("etcdserver: user name is empty")},
		{args: []string{"--user=alice:wrong", "get", "config"}, check: fails("etcdserver: authentication failed, invalid user ID or password")},
		{args: []string{"--user=nobody:x", "get", "config"}, check: fails("etcdserver: authentication failed, invalid user ID or password")},
		{args: []string{alice, "get", "config"}, check: ok},
		{args: []string{alice, "put", "config", "c2"}, check: fails("etcdserver: permission denied")},
		{args: []string{alice, "put", "app/x", "1"}, check: ok},
		{args: []string{alice, "get", "app/", "--prefix", "-w", "json"}, check: ok},
		{args: []string{alice, "get", "", "--prefix"}, check: fails("etcdserver: permission denied")},
		{args: []string{alice, "get", "secret"}, check: fails("etcdserver: permission denied")},
		{args: []string{alice, "put", "logs/b", "l"}, check: ok},
		{args: []string{alice, "get", "logs/b"}, check: fails("etcdserver: permission denied")},
		{args: []string{alice, "get", "zzz"}, check: ok},
		{args: []string{alice, "del", "app/", "--prefix"}, check: ok},
		{args: []string{alice, "txn"}, stdin: "value(\"config\") = \"c1\"\n\nput app/t yes\n\nput secret no\n\n", check: fails("etcdserver: permission denied")},
		{args: []string{alice, "txn"}, stdin: "value(\"config\") = \"c1\"\n\nput app/t yes\nget config\n\nget app/t\n\n", check: ok},
		{args: []string{alice, "user", "list"}, check: fails("etcdserver: permission denied")},
		{args: []string{alice, "role", "get", "app"}, check: ok},
		{args: []string{alice, "user", "add", "eve:x"}, check: fails("etcdserver: permission denied")},
		{args: []string{alice, "compaction", "1"}, check: fails("etcdserver: permission denied")},
		{args: []string{alice, "auth", "disable"}, check: fails("etcdserver: permission denied")},
		{args: []string{"--user=nopw:", "get", "config"}},
		{args: []string{root, "get", "secret"}, check: ok},
		{args: []string{root, "user", "delete", "root"}, check: fails("etcdserver: invalid auth management")},
		{args: []string{root, "user", "revoke-role", "root", "root"}, check: fails("etcdserver: invalid auth management")},
		{args: []string{root, "role", "delete", "root"}, check: fails("etcdserver: invalid auth management")},
		{args: []string{root, "role", "get", "root"}},
		{args: []string{root, "role", "revoke-permission", "app", "config"}, check: ok},
		{args: []string{root, "role", "revoke-permission", "app", "config"}, check: fails("etcdserver: permission is not granted to the role")},
		{args: []string{alice, "get", "config"}, check: fails("etcdserver: permission denied")},
		{args: []string{root, "user", "passwd", "alice", "--interactive=false"}, stdin: "newpw\n", check: ok},
		{args: []string{alice, "get", "app/t"}, check: fails("etcdserver: authentication failed, invalid user ID or password")},
		{args: []string{"--user=alice:newpw", "get", "app/t"}, check: ok},
		{args: []string{root, "user", "revoke-role", "alice", "app"}, check: ok},
		{args: []string{"--user=alice:newpw", "get", "app/t"}, check: fails("etcdserver: permission denied")},
		{args: []string{root, "auth", "status"}},
		{args: []string{root, "auth", "disable"}, check: ok},
		{args: []string{"get", "secret"}, check: ok},
		{args: []string{"auth", "status"}},
		{args: []string{"user", "delete", "alice"}, check: ok},
		{args: []string{"role", "delete", "app"}, check: ok},
		{args: []string{"user", "list"}},
	} {
		run(t, s)
	}
}
