package main

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// credentialFlags are the flags whose value may carry a password.
var credentialFlags = []string{"zk-auth", "zk-former-auth"}

// argvCredentials returns the credential flags args gives a password on
// the command line (digest:user:password, sasl:user:password; x509 has
// none), as "--name": every local user reads a process's command line.
func argvCredentials(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, val, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !isCredentialFlag(name) {
			continue
		}
		if !inline {
			if i+1 >= len(args) {
				break
			}
			i++
			val = args[i]
		}
		if strings.Contains(val, ":") && !slices.Contains(out, "--"+name) {
			out = append(out, "--"+name)
		}
	}
	return out
}

func isCredentialFlag(name string) bool { return slices.Contains(credentialFlags, name) }

// insecureChoices lists, for a warning at every start of zketcd serve, the
// settings that leave credentials or data readable to others: credentials
// on the command line, ZooKeeper reached without TLS off loopback (its
// digest scheme sends the password as it is), client URLs without TLS off
// loopback. (The internal endpoint's are embed's, the world-readable root
// the engine's.)
func (f *serveFlags) insecureChoices(zkIdentity string) []string {
	var out []string
	if flags := f.argvCredentials; len(flags) > 0 {
		out = append(out, fmt.Sprintf("%s given on the command line: every local user can read it (ps, /proc); "+
			"use --zk-auth-file, $ZKETCD_ZK_AUTH or the config file's zk-auth", strings.Join(flags, " and ")))
	}
	if f.zkTLSCA == "" {
		if remote := remoteHosts(splitList(f.zk)); len(remote) > 0 {
			msg := fmt.Sprintf("ZooKeeper is reached without TLS at %s: keys, values, the auth store and the internal endpoint's token cross the network in clear", strings.Join(remote, ","))
			if strings.HasPrefix(zkIdentity, "digest:") {
				msg += ", and so does the --zk-auth password (ZooKeeper's digest scheme sends it as it is)"
			}
			out = append(out, msg+"; set --zk-tls-ca-file (ZooKeeper's secureClientPort)")
		}
	}
	for _, raw := range splitList(f.listenClientURLs) {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "http" || isLoopbackHost(u.Hostname()) {
			continue
		}
		out = append(out, fmt.Sprintf("client URL %s serves without TLS on an address that is not loopback: requests, answers, tokens and passwords cross the network in clear; "+
			"use https:// with --cert-file and --key-file", raw))
	}
	return out
}

// remoteHosts returns the host:port entries of a ZooKeeper connect string
// that are not on loopback.
func remoteHosts(servers []string) []string {
	var out []string
	for _, s := range servers {
		host, _, err := net.SplitHostPort(s)
		if err != nil {
			host = s
		}
		if !isLoopbackHost(host) {
			out = append(out, s)
		}
	}
	return out
}

// isLoopbackHost reports whether host (a name or an address) is this
// host's loopback: localhost or a loopback IP.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// openGatewayWarning is the warning of a start where every origin may use
// the HTTP gateway (--cors empty or *, etcd's default) and nothing else
// keeps a browser's page out: authentication off, no client certificate
// required. "" otherwise.
func openGatewayWarning(cors []string, clientCertAuth, authEnabled bool) string {
	all := len(cors) == 0 || slices.Contains(cors, "*")
	if !all || clientCertAuth || authEnabled {
		return ""
	}
	return "every origin may use the HTTP gateway (--cors *) and authentication is off: a web page opened in a browser " +
		"that reaches a client URL can read and write every key; list the origins you serve with --cors, or enable authentication"
}
