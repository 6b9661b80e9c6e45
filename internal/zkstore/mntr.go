package zkstore

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"time"
)

// ApproximateDataSize asks the ZooKeeper servers with the "mntr"
// four-letter word for zk_approximate_data_size (the bytes of every znode's
// data and path the server holds: what its heap keeps of the tree, for
// every tenant of the ensemble) and returns the largest answer. ok is false
// when no server answered: mntr is off by default (it needs
// 4lw.commands.whitelist to name it), and is not tried over TLS (the
// four-letter words are served on the plain client port only). Each server
// gets at most timeout.
func (s *Store) ApproximateDataSize(ctx context.Context, timeout time.Duration) (size int64, ok bool) {
	if s.cfg.TLS != nil {
		return 0, false
	}
	for _, addr := range s.cfg.Servers {
		v, found := mntrValue(ctx, addr, "zk_approximate_data_size", timeout)
		if found && v > size {
			size, ok = v, true
		}
	}
	return size, ok
}

// mntrValue returns one numeric mntr value of the server at addr.
func mntrValue(ctx context.Context, addr, name string, timeout time.Duration) (int64, bool) {
	d := net.Dialer{Timeout: timeout}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, false
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("mntr")); err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		k, v, found := strings.Cut(sc.Text(), "\t")
		if !found || k != name {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return n, err == nil
	}
	return 0, false
}
