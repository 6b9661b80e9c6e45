package main

import (
	"time"

	"github.com/sirupsen/logrus"
)

// durationFormatter prints time.Duration fields as Go writes durations
// ("1.2ms", "2m30s"), as etcd's logs do ("took":"1.2ms"), whatever the
// format: logrus's JSON formatter would print them as integer nanoseconds,
// its text formatter already prints them so. It formats a copy of the
// entry: the fields the caller logged are left as they were. Safe for
// concurrent use when next is (logrus's formatters are).
type durationFormatter struct {
	next logrus.Formatter
}

// Format implements logrus.Formatter.
func (f durationFormatter) Format(e *logrus.Entry) ([]byte, error) {
	hasDuration := false
	for _, v := range e.Data {
		if _, ok := v.(time.Duration); ok {
			hasDuration = true
			break
		}
	}
	if !hasDuration {
		return f.next.Format(e)
	}
	c := *e
	c.Data = make(logrus.Fields, len(e.Data))
	for k, v := range e.Data {
		if d, ok := v.(time.Duration); ok {
			v = d.String()
		}
		c.Data[k] = v
	}
	return f.next.Format(&c)
}
