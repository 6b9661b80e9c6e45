//go:build !linux

package gctune

// hugeRegion is empty where huge pages are not asked for.
type hugeRegion struct{}

func reserveHuge(int64, int64) hugeRegion { return hugeRegion{} }

func physicalMemory() int64 { return 0 }

func (hugeRegion) release() {}

func (hugeRegion) len() int64 { return 0 }
