package tenant

import (
	"encoding/json"
	"fmt"
)

// Limits are a tenant's limits. In a tenant's record a zero field means
// the fleet's default for it and a negative one no limit; Effective
// resolves both, after which zero and negative mean no limit.
type Limits struct {
	// RequestsPerSecond bounds the tenant's requests (every unary call and
	// every message of a watch or keepalive stream) on each instance.
	RequestsPerSecond int64 `json:"requests_per_second,omitempty"`
	// WriteBytesPerSecond bounds the bytes of the tenant's writes (Put,
	// DeleteRange, Txn, lease and auth changes as they arrive) on each
	// instance.
	WriteBytesPerSecond int64 `json:"write_bytes_per_second,omitempty"`
	// Watchers bounds the tenant's watchers on each instance.
	Watchers int64 `json:"watchers,omitempty"`
	// Leases bounds the tenant's live leases.
	Leases int64 `json:"leases,omitempty"`
	// QuotaBackendBytes is the tenant's space quota (etcd's
	// --quota-backend-bytes for its cluster).
	QuotaBackendBytes int64 `json:"quota_backend_bytes,omitempty"`
}

// DefaultLimits returns a fleet's defaults when it sets none: generous for
// one kube-apiserver (whose own limits keep it far below them), tight
// enough that one tenant cannot take an instance's whole capacity.
func DefaultLimits() Limits {
	return Limits{
		RequestsPerSecond:   2000,
		WriteBytesPerSecond: 16 << 20,
		Watchers:            20000,
		Leases:              10000,
		QuotaBackendBytes:   2 << 30,
	}
}

// Effective resolves l over the fleet's defaults def: a zero field takes
// def's, a negative one stays negative (no limit).
func (l Limits) Effective(def Limits) Limits {
	pick := func(v, d int64) int64 {
		if v == 0 {
			return d
		}
		return v
	}
	return Limits{
		RequestsPerSecond:   pick(l.RequestsPerSecond, def.RequestsPerSecond),
		WriteBytesPerSecond: pick(l.WriteBytesPerSecond, def.WriteBytesPerSecond),
		Watchers:            pick(l.Watchers, def.Watchers),
		Leases:              pick(l.Leases, def.Leases),
		QuotaBackendBytes:   pick(l.QuotaBackendBytes, def.QuotaBackendBytes),
	}
}

// Encode returns the JSON the registry keeps.
func (l Limits) Encode() json.RawMessage {
	data, _ := json.Marshal(l) // a struct of integers always encodes
	return data
}

// DecodeLimits reads a record's limits (empty: all defaults). Unknown
// fields are refused, so a typo in a limit is not silently a default.
func DecodeLimits(raw json.RawMessage) (Limits, error) {
	var l Limits
	if len(raw) == 0 {
		return l, nil
	}
	if err := strictUnmarshal(raw, &l); err != nil {
		return Limits{}, fmt.Errorf("tenant limits %s: %w", raw, err)
	}
	return l, nil
}
