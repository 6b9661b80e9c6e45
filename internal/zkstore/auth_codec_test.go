package zkstore

import (
	"errors"
	"reflect"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
)

func TestAuthOpRoundTripsAndRejectsCorruption(t *testing.T) {
	e := &revision.Entry{Ops: []revision.Op{
		{Kind: revision.OpAuth, Auth: []byte("encoded auth state")},
		{Kind: revision.OpTxn, Rev: 2, Changes: []revision.Change{{Key: []byte("k"), Value: []byte("v")}}},
	}}
	data := EncodeEntry(e)
	got, err := DecodeEntry(data)
	if err != nil || !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x40
		if _, err := DecodeEntry(bad); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("flipping byte %d: %v", i, err)
		}
	}
}

func TestSnapshotCarriesAuthStateAndOldBasesHaveNone(t *testing.T) {
	s := &revision.Snapshot{State: revision.State{LSN: 3, Rev: 2, CompactRev: -1}, Auth: []byte("auth")}
	got, err := DecodeSnapshot(EncodeSnapshot(s))
	if err != nil || string(got.Auth) != "auth" {
		t.Fatalf("with auth: %q %v", got.Auth, err)
	}
	s.Auth = nil
	got, err = DecodeSnapshot(EncodeSnapshot(s))
	if err != nil || got.Auth != nil {
		t.Fatalf("without auth: %q %v", got.Auth, err)
	}
}
