package zkstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"
)

// The identity schemes Config.Auth accepts.
const (
	// SchemeDigest is ZooKeeper's digest identity: "digest:user:password",
	// added to the session with addAuth; the ACL id is
	// user:base64(sha1(user:password)).
	SchemeDigest = "digest"
	// SchemeX509 is the TLS client certificate ZooKeeper's secure client
	// port authenticates (X509AuthenticationProvider): "x509", with
	// Config.TLS holding the certificate; the ACL id is the certificate's
	// subject DN as Java prints it (RFC 2253).
	SchemeX509 = "x509"
	// SchemeSASL is SASL DIGEST-MD5 against the JAAS "Server" section of
	// ZooKeeper's servers: "sasl:user:password"; the ACL id is the user.
	SchemeSASL = "sasl"
)

// ErrUnknownScheme is wrapped by the errors of an identity whose scheme
// zketcd does not know.
var ErrUnknownScheme = errors.New("unknown zookeeper identity scheme")

// identity is who zketcd is to ZooKeeper: how the session proves it, and
// the ACL every znode of the root gets (all permissions for that identity
// only).
type identity struct {
	scheme string
	user   string // digest and sasl user name; x509 subject DN
	pass   string // digest and sasl password
	acl    []zk.ACL
}

// String names the identity without its secret ("digest:alice").
func (id *identity) String() string { return id.scheme + ":" + id.user }

// parseIdentity reads one "scheme:credential" of Config.Auth (tlsCfg
// carries the x509 identity's certificate). An unknown scheme, a missing
// part or an x509 identity without a client certificate is an error; the
// error never holds the credential.
func parseIdentity(spec string, tlsCfg *tls.Config) (*identity, error) {
	scheme, cred, _ := strings.Cut(spec, ":")
	switch scheme {
	case SchemeDigest, SchemeSASL:
		user, pass, ok := strings.Cut(cred, ":")
		if !ok || user == "" || pass == "" {
			return nil, fmt.Errorf("zookeeper identity %s: want %s:user:password", scheme, scheme)
		}
		id := &identity{scheme: scheme, user: user, pass: pass}
		if scheme == SchemeDigest {
			id.acl = zk.DigestACL(zk.PermAll, user, pass)
		} else {
			id.acl = []zk.ACL{{Perms: zk.PermAll, Scheme: SchemeSASL, ID: user}}
		}
		return id, nil
	case SchemeX509:
		if cred != "" {
			return nil, errors.New("zookeeper identity x509 takes no credential: the TLS client certificate (--zk-tls-cert-file) is the identity")
		}
		if tlsCfg == nil || len(tlsCfg.Certificates) == 0 || len(tlsCfg.Certificates[0].Certificate) == 0 {
			return nil, errors.New("zookeeper identity x509 needs a TLS client certificate (--zk-tls-cert-file, --zk-tls-key-file, --zk-tls-ca-file)")
		}
		cert, err := x509.ParseCertificate(tlsCfg.Certificates[0].Certificate[0])
		if err != nil {
			return nil, fmt.Errorf("zookeeper identity x509: parse the client certificate: %w", err)
		}
		dn, err := javaRFC2253(cert.RawSubject)
		if err != nil {
			return nil, fmt.Errorf("zookeeper identity x509: the certificate's subject: %w", err)
		}
		return &identity{scheme: scheme, user: dn, acl: []zk.ACL{{Perms: zk.PermAll, Scheme: SchemeX509, ID: dn}}}, nil
	}
	return nil, fmt.Errorf("%w %q (want digest:user:password, x509 or sasl:user:password)", ErrUnknownScheme, scheme)
}

// parseIdentities reads Config.Auth and Config.FormerAuth: at most one
// identity (nil: none, the znodes are world-readable), and the former
// identities the session also proves, to reach znodes ACLed to them.
func parseIdentities(cfg Config) (id *identity, former []*identity, err error) {
	switch len(cfg.Auth) {
	case 0:
	case 1:
		if id, err = parseIdentity(cfg.Auth[0], cfg.TLS); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, errors.New("zookeeper: one identity only (--zk-auth)")
	}
	for _, spec := range cfg.FormerAuth {
		f, err := parseIdentity(spec, cfg.TLS)
		if err != nil {
			return nil, nil, fmt.Errorf("former identity: %w", err)
		}
		if f.scheme == SchemeX509 {
			// A connection presents one certificate: the current one.
			return nil, nil, errors.New("former identity: x509 cannot be given (a connection presents one certificate, --zk-tls-cert-file)")
		}
		former = append(former, f)
	}
	sasl := 0
	for _, x := range append([]*identity{id}, former...) {
		if x != nil && x.scheme == SchemeSASL {
			sasl++
		}
	}
	if sasl > 1 {
		return nil, nil, errors.New("zookeeper: one sasl identity only (a connection authenticates with SASL once)")
	}
	if id == nil && len(former) > 0 {
		return nil, nil, errors.New("former identities need an identity (--zk-auth) to move the root to")
	}
	return id, former, nil
}

// sameACL reports whether two ACL lists grant the same permissions to the
// same ids, in any order.
func sameACL(a, b []zk.ACL) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(x zk.ACL) string { return fmt.Sprintf("%s\x00%s\x00%d", x.Scheme, x.ID, x.Perms) }
	ka := make([]string, len(a))
	kb := make([]string, len(b))
	for i := range a {
		ka[i], kb[i] = key(a[i]), key(b[i])
	}
	slices.Sort(ka)
	slices.Sort(kb)
	return slices.Equal(ka, kb)
}

// worldReadable reports whether an ACL lets anyone read (world:anyone with
// READ).
func worldReadable(acl []zk.ACL) bool {
	for _, a := range acl {
		if a.Scheme == "world" && a.ID == "anyone" && a.Perms&zk.PermRead != 0 {
			return true
		}
	}
	return false
}

// describeACL prints an ACL as zkCli's getAcl does, one "'scheme,'id : perms"
// per entry, joined with "; ", with digest hashes left out.
func describeACL(acl []zk.ACL) string {
	var parts []string
	for _, a := range acl {
		id := a.ID
		if a.Scheme == SchemeDigest {
			id, _, _ = strings.Cut(id, ":")
		}
		parts = append(parts, fmt.Sprintf("'%s,'%s : %s", a.Scheme, id, perms(a.Perms)))
	}
	return strings.Join(parts, "; ")
}

func perms(p int32) string {
	var b strings.Builder
	for _, x := range []struct {
		bit int32
		c   byte
	}{{zk.PermCreate, 'c'}, {zk.PermDelete, 'd'}, {zk.PermRead, 'r'}, {zk.PermWrite, 'w'}, {zk.PermAdmin, 'a'}} {
		if p&x.bit != 0 {
			b.WriteByte(x.c)
		}
	}
	return b.String()
}
