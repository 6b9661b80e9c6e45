package httpgw

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
)

// Creds are the gRPC transport credentials of a server whose connections
// arrive from a Server: the TLS handshake is already done (by the
// classifier), so the handshake here only reports its state, as
// credentials.TLSInfo, the same AuthInfo grpc's own TLS credentials give
// (peer.FromContext then carries the verified client certificates). A
// connection without TLS (the in-process gateway pipe) gets no AuthInfo
// security. Creds never dial: client handshakes fail.
func Creds() credentials.TransportCredentials { return handshakenCreds{} }

type handshakenCreds struct{}

// insecureInfo is the AuthInfo of a connection without TLS.
type insecureInfo struct{ credentials.CommonAuthInfo }

func (insecureInfo) AuthType() string { return "insecure" }

func (handshakenCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cs, ok := c.(connectionStater)
	if !ok {
		return c, insecureInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
	}
	st := cs.ConnectionState()
	return c, credentials.TLSInfo{State: st, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (handshakenCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("httpgw: server-side credentials cannot dial")
}

func (handshakenCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (c handshakenCreds) Clone() credentials.TransportCredentials { return c }

func (handshakenCreds) OverrideServerName(string) error { return nil }
