package httpgw

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/sirupsen/logrus"
)

// wsProxy serves a streaming gateway call over a WebSocket, as etcd's
// gateway does with grpc-websocket-proxy: each text (or binary) message
// the client sends is one JSON request, written to the call's body
// followed by a newline; each line of the call's response is one text
// message. The method is POST whatever the upgrade's. As there, the token
// travels in the subprotocol ("Sec-WebSocket-Protocol: Bearer, <token>") or
// a "token" cookie, and Origin and Referer are forwarded.
//
// Unlike grpc-websocket-proxy, which accepts every origin and reads
// messages of any size, the upgrade is refused for an origin --cors does
// not allow, a message longer than the body limit ends the connection (a
// close frame "message too big"), and a write the client does not take
// within writeTimeout ends it too.
type wsProxy struct {
	gw           http.Handler
	origins      allowList
	limit        int64
	writeTimeout time.Duration
	lg           *logrus.Entry
}

// checkOrigin allows an upgrade without Origin (not a browser) or with an
// origin --cors allows.
func (p *wsProxy) checkOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	return o == "" || p.origins.allowsOrigin(o)
}

func (p *wsProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var respHeader http.Header
	if strings.HasPrefix(r.Header.Get("Sec-WebSocket-Protocol"), "Bearer") {
		respHeader = http.Header{"Sec-WebSocket-Protocol": []string{"Bearer"}}
	}
	up := websocket.Upgrader{ReadBufferSize: 4096, WriteBufferSize: 4096, CheckOrigin: p.checkOrigin}
	conn, err := up.Upgrade(w, r, respHeader)
	if err != nil {
		p.lg.WithError(err).Debug("websocket upgrade refused")
		return
	}
	defer conn.Close()
	// The request's read deadline (the body's, see timeouts.go) does not
	// apply to a stream.
	_ = conn.NetConn().SetReadDeadline(time.Time{})
	conn.SetReadLimit(p.limit)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	reqBody, reqW := io.Pipe()
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL.String(), reqBody)
	if err != nil {
		return
	}
	for _, h := range []string{"Origin", "Referer"} {
		if v := r.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	if proto := r.Header.Get("Sec-WebSocket-Protocol"); proto != "" {
		if _, tok, ok := strings.Cut(proto, "Bearer,"); ok {
			out.Header.Set("Authorization", "Bearer "+strings.TrimSpace(tok))
		}
	}
	if c, err := r.Cookie("token"); err == nil {
		out.Header.Set("Authorization", "Bearer "+c.Value)
	}
	respBody, respW := io.Pipe()
	go func() {
		defer cancel()
		defer respW.Close()
		p.gw.ServeHTTP(&pipeResponse{w: respW, header: http.Header{}}, out)
	}()
	go func() {
		<-ctx.Done()
		reqW.CloseWithError(io.EOF)
		respW.CloseWithError(io.EOF)
	}()
	go func() {
		defer cancel()
		for {
			_, msg, err := conn.ReadMessage()
			if err != nil {
				if errorsIsTooBig(err) {
					p.lg.WithField("limit", p.limit).Debug("websocket message above the body limit: connection closed")
				}
				return
			}
			if _, err := reqW.Write(append(msg, '\n')); err != nil {
				return
			}
		}
	}()
	sc := bufio.NewScanner(respBody)
	sc.Buffer(make([]byte, 0, 64<<10), math.MaxInt32)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		_ = conn.SetWriteDeadline(time.Now().Add(p.writeTimeout))
		if err := conn.WriteMessage(websocket.TextMessage, line); err != nil {
			return
		}
	}
}

// errorsIsTooBig reports gorilla's read-limit error.
func errorsIsTooBig(err error) bool { return errors.Is(err, websocket.ErrReadLimit) }

// pipeResponse is the gateway call's response writer: the body goes to
// the pipe the message loop reads.
type pipeResponse struct {
	w      io.Writer
	header http.Header
}

func (r *pipeResponse) Header() http.Header         { return r.header }
func (r *pipeResponse) Write(b []byte) (int, error) { return r.w.Write(b) }
func (r *pipeResponse) WriteHeader(int)             {}
func (r *pipeResponse) Flush()                      {}
