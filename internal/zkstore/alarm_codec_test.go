package zkstore

import (
	"encoding/hex"
	"errors"
	"reflect"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
)

func TestAlarmOpRoundTripsAndRejectsCorruption(t *testing.T) {
	e := &revision.Entry{Writer: revision.WriterTag{Nonce: 9, Seq: 1}, Ops: []revision.Op{
		{Kind: revision.OpAlarm, Alarm: revision.AlarmChange{Alarm: revision.Alarm{Member: 0xfeedface12345678, Type: 1}, Activate: true}},
		{Kind: revision.OpAlarm, Alarm: revision.AlarmChange{Alarm: revision.Alarm{Member: 3, Type: 2}}},
	}}
	data := EncodeEntry(e)
	if data[0] != entryFormat {
		t.Fatalf("an alarm op changed the entry format byte to %d", data[0])
	}
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

func TestSnapshotCarriesAlarmsWithOrWithoutAuth(t *testing.T) {
	alarms := []revision.Alarm{{Member: 5, Type: 1}, {Member: 2, Type: 2}}
	for _, auth := range [][]byte{nil, []byte("auth")} {
		s := &revision.Snapshot{State: revision.State{LSN: 3, Rev: 2, CompactRev: -1}, Auth: auth, Alarms: alarms}
		got, err := DecodeSnapshot(EncodeSnapshot(s))
		if err != nil || !reflect.DeepEqual(got.Alarms, alarms) || !reflect.DeepEqual(got.Auth, auth) {
			t.Fatalf("auth %q: %+v %q %v", auth, got.Alarms, got.Auth, err)
		}
	}
	// A base without alarms is byte for byte what a build without alarms
	// writes (the golden snapshot), so such builds still read it.
	if got := hex.EncodeToString(EncodeSnapshot(goldenSnapshotValue())); got != goldenSnapshot {
		t.Fatalf("snapshot without alarms changed: %s", got)
	}
}
