package main

import (
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/sirupsen/logrus"
)

// notifySystemd sends state to systemd's $NOTIFY_SOCKET (sd_notify): a
// Type=notify unit's `systemctl start` returns once READY=1 arrives, and
// STOPPING=1 tells systemd the stop has begun. Without $NOTIFY_SOCKET (not
// under systemd) it does nothing; a failure is logged, never fatal.
func notifySystemd(lg *logrus.Entry, state string) {
	if sent, err := daemon.SdNotify(false, state); err != nil {
		lg.WithError(err).WithField("state", state).Warn("sd_notify failed")
	} else if sent {
		lg.WithField("state", state).Debug("notified systemd")
	}
}
