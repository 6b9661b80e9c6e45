package httpgw

import (
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// FuzzClassify feeds arbitrary connection starts (after the HTTP/2
// preface, or instead of it) to the classifier: it decides or fails
// within the read bounds, never panics, and a connection it hands on
// replays exactly the bytes it read.
func FuzzClassify(f *testing.F) {
	f.Add(true, []byte{0, 0, 0, 4, 0, 0, 0, 0, 0})
	f.Add(true, []byte{0, 0, 5, 1, 4, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0x41, 0x80})
	f.Add(false, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add(false, []byte("PRI * HTTP/2.0"))
	f.Fuzz(func(t *testing.T, h2 bool, data []byte) {
		client, server := net.Pipe()
		defer client.Close()
		defer server.Close()
		in := data
		if h2 {
			in = append([]byte(http2.ClientPreface), data...)
		}
		go func() {
			client.Write(in)
			client.Close()
		}()
		go io.Copy(io.Discard, client) // the classifier's SETTINGS
		server.SetDeadline(time.Now().Add(5 * time.Second))
		c, kind, err := classify(server, false, false)
		if err != nil {
			return
		}
		if kind != kindHTTP1 && kind != kindGRPC && kind != kindHTTP2 {
			t.Fatalf("kind %d", kind)
		}
		if kind == kindHTTP1 {
			got, _ := io.ReadAll(c)
			if string(got) != string(in) {
				t.Fatalf("HTTP/1 replay %q, sent %q", got, in)
			}
		}
	})
}
