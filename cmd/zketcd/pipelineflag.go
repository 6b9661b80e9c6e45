package main

import (
	"fmt"
	"strconv"
)

// pipelineDepth is --commit-pipeline: "auto" (also 0), the engine's
// automatic depth, or a fixed number of log entries in flight.
type pipelineDepth int

func (d *pipelineDepth) String() string {
	if d == nil || *d == 0 {
		return "auto"
	}
	return strconv.Itoa(int(*d))
}

func (d *pipelineDepth) Set(s string) error {
	if s == "auto" {
		*d = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is neither auto nor a number of log entries", s)
	}
	*d = pipelineDepth(n)
	return nil
}

// Get implements flag.Getter (the config file reads flags through it).
func (d *pipelineDepth) Get() any { return int(*d) }
