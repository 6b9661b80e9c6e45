package revision

import "sort"

// ApplyAlarm returns alarms (sorted by type, then member) after change: an
// activation adds the alarm unless it is active, a deactivation removes it
// if it is. alarms is not modified; the result is a new slice when the set
// changes, alarms itself otherwise.
func ApplyAlarm(alarms []Alarm, change AlarmChange) []Alarm {
	i := sort.Search(len(alarms), func(i int) bool { return !alarmLess(alarms[i], change.Alarm) })
	found := i < len(alarms) && alarms[i] == change.Alarm
	switch {
	case change.Activate && !found:
		out := make([]Alarm, 0, len(alarms)+1)
		out = append(out, alarms[:i]...)
		out = append(out, change.Alarm)
		return append(out, alarms[i:]...)
	case !change.Activate && found:
		out := make([]Alarm, 0, len(alarms)-1)
		out = append(out, alarms[:i]...)
		return append(out, alarms[i+1:]...)
	}
	return alarms
}

// HasAlarm reports whether an alarm of type t is active for any member.
func HasAlarm(alarms []Alarm, t int32) bool {
	for _, a := range alarms {
		if a.Type == t {
			return true
		}
	}
	return false
}

func alarmLess(a, b Alarm) bool {
	if a.Type != b.Type {
		return a.Type < b.Type
	}
	return a.Member < b.Member
}
