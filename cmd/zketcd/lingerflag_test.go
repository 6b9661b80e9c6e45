package main

import (
	"testing"
	"time"
)

func TestCommitLingerFlagZeroTurnsItOff(t *testing.T) {
	for _, c := range []struct {
		flag, want time.Duration
	}{{0, -1}, {time.Millisecond, time.Millisecond}, {10 * time.Millisecond, 10 * time.Millisecond}} {
		if got := commitLinger(c.flag); got != c.want {
			t.Errorf("commitLinger(%v) = %v, want %v", c.flag, got, c.want)
		}
	}
}
