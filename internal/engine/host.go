package engine

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
)

// The host an instance runs on, as far as its loopback interface goes: an
// internal endpoint advertised on a loopback address is reached only from
// the same network namespace of the same host. An instance advertises its
// host in its member znode (zkstore.Member.Host), and another instance
// never dials a leader's loopback endpoint from another host: what
// answers there is not the leader (nothing, or whatever a local user of
// this host made listen on that port, which would be handed the clients'
// tokens and could acknowledge writes it never committed). It commits its
// own writes instead, as when the leader cannot be reached.

// localHost identifies this host's loopback interface: on Linux the boot
// of its kernel and the network namespace of this process, elsewhere the
// host name; "" when neither can be read (every loopback endpoint is then
// dialed, as by builds that advertise no host).
func localHost() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err == nil {
		if fi, err := os.Stat("/proc/self/ns/net"); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				return fmt.Sprintf("boot %s netns %d:%d", strings.TrimSpace(string(boot)), st.Dev, st.Ino)
			}
		}
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		return "host " + name
	}
	return ""
}

// loopbackURL reports whether an internal endpoint URL's host is a
// loopback address or localhost.
func loopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// foreignLoopback reports whether a member advertising url from host
// (zkstore.Member.Host) listens on the loopback of another host than self,
// this instance's: a URL this instance must not dial.
func foreignLoopback(self, url, host string) bool {
	return host != "" && self != "" && host != self && loopbackURL(url)
}
