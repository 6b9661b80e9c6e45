package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// clientTLSKeys map the keys of etcd's client-transport-security section
// that zketcd has to their flags (of the same name).
var clientTLSKeys = map[string]string{"cert-file": "cert-file", "key-file": "key-file", "trusted-ca-file": "trusted-ca-file", "client-cert-auth": "client-cert-auth"}

// etcdKeyAliases map etcd configuration keys to zketcd flags of another
// name (etcd's experimental- spelling of a setting that is now plain).
var etcdKeyAliases = map[string]string{
	"experimental-watch-progress-notify-interval": "watch-progress-notify-interval",
	"experimental-corrupt-check-time":             "corrupt-check-time",
}

// applyConfigFile reads etcd's YAML configuration file path and sets every
// flag of fs that it names and that neither the command line nor the
// environment set (so flags override the file). A key is a flag name:
// etcd's keys where zketcd has the setting, and zketcd's own flags (zk,
// zk-root, ...) the same way. client-transport-security is read for its
// cert-file, key-file, trusted-ca-file and client-cert-auth;
// peer-transport-security for those and auto-tls, allowed-cn and
// allowed-hostname, as the --peer-* flags (peerTLSKeys). Lists are
// joined with commas; a number given for a duration flag is nanoseconds,
// as etcd writes durations. It returns one warning per key that is
// ignored (an etcd setting zketcd does not have) and fails on a value a
// flag refuses or a file that is not a YAML mapping.
func applyConfigFile(fs *flag.FlagSet, path string) (warnings []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config-file: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("--config-file %s: %w", path, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	apply := func(key, name string, v any) error {
		f := fs.Lookup(name)
		if f == nil || name == "config-file" {
			warnings = append(warnings, fmt.Sprintf("config file key %q is not a zketcd setting; ignored", key))
			return nil
		}
		if set[name] || v == nil {
			return nil
		}
		s, err := flagText(f, v)
		if err != nil {
			return fmt.Errorf("--config-file %s: %s: %w", path, key, err)
		}
		if err := fs.Set(name, s); err != nil {
			return fmt.Errorf("--config-file %s: %s: %w", path, key, err)
		}
		return nil
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := doc[k]
		if k == "client-transport-security" || k == "peer-transport-security" {
			keys := clientTLSKeys
			if k == "peer-transport-security" {
				keys = peerTLSKeys
			}
			sec, ok := v.(map[string]any)
			if v != nil && !ok {
				return nil, fmt.Errorf("--config-file %s: %s is not a mapping", path, k)
			}
			subs := make([]string, 0, len(sec))
			for s := range sec {
				subs = append(subs, s)
			}
			sort.Strings(subs)
			for _, s := range subs {
				name, ok := keys[s]
				if !ok {
					if !isZero(sec[s]) {
						warnings = append(warnings, fmt.Sprintf("config file key %q is not a zketcd setting; ignored", k+"."+s))
					}
					continue
				}
				if err := apply(k+"."+s, name, sec[s]); err != nil {
					return nil, err
				}
			}
			continue
		}
		name := k
		if a, ok := etcdKeyAliases[k]; ok {
			name = a
		}
		if err := apply(k, name, v); err != nil {
			return nil, err
		}
	}
	return warnings, nil
}

// isZero tells whether a YAML value is empty (etcd's sample file lists
// every key, most with an empty or false value).
func isZero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case float64:
		return x == 0
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// flagText renders a YAML value as the text flag f parses.
func flagText(f *flag.Flag, v any) (string, error) {
	_, isDuration := f.Value.(flag.Getter).Get().(time.Duration)
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		if isDuration {
			return time.Duration(x).String(), nil
		}
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return "", fmt.Errorf("list item %v is not a string", e)
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("value %v is not a string, number, boolean or list", v)
}
