package main

import "testing"

func TestFeatureGatesAreEtcdsWithOnlyInitialCorruptCheckKept(t *testing.T) {
	for _, c := range []struct {
		gates    string
		on       bool
		warnings int
		bad      bool
	}{
		{"", false, 0, false},
		{"InitialCorruptCheck=true", true, 0, false},
		{"InitialCorruptCheck=false,StopGRPCServiceOnDefrag=true", false, 1, false},
		{" InitialCorruptCheck = true , CompactHashCheck=true,LeaseCheckpoint=false", true, 2, false},
		{"InitialCorruptCheck", false, 0, true},
		{"InitialCorruptCheck=yes", false, 0, true},
	} {
		f := serveFlags{featureGates: c.gates}
		on, warnings, err := f.features()
		if (err != nil) != c.bad || on != c.on || len(warnings) != c.warnings {
			t.Errorf("%q: on %v, warnings %q, err %v", c.gates, on, warnings, err)
		}
	}
}
