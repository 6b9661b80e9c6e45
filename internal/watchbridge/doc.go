// Package watchbridge turns applied log entries into etcd watch streams. It
// follows etcd's watchable store: watchers are synced (they have seen every
// revision up to the hub's, and get new events as entries are applied),
// unsynced (they catch up from the view's history in a background loop) or
// victims (their stream's channel was full; they hold one pending response
// and catch up once it is delivered).
//
// Guarantees, per watcher: events arrive in revision order, each once; the
// events of one revision are never split across responses; nothing between
// the start revision and the hub's revision is skipped; a progress
// notification at revision R is sent only when every event at or below R
// has been queued before it on the same stream. Applying an entry never
// blocks on a slow watcher.
//
// Lock order: the engine's apply lock, then Hub.mu, then the view's lock.
package watchbridge
