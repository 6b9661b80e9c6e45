package engine

import (
	"github.com/sirupsen/logrus"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// formatKeeper is what a Log offers for the root's format (see
// zkstore.RaiseFormat): *zkstore.Store has it, memlog keeps format 1.
type formatKeeper interface {
	Format() int
	RefreshFormat() (int, error)
	RaiseFormat() (int, error)
}

// followFormat keeps the instance's idea of the root's format current:
// the leader raises it once every live instance reads the newest one
// (compression), the others read it again, until it is the newest this
// build knows. Called from the compaction loop (every 2 s).
func followFormat(c *core, lg *logrus.Entry, leader bool) {
	fk, ok := c.store.(formatKeeper)
	if !ok {
		return
	}
	cur := fk.Format()
	c.metrics.rootFormat.Set(float64(cur))
	if cur >= zkstore.MetaFormat {
		return
	}
	var err error
	if leader {
		cur, err = fk.RaiseFormat()
	} else {
		cur, err = fk.RefreshFormat()
	}
	if err != nil && c.ctx.Err() == nil {
		lg.WithError(err).Debug("root format")
	}
	c.metrics.rootFormat.Set(float64(cur))
}
