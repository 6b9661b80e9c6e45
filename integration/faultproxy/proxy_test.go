package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer echoes lines back until the test ends.
func echoServer(t *testing.T) string {
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
					if _, err := c.Write([]byte(line)); err != nil {
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
	p, err := Start(echoServer(t))
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
