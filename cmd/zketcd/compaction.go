package main

import (
	"fmt"

	"github.com/zketcd/zketcd/internal/compactor"
)

// autoCompaction turns --auto-compaction-mode and
// --auto-compaction-retention into the engine's configuration, parsed as
// etcd parses them.
func (f *serveFlags) autoCompaction() (compactor.Config, error) {
	cfg, err := compactor.ParseRetention(compactor.Mode(f.autoCompactionMode), f.autoCompactionRetain)
	if err != nil {
		return compactor.Config{}, fmt.Errorf("--auto-compaction-mode/--auto-compaction-retention: %w", err)
	}
	return cfg, nil
}
