package engine

import (
	"sync"

	"github.com/zketcd/zketcd/internal/zkstore"
)

// memberRecord is this instance's member znode as it last published it:
// its name, URLs, internal endpoint and host, and the corruption check's
// request and answers. Safe for concurrent use.
type memberRecord struct {
	store MemberRegistry
	mu    sync.Mutex // serializes changes to self and their publication
	self  zkstore.Member
}

// publish changes this instance's member record with update and publishes
// it.
func (m *memberRecord) publish(update func(self *zkstore.Member)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	update(&m.self)
	return m.store.RegisterMember(m.self)
}

// memberHex is a member ID as etcd prints it: 16 hexadecimal digits.
func memberHex(id uint64) string {
	const digits = "0123456789abcdef"
	var buf [16]byte
	for i := 15; i >= 0; i-- {
		buf[i] = digits[id&0xf]
		id >>= 4
	}
	return string(buf[:])
}
