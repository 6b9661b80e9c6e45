package watchbridge

import (
	"fmt"
	"testing"

	"github.com/zketcd/zketcd/internal/revision"
)

// BenchmarkNotifyPrefixWatchers measures one Notify of a single-key write
// with W prefix watchers registered (kube-apiserver's shape: one watcher per
// resource prefix, every write under exactly one of them). The write's
// prefix watcher receives it; the others must cost as little as possible,
// because Notify runs under the engine's apply lock on every commit.
func BenchmarkNotifyPrefixWatchers(b *testing.B) {
	for _, w := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("watchers=%d", w), func(b *testing.B) {
			v := revision.NewView(1, 1)
			h := NewHub(v)
			defer h.Close()
			s := h.NewStream(0)
			defer s.Close()
			for i := 0; i < w; i++ {
				p := fmt.Sprintf("/registry/kind%05d/", i)
				end := []byte(p)
				end[len(end)-1]++
				if _, err := s.Watch(AutoWatchID, []byte(p), end, 0); err != nil {
					b.Fatal(err)
				}
			}
			keys := make([][]byte, 64)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "/registry/kind%05d/obj-%d", (i*7919)%w, i)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rev := int64(i + 2)
				e := &revision.Entry{LSN: rev, Ops: []revision.Op{{Kind: revision.OpTxn, Rev: rev}}}
				ev := []revision.Event{{Type: revision.EventPut, KV: &revision.KeyValue{Key: keys[i%len(keys)], ModRevision: rev}}}
				h.Notify(e, ev)
				<-s.Chan() // the one watcher it matched
			}
			b.StopTimer()
			if st := h.Stats(); st.Victims != 0 || st.Synced != w {
				b.Fatalf("stats %+v, want %d synced watchers", st, w)
			}
		})
	}
}
