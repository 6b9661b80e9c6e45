package grpcsrv

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestAlarmTextIsEtcdsStatusError(t *testing.T) {
	got := alarmText(&pb.AlarmMember{MemberID: 4359719529979417855, Alarm: pb.AlarmType_NOSPACE})
	if got != "memberID:4359719529979417855 alarm:NOSPACE" {
		t.Fatalf("alarm text %q", got)
	}
}
