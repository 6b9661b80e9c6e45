package revision

import (
	"reflect"
	"testing"
)

func TestAlarmsApplyStageAbortAndSnapshot(t *testing.T) {
	v := NewView(1, 1)
	nospace := Alarm{Member: 7, Type: 1}
	e := &Entry{LSN: 2, Ops: []Op{{Kind: OpAlarm, Alarm: AlarmChange{Alarm: nospace, Activate: true}}}}
	if _, err := v.Apply(e); err != nil {
		t.Fatal(err)
	}
	if got := v.Alarms(); !reflect.DeepEqual(got, []Alarm{nospace}) || v.State().Rev != 1 {
		t.Fatalf("after raise: %v at rev %d", got, v.State().Rev)
	}
	_ = v.Read(func(r Reader) error {
		b := NewBatch(r)
		b.Begin()
		if b.ChangeAlarm(AlarmChange{Alarm: nospace, Activate: true}) {
			t.Error("raising an active alarm staged an op")
		}
		if !b.ChangeAlarm(AlarmChange{Alarm: Alarm{Member: 1, Type: 2}, Activate: true}) || len(b.Alarms()) != 2 {
			t.Errorf("raise: %v", b.Alarms())
		}
		b.Abort()
		if len(b.Alarms()) != 1 || !b.Empty() {
			t.Errorf("after abort: %v, %d ops", b.Alarms(), len(b.Ops()))
		}
		b.Begin()
		b.ChangeAlarm(AlarmChange{Alarm: nospace})
		b.Commit()
		if len(b.Alarms()) != 0 || len(b.Ops()) != 1 || b.Rev() != 1 {
			t.Errorf("disarm staged: %v, ops %v, rev %d", b.Alarms(), b.Ops(), b.Rev())
		}
		return nil
	})
	v2, err := FromSnapshot(v.Snapshot())
	if err != nil || !reflect.DeepEqual(v2.Alarms(), v.Alarms()) {
		t.Fatalf("snapshot: %v %v", v2.Alarms(), err)
	}
	if got := ApplyAlarm([]Alarm{{Member: 9, Type: 1}, {Member: 2, Type: 2}}, AlarmChange{Alarm: Alarm{Member: 3, Type: 1}, Activate: true}); !reflect.DeepEqual(got, []Alarm{{Member: 3, Type: 1}, {Member: 9, Type: 1}, {Member: 2, Type: 2}}) {
		t.Errorf("order: %v", got)
	}
}
