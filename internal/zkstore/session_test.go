package zkstore

import (
	"context"
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestStoresOnOneSessionShareItAndEndAlone: roots opened on one Session
// share its ZooKeeper session; closing one deletes its own ephemeral
// znodes (member, election) and leaves the others and the session alone;
// after the session expires, every open Store publishes its member again.
func TestStoresOnOneSessionShareItAndEndAlone(t *testing.T) {
	srv := zkservertest.Standalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := OpenSession(ctx, Config{Servers: []string{srv.Addr()}, Root: "/fleet", SessionTimeout: 4 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	a, err := sess.Open(ctx, "/fleet/roots/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sess.Open(ctx, "/fleet/roots/b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ida, _ := a.Session()
	idb, _ := b.Session()
	if ida == 0 || ida != idb || sess.Stores() != 2 {
		t.Fatalf("sessions %x and %x, %d stores", ida, idb, sess.Stores())
	}
	var elections []Leadership
	for i, st := range []*Store{a, b} {
		if err := st.RegisterMember(Member{ID: uint64(i + 1), Name: "i1"}); err != nil {
			t.Fatal(err)
		}
		el := st.Campaign(uint64(i + 1))
		defer el.Close()
		elections = append(elections, el)
		testutil.Eventually(t, 10*time.Second, "leader", func() bool { l, _, _ := el.State(); return l })
	}
	members := func(st *Store) int {
		m, err := st.Members()
		if err != nil {
			t.Fatal(err)
		}
		return len(m)
	}
	elections[0].Close() // as an engine does before it closes its store
	a.Close()
	// a's member znode is gone although the session lives on.
	inspect, err := Open(ctx, Config{Servers: []string{srv.Addr()}, Root: "/fleet/roots/a", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer inspect.Close()
	if n := members(inspect); n != 0 {
		t.Fatalf("a closed: %d member znodes remain", n)
	}
	if kids, _, _ := inspect.conn.Children(inspect.l.election()); len(kids) != 0 {
		t.Fatalf("a closed: election znodes %v remain", kids)
	}
	if !sess.Connected() || members(b) != 1 || sess.Stores() != 1 {
		t.Fatalf("b after a's close: connected %v, %d members, %d stores", sess.Connected(), members(b), sess.Stores())
	}
	if _, err := b.Head(); err != nil {
		t.Fatal(err)
	}
	// The session expires (ZooKeeper frozen past its timeout: it expires
	// the session as it resumes). ZooKeeper races its expiry thread against
	// the client's reconnect queued during the pause: when the reconnect is
	// served first it revalidates the session, so the freeze is repeated
	// until the session has been expired (the Store's behaviour after an
	// expiry is what this test checks, not ZooKeeper's timing).
	expired := func() bool { id, ok := b.Session(); return ok && id != idb }
	for try := 1; !expired(); try++ {
		if try > 4 {
			t.Fatalf("no new session after %d freezes past the session timeout", try-1)
		}
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(8 * time.Second)
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for !expired() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	testutil.Eventually(t, 10*time.Second, "b's member again", func() bool { m, err := b.Members(); return err == nil && len(m) == 1 })
}
