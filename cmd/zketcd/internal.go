package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/zketcd/zketcd/embed"
)

// internalEndpoint checks --internal-listen-url and --advertise-internal-url
// and sets them in cfg (the endpoint of write forwarding between
// instances, served with --forward-writes).
func (f *serveFlags) internalEndpoint(cfg *embed.Config) error {
	internal, secure, err := listenAddrs(splitList(f.internalListenURL))
	if err != nil {
		return fmt.Errorf("--internal-listen-url: %w", err)
	}
	if f.forwardWrites && (len(internal) != 1 || secure) {
		return errors.New("--internal-listen-url must be one http:// URL")
	}
	if u := f.advertiseInternalURL; u != "" && !strings.HasPrefix(u, "http://") {
		return errors.New("--advertise-internal-url must be an http:// URL")
	}
	if len(internal) > 0 {
		cfg.InternalAddr = internal[0]
	}
	cfg.InternalURL = f.advertiseInternalURL
	return nil
}
