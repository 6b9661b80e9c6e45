package faultproxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echoServer echoes lines back, after prefix, until the test ends.
func echoServer(t *testing.T, prefix string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(prefix + line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T) *Proxy {
	t.Helper()
	p, err := Start(echoServer(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// roundTrip sends a line on c and waits up to d for it to come back.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := r.ReadString('\n')
	return err
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestPassCutHeal(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if err := roundTrip(c, r, 2*time.Second); err != nil {
		t.Fatalf("pass: %v", err)
	}
	if n := p.Open(); n != 1 {
		t.Fatalf("Open() = %d with one connection; want 1", n)
	}
	p.Cut()
	if n := p.Open(); n != 0 {
		t.Fatalf("Open() = %d after Cut; want 0", n)
	}
	if err := roundTrip(c, r, 2*time.Second); err == nil {
		t.Fatal("a cut connection still carries data")
	}
	c2, r2 := dial(t, p) // accepted, then closed
	if err := roundTrip(c2, r2, 2*time.Second); err == nil {
		t.Fatal("a connection made while cut carries data")
	}
	p.Heal()
	c3, r3 := dial(t, p)
	if err := roundTrip(c3, r3, 2*time.Second); err != nil {
		t.Fatalf("after heal: %v", err)
	}
	if st := p.Stats(); st.Refused == 0 || st.Forwarded < 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestBlackhole(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if err := roundTrip(c, r, 2*time.Second); err != nil {
		t.Fatalf("pass: %v", err)
	}
	p.Blackhole()
	err := roundTrip(c, r, 300*time.Millisecond)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("blackholed connection: want a timeout, got %v", err)
	}
	c2, r2 := dial(t, p) // accepted, carries nothing
	err = roundTrip(c2, r2, 300*time.Millisecond)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("new connection while blackholed: want a timeout, got %v", err)
	}
	p.Heal()
	// The blackholed connections are closed at heal.
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("a blackholed connection delivered data after heal")
	}
	c3, r3 := dial(t, p)
	if err := roundTrip(c3, r3, 2*time.Second); err != nil {
		t.Fatalf("after heal: %v", err)
	}
	if st := p.Stats(); st.Dropped == 0 {
		t.Errorf("nothing dropped: %+v", st)
	}
}

func TestDelay(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	p.SetDelay(100 * time.Millisecond)
	t0 := time.Now()
	if err := roundTrip(c, r, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 200*time.Millisecond {
		t.Errorf("round trip took %v with 100ms each way", d)
	}
}

// say sends line and returns the answer.
func say(c net.Conn, r *bufio.Reader, line string) (string, error) {
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	return strings.TrimSpace(got), err
}

// TestProxyHoldsThenForwardsToTheNewTarget: a connection through the proxy
// reaches the first target; Hold closes it; a connection made while held
// gets no answer until Switch, then reaches the second target.
func TestProxyHoldsThenForwardsToTheNewTarget(t *testing.T) {
	a, b := echoServer(t, "a "), echoServer(t, "b ")
	p, err := Start(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c1, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	r1 := bufio.NewReader(c1)
	if got, err := say(c1, r1, "one"); err != nil || got != "a one" {
		t.Fatalf("before the hold: %q, %v; want \"a one\"", got, err)
	}

	if n := p.Hold(); n != 2 {
		t.Errorf("Hold closed %d sockets, want 2 (the client's and the target's)", n)
	}
	_ = c1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r1.ReadString('\n'); err == nil {
		t.Fatal("the connection forwarded before the hold still answers")
	}

	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if _, err := io.WriteString(c2, "two\n"); err != nil {
		t.Fatal(err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if got, err := r2.ReadString('\n'); err == nil {
		t.Fatalf("a connection made while held was answered: %q", got)
	}
	p.Switch(b)
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r2.ReadString('\n'); err != nil || strings.TrimSpace(got) != "b two" {
		t.Fatalf("after the switch: %q, %v; want \"b two\"", got, err)
	}
	if errs := p.DialErrors(); len(errs) > 0 {
		t.Errorf("dial errors: %v", errs)
	}
}
