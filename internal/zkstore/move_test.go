package zkstore

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/zketcd/zketcd/internal/zkserver/zkservertest"
)

// TestWaitMoveFinishedWakesOnTheRecord waits on the store's own session
// for a destination root's move record: it waits while the record is
// missing and while it says copying, and returns once it says finished.
func TestWaitMoveFinishedWakesOnTheRecord(t *testing.T) {
	srv := zkservertest.Standalone(t)
	st := openStoreWith(t, Config{Servers: []string{srv.Addr()}, Root: "/src"})
	dest := "/dest"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- st.WaitMoveFinished(ctx, dest) }()
	waiting := func(step string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("%s: returned %v", step, err)
		case <-time.After(300 * time.Millisecond):
		}
	}
	waiting("no record")
	rec := MoveRecord{ClusterID: 1, FromRoot: st.Root(), State: MoveCopying}
	data, _ := json.Marshal(rec)
	if _, err := st.conn.Create(dest, nil, 0, st.acl); err != nil {
		t.Fatal(err)
	}
	if _, err := st.conn.Create(layout{dest}.move(), data, 0, st.acl); err != nil {
		t.Fatal(err)
	}
	waiting("copying")
	rec.State = MoveFinished
	data, _ = json.Marshal(rec)
	if _, err := st.conn.Set(layout{dest}.move(), data, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after the move finished")
	}
}
