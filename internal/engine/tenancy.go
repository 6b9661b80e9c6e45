package engine

// LeaseCount returns how many leases the view holds (a tenant's lease
// limit counts them).
func (b *Engine) LeaseCount() int { return b.view.LeaseCount() }

// SetMaxWatchers bounds the watchers of all the instance's watch streams
// together (0: no bound; a tenant's watcher limit). Watchers already
// there stay; a watch created beyond the bound is refused with etcd's
// "too many requests".
func (b *Engine) SetMaxWatchers(n int) { b.hub.SetMaxWatchers(n) }
