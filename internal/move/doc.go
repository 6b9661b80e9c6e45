// Package move moves a cluster from one ZooKeeper root to another while
// its instances keep serving it (`zketcd move`, `zketcd tenant move`): it
// copies the source root into the destination at the same log positions,
// follows the source's log, fences it (a revision.OpFence entry committed
// through the ordinary compare-and-swap), waits until every instance of
// the source applied the fence, copies the tail and the lease tokens, and
// finishes the destination, to which the instances then switch (package
// engine). Every step is idempotent: a mover run again after a crash
// continues from what the destination holds, or says why it cannot. It
// never writes the source but for the fence and the <root>/moved record.
// A fleet's tenant (RunTenant) moves the same way from where the fleet's
// registry says its data lives, and the registry names the destination
// once it is finished.
package move
