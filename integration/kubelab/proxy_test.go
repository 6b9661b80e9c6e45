package kubelab

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echoServer answers each line with its name and the line.
func echoServer(t *testing.T, name string) string {
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
					if _, err := io.WriteString(c, name+" "+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
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
	lab, err := New(t.TempDir(), "", "", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	a, b := echoServer(t, "a"), echoServer(t, "b")
	p, err := lab.StartProxy(a)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	r1 := bufio.NewReader(c1)
	if got, err := roundTrip(c1, r1, "one"); err != nil || got != "a one" {
		t.Fatalf("before the hold: %q, %v; want \"a one\"", got, err)
	}

	if n := p.Hold(); n != 2 {
		t.Errorf("Hold closed %d sockets, want 2 (the client's and the target's)", n)
	}
	_ = c1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r1.ReadString('\n'); err == nil {
		t.Fatal("the connection forwarded before the hold still answers")
	}

	c2, err := net.Dial("tcp", p.Addr)
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
