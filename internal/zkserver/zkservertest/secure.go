package zkservertest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/zketcd/zketcd/internal/testutil/testcerts"
	"github.com/zketcd/zketcd/internal/zkserver"
)

// SecureOptions returns [Options] for a server that also serves TLS on a
// secureClientPort (Netty, a PEM key store of certs' server key and
// certificate, client certificates from certs' CA required), and that
// port's address.
func SecureOptions(t testing.TB, certs *testcerts.Set) (zkserver.Options, string) {
	t.Helper()
	key, err := os.ReadFile(certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	crt, err := os.ReadFile(certs.ServerCert)
	if err != nil {
		t.Fatal(err)
	}
	keystore := filepath.Join(t.TempDir(), "keystore.pem") // ZooKeeper's PEM key store: key and certificate
	if err := os.WriteFile(keystore, append(key, crt...), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := zkserver.NewPortAllocator().Pick()
	if err != nil {
		t.Fatal(err)
	}
	opts := Options(t)
	opts.SystemProps = map[string]string{"zookeeper.serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory"}
	opts.ExtraConfig = map[string]string{
		"secureClientPort":        strconv.Itoa(port),
		"ssl.keyStore.location":   keystore,
		"ssl.keyStore.type":       "PEM",
		"ssl.trustStore.location": certs.CAFile,
		"ssl.trustStore.type":     "PEM",
		"ssl.clientAuth":          "need",
	}
	return opts, "127.0.0.1:" + strconv.Itoa(port)
}
