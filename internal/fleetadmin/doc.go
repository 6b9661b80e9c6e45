// Package fleetadmin is a fleet's administration, served to the client
// certificate CNs of its administrators (--tenant-admin-cn) on the
// fleet's own client URLs:
//
//   - an HTTP API under /zketcd/v1/tenants (create, list, read, limits,
//     delete, snapshot), for a platform's controller;
//   - etcd's Auth and KV services as an etcd administrator of one shared
//     etcd sees them, the way hosted control-plane platforms such as
//     Kamaji provision a cluster on etcd: a user added is a tenant
//     created, served to certificates with that user name as CN; a role's
//     READWRITE permission on a key range, granted to that user, maps the
//     range to the tenant; the administrator's reads and writes in that
//     range (a platform's copy of a cluster, its delete of the prefix) go
//     to the tenant's own cluster; a user deleted is a tenant deleted.
//
// Nothing here reaches a tenant except through the Fleet interface, and a
// request in a range no role maps to a tenant is refused with etcd's
// "permission denied". The package keeps no state of its own: users are
// the registry's tenants, roles the registry's roles.
package fleetadmin
