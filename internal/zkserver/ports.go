package zkserver

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// PortAllocator hands out free TCP ports on 127.0.0.1 and remembers every
// port it handed out, so that it never hands out the same port twice.
//
// A port is found by listening on 127.0.0.1:0, reading the port the kernel
// chose and closing the listener. The ZooKeeper JVM binds the port only
// seconds later; during that window the kernel may give the same port to
// another caller that also asks for port 0. Remembering the ports closes that
// window for every caller that shares the allocator. Ports are never given
// back: a stopped [Server] keeps its ports so that [Server.Start] can reuse
// them.
//
// The zero value is not usable; use [NewPortAllocator]. A PortAllocator is
// safe for concurrent use.
type PortAllocator struct {
	mu   sync.Mutex
	used map[int]struct{}
}

// NewPortAllocator returns an empty allocator.
func NewPortAllocator() *PortAllocator {
	return &PortAllocator{used: make(map[int]struct{})}
}

// processPorts is the allocator used when [Options.Ports] is nil.
//
// It is a process-wide registry on purpose: tests (including parallel tests
// in the same test binary) start servers independently of each other through
// zkservertest, and each JVM binds its ports seconds after they were picked.
// Only a registry shared by every caller in the process can stop two of them
// from being handed the same port in that window. It holds nothing but the
// set of ports already handed out.
var processPorts = NewPortAllocator()

// maxPickAttempts bounds how often Pick asks the kernel for a port that this
// allocator has not handed out yet.
const maxPickAttempts = 100

// Pick returns one free port on 127.0.0.1 that this allocator has not handed
// out before. It fails only if the kernel refuses to open a listener or keeps
// returning ports that were already handed out.
func (a *PortAllocator) Pick() (int, error) {
	ports, err := a.PickN(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// PickN returns n distinct free ports on 127.0.0.1 that this allocator has
// not handed out before. All listeners are held open until all n ports are
// found, so the kernel cannot return the same port twice within one call.
// On error no port is handed out.
func (a *PortAllocator) PickN(n int) ([]int, error) {
	if n < 0 {
		return nil, fmt.Errorf("zkserver: pick %d ports: negative count", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()

	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for attempts := 0; len(ports) < n; attempts++ {
		if attempts >= maxPickAttempts+n {
			return nil, fmt.Errorf("zkserver: pick %d ports: only %d unused ports after %d attempts", n, len(ports), attempts)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("zkserver: pick free port: %w", err)
		}
		listeners = append(listeners, l)
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, errors.New("zkserver: pick free port: listener has no TCP address")
		}
		if _, taken := a.used[addr.Port]; taken {
			continue
		}
		ports = append(ports, addr.Port)
	}
	for _, p := range ports {
		a.used[p] = struct{}{}
	}
	return ports, nil
}

// Reserve records port as handed out, so that Pick and PickN never return
// it. Use it for fixed ports chosen by other means. It reports whether the
// port was free in this allocator before the call.
func (a *PortAllocator) Reserve(port int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, taken := a.used[port]; taken {
		return false
	}
	a.used[port] = struct{}{}
	return true
}
