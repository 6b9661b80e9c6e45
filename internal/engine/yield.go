package engine

// yielder is a Leadership that can step down (zkstore.Election).
type yielder interface{ Yield() bool }

// YieldLeadership steps this instance down as its root's leader when
// another instance stands in the root's election, so that the next one
// leads (a fleet spreading its tenants' leadership over its instances). It
// reports whether it stepped down. Writes in flight here fail their fence
// and are forwarded to the new leader, as after any change of leader; an
// instance holding the read lease (Config.ReadLease) does not step down,
// since the next leader could not commit before the lease ran out. Safe
// for concurrent use.
func (b *Engine) YieldLeadership() bool {
	if b.cfg.ReadLease {
		return false
	}
	y, ok := b.election.(yielder)
	if !ok {
		return false
	}
	return y.Yield()
}
