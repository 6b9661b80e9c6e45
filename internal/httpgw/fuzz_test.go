package httpgw_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"

	"github.com/zketcd/zketcd/internal/httpgw"
	"github.com/zketcd/zketcd/internal/testutil"
)

// echoKV answers every KV request with what it was asked: the fuzz target
// exercises the gateway's JSON decoding and encoding, not the semantics
// (which the ZooKeeper-backed tests check).
type echoKV struct{ pb.UnimplementedKVServer }

func (echoKV) Range(_ context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	return &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: r.Revision},
		Kvs: []*mvccKV{{Key: r.Key, Value: r.RangeEnd}}, Count: r.Limit}, nil
}

func (echoKV) Put(_ context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	return &pb.PutResponse{Header: &pb.ResponseHeader{}, PrevKv: &mvccKV{Key: r.Key, Value: r.Value, Lease: r.Lease}}, nil
}

func (echoKV) Txn(_ context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	resp := &pb.TxnResponse{Header: &pb.ResponseHeader{}, Succeeded: len(r.Compare) > 0}
	for range r.Success {
		resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{}}})
	}
	return resp, nil
}

func (echoKV) DeleteRange(_ context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{}, PrevKvs: []*mvccKV{{Key: r.Key}}}, nil
}

// FuzzGatewayJSON sends arbitrary bodies to the KV gateway paths: every
// answer is 200 with a JSON object or an error status with etcd's
// {"code":..,"message":..} JSON; nothing panics or hangs.
func FuzzGatewayJSON(f *testing.F) {
	for _, s := range []string{
		`{"key":"Zm9v"}`, `{"key":"Zm9v","range_end":"AA==","limit":"3","revision":-1}`,
		`{"key":123}`, `{bad`, ``, `[]`, `null`, `{"key":"Zm9v","sort_order":"SIDEWAYS"}`,
		`{"compare":[{"key":"Zm9v","target":"VALUE","result":"EQUAL","value":"YmFy"}],"success":[{"request_put":{"key":"YQ=="}}]}`,
		`{"success":[{"request_txn":{"success":[{"request_range":{"key":"YQ=="}}]}}]}`,
		`{"key":"\u0000","value":"` + strings.Repeat("A", 64) + `"}`, `{"lease":"18446744073709551615"}`,
		`{"key":"Zm9v","unknown":{"deep":[1,2,{"x":null}]}}`,
	} {
		f.Add(0, s)
		f.Add(2, s)
	}
	srv := grpc.NewServer()
	pb.RegisterKVServer(srv, echoKV{})
	lg := testutil.Logger(logrus.PanicLevel)
	gw, err := httpgw.New(httpgw.Config{
		GRPC: srv, MaxRequestBytes: 4096,
		Leader: func() error { return nil },
		Read:   func(context.Context, bool) error { return nil },
		Logger: lg,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { gw.Close(); srv.Stop() })
	paths := []string{"/v3/kv/range", "/v3/kv/put", "/v3/kv/txn", "/v3/kv/deleterange"}
	f.Fuzz(func(t *testing.T, path int, body string) {
		p := paths[uint(path)%uint(len(paths))]
		rec := httptest.NewRecorder()
		gw.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, p, strings.NewReader(body)))
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %q: %d, not a JSON object: %q", p, body, rec.Code, rec.Body.String())
		}
		if rec.Code != http.StatusOK {
			if _, ok := out["code"].(float64); !ok {
				t.Fatalf("%s %q: %d without a code: %q", p, body, rec.Code, rec.Body.String())
			}
			if _, ok := out["message"].(string); !ok {
				t.Fatalf("%s %q: %d without a message: %q", p, body, rec.Code, rec.Body.String())
			}
		}
	})
}

type mvccKV = mvccpb.KeyValue
