package zkstore

import (
	"errors"
	"fmt"
	"time"
)

// errNoAnswer marks a request ZooKeeper did not answer in time; it wraps
// ErrUnavailable. For a commit it means "outcome unknown".
var errNoAnswer = fmt.Errorf("%w: no answer from zookeeper", ErrUnavailable)

// requestTimeout bounds how long one request may go unanswered before the
// caller treats it as lost. The ZooKeeper client fails requests when its
// connection drops, so this only guards against a request that is never
// answered at all: an instance must not stall on one.
func (s *Store) requestTimeout() time.Duration {
	return max(2*s.cfg.SessionTimeout, 10*time.Second)
}

// bounded runs f, giving up after requestTimeout with errNoAnswer. f keeps
// running in the background if it hangs; its late result is dropped.
func bounded[T any](s *Store, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	t := time.NewTimer(s.requestTimeout())
	defer t.Stop()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-t.C:
		s.log.WithField("timeout", s.requestTimeout()).Warn("zookeeper request unanswered; treating it as lost")
		var zero T
		return zero, errNoAnswer
	case <-s.closed:
		var zero T
		return zero, fmt.Errorf("%w: store closed", ErrUnavailable)
	}
}

func isNoAnswer(err error) bool { return errors.Is(err, errNoAnswer) }
