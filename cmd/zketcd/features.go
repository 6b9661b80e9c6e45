package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// initialCorruptCheckGate is the one etcd feature gate zketcd implements.
const initialCorruptCheckGate = "InitialCorruptCheck"

// features parses --feature-gates as etcd writes it ("Name=true,Other=false")
// and returns whether InitialCorruptCheck is on, and one warning per other
// gate named (etcd's gates zketcd does not have are ignored, so an etcd
// configuration can be reused). Errors: a pair that is not Name=bool.
func (f *serveFlags) features() (initialCorruptCheck bool, warnings []string, err error) {
	gates := map[string]bool{}
	for _, pair := range splitList(f.featureGates) {
		name, value, ok := strings.Cut(pair, "=")
		name = strings.TrimSpace(name)
		on, perr := strconv.ParseBool(strings.TrimSpace(value))
		if !ok || name == "" || perr != nil {
			return false, nil, fmt.Errorf("--feature-gates: %q is not Name=true|false", pair)
		}
		gates[name] = on
	}
	names := make([]string, 0, len(gates))
	for name := range gates {
		if name != initialCorruptCheckGate {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		warnings = append(warnings, fmt.Sprintf("--feature-gates: %s is not a zketcd feature; ignored", name))
	}
	return gates[initialCorruptCheckGate], warnings, nil
}
