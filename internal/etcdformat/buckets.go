package etcdformat

// The buckets of etcd 3.7's backend (etcd's server/storage/schema).
const (
	KeyBucket            = "key"
	MetaBucket           = "meta"
	LeaseBucket          = "lease"
	AlarmBucket          = "alarm"
	ClusterBucket        = "cluster"
	MembersBucket        = "members"
	MembersRemovedBucket = "members_removed"
	AuthBucket           = "auth"
	AuthUsersBucket      = "authUsers"
	AuthRolesBucket      = "authRoles"
)

// Keys of the meta bucket.
const (
	MetaConsistentIndex  = "consistent_index"
	MetaTerm             = "term"
	MetaConfState        = "confState"
	MetaStorageVersion   = "storageVersion"
	MetaScheduledCompact = "scheduledCompactRev"
	MetaFinishedCompact  = "finishedCompactRev"
)
