package zkserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ErrNotServing is returned (wrapped) by [Server.Mode] when the server
// answers but does not serve requests yet (or any more), for example while
// it loads its data or while an ensemble member has no quorum.
var ErrNotServing = errors.New("server is not serving requests")

// Modes reported by [Server.Mode].
const (
	ModeStandalone = "standalone"
	ModeLeader     = "leader"
	ModeFollower   = "follower"
	ModeObserver   = "observer"
)

// defaultProbeTimeout bounds a four-letter-word exchange whose context has
// no deadline, so that a paused (SIGSTOPped) server cannot block forever:
// its kernel still accepts the connection but nobody answers.
const defaultProbeTimeout = 5 * time.Second

// fourLetterWord sends cmd (such as "srvr") to the server at addr and returns
// its whole answer.
func fourLetterWord(ctx context.Context, addr, cmd string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultProbeTimeout)
		defer cancel()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("zkserver: %s %s: %w", cmd, addr, err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", fmt.Errorf("zkserver: %s %s: write: %w", cmd, addr, err)
	}
	b, err := io.ReadAll(io.LimitReader(conn, 1<<20))
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = fmt.Errorf("%w (%v)", ctxErr, err)
		}
		return "", fmt.Errorf("zkserver: %s %s: read: %w", cmd, addr, err)
	}
	return string(b), nil
}

// queryMode asks the server at addr for its mode with "srvr".
func queryMode(ctx context.Context, addr string) (string, error) {
	out, err := fourLetterWord(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	return parseMode(addr, out)
}

// parseMode extracts the "Mode: x" line of a srvr answer.
func parseMode(addr, out string) (string, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if mode, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Mode:"); ok {
			return strings.TrimSpace(mode), nil
		}
	}
	if strings.Contains(out, "not currently serving") {
		return "", fmt.Errorf("zkserver: srvr %s: %w", addr, ErrNotServing)
	}
	if strings.Contains(out, "not in the whitelist") {
		return "", fmt.Errorf("zkserver: srvr %s: command not allowed by 4lw.commands.whitelist", addr)
	}
	if out == "" {
		return "", fmt.Errorf("zkserver: srvr %s: %w (empty answer)", addr, ErrNotServing)
	}
	return "", fmt.Errorf("zkserver: srvr %s: no Mode line in answer %q", addr, truncate(out, 200))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Zxid asks the server with the "srvr" four-letter word for the zxid of the
// last transaction it applied (its "Zxid:" line). It fails like
// [Server.Mode] does. Benchmarks difference it to count the transactions
// an ensemble committed (each commits one zxid, within an epoch).
func (s *Server) Zxid(ctx context.Context) (int64, error) {
	out, err := fourLetterWord(ctx, s.addr, "srvr")
	if err != nil {
		return 0, err
	}
	return parseZxid(s.addr, out)
}

// parseZxid extracts the "Zxid: 0x..." line of a srvr answer.
func parseZxid(addr, out string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Zxid:"); ok {
			z, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(v), "0x"), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("zkserver: srvr %s: bad Zxid line %q: %w", addr, v, err)
			}
			return z, nil
		}
	}
	if _, err := parseMode(addr, out); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("zkserver: srvr %s: no Zxid line in answer %q", addr, truncate(out, 200))
}

// Monitor asks the server with the "mntr" four-letter word for its
// monitoring values (zk_server_state, zk_znode_count,
// zk_approximate_data_size, zk_avg_latency, ...), keyed by name. It fails
// like [Server.Mode] does when the server cannot be reached, and with
// [ErrNotServing] when it does not serve.
func (s *Server) Monitor(ctx context.Context) (map[string]string, error) {
	out, err := fourLetterWord(ctx, s.addr, "mntr")
	if err != nil {
		return nil, err
	}
	return parseMntr(s.addr, out)
}

// parseMntr splits a mntr answer (lines of "name<TAB>value").
func parseMntr(addr, out string) (map[string]string, error) {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "\t"); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if len(m) > 0 {
		return m, nil
	}
	if out == "" || strings.Contains(out, "not currently serving") {
		return nil, fmt.Errorf("zkserver: mntr %s: %w", addr, ErrNotServing)
	}
	return nil, fmt.Errorf("zkserver: mntr %s: no values in answer %q", addr, truncate(out, 200))
}
