package httpgw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gorilla/websocket"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	gw "go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// grpcOverheadBytes is what etcd (and grpcsrv) add to --max-request-bytes
// for the gRPC receive limit.
const grpcOverheadBytes = 512 * 1024

// MaxBodyBytes is the largest gateway request body read for a given
// --max-request-bytes: twice the gRPC receive limit, room for JSON's
// base64 and field names. A body under it that is still too large for gRPC
// gets etcd's own gRPC error, as on etcd; a larger body is cut off with
// etcd's "request is too large" (etcd would read it whole first).
func MaxBodyBytes(maxRequestBytes int) int64 {
	if maxRequestBytes <= 0 {
		maxRequestBytes = 1536 * 1024
	}
	return 2 * (int64(maxRequestBytes) + grpcOverheadBytes)
}

// RegisterFunc registers a service's gateway handlers (the signature of the
// generated Register<Service>Handler functions).
type RegisterFunc func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error

// gatewayServices are the etcd services etcd's gateway serves.
var gatewayServices = []RegisterFunc{
	gw.RegisterKVHandler,
	gw.RegisterWatchHandler,
	gw.RegisterLeaseHandler,
	gw.RegisterClusterHandler,
	gw.RegisterMaintenanceHandler,
	gw.RegisterAuthHandler,
}

// newGateway builds the grpc-gateway mux over conn, with etcd's JSON
// options: proto field names, unset fields omitted, unknown fields
// ignored.
func newGateway(ctx context.Context, conn *grpc.ClientConn, extra []RegisterFunc) (*runtime.ServeMux, error) {
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{
		Marshaler: compactJSON{&runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
		}},
	}))
	for _, register := range append(gatewayServices[:len(gatewayServices):len(gatewayServices)], extra...) {
		if err := register(ctx, mux, conn); err != nil {
			return nil, fmt.Errorf("httpgw: register gateway: %w", err)
		}
	}
	return mux, nil
}

// compactJSON is protojson without the whitespace it inserts at random
// (protojson varies its output on purpose, per binary); etcd's gateway
// answers compact JSON, and so does zketcd's, whatever the build.
type compactJSON struct{ *runtime.JSONPb }

func (m compactJSON) Marshal(v any) ([]byte, error) {
	b, err := m.JSONPb.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, fmt.Errorf("compact gateway JSON: %w", err)
	}
	return out.Bytes(), nil
}

// errBodyTooLarge reads as etcd's "request is too large"; the gateway
// turns a body read error into InvalidArgument with its text, the code
// etcd gives that error.
var errBodyTooLarge = errors.New(rpctypes.ErrorDesc(rpctypes.ErrGRPCRequestTooLarge))

// bounded cuts gateway bodies off at s.limit (etcd's /v3beta/ prefix is
// served as /v3/, as etcd does). A body announced larger than the limit is
// refused before it is read.
func (s *Server) bounded(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.limit {
			writeStatus(w, status.New(codes.InvalidArgument, errBodyTooLarge.Error()))
			return
		}
		if r.Body != nil {
			r.Body = &limitedBody{rc: r.Body, left: s.limit}
		}
		h.ServeHTTP(w, r)
	})
}

// writeStatus writes st as the gateway writes errors: the HTTP status of
// its code and {"code":..,"message":..}.
func writeStatus(w http.ResponseWriter, st *status.Status) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(runtime.HTTPStatusFromCode(st.Code()))
	fmt.Fprintf(w, `{"code":%d,"message":%q}`, st.Code(), st.Message())
}

// limitedBody fails with errBodyTooLarge once more than left bytes are read.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, errBodyTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// gatewayHandler serves /v3/: a WebSocket upgrade becomes one streaming
// request to the gateway (websocket.go), anything else a request with a
// bounded body.
func (s *Server) gatewayHandler(gw http.Handler) http.Handler {
	ws := &wsProxy{gw: gw, origins: newAllowList(s.cfg.CORS), limit: s.limit, writeTimeout: s.cfg.WriteTimeout,
		lg: s.lg.WithField("component", "websocket")}
	bounded := s.bounded(gw)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if websocket.IsWebSocketUpgrade(r) {
			ws.ServeHTTP(w, r)
			return
		}
		bounded.ServeHTTP(w, r)
	})
}
