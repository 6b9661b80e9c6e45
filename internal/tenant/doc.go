// Package tenant owns what a tenant of a fleet is, apart from where it is
// stored: the rules for its name and the certificate CNs bound to it, its
// limits (requests and bytes written per second, watchers, leases, the
// space quota) with the fleet's defaults under them, and the admission
// that enforces the rate limits in front of its engine.
//
// It does no I/O: the registry in ZooKeeper is zkstore's, serving tenants
// is embed's fleet. A Limits value decodes from and encodes to the JSON
// the registry keeps for a tenant.
package tenant
