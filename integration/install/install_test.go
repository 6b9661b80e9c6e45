// Package install tests `make install` and the systemd units it installs,
// as docs/operations.md "Installing" uses them.
package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const repoRoot = "../.."

// TestMakeInstallStagesAHardenedNotifyUnit runs `make install` into a
// staging directory (DESTDIR, PREFIX=/usr) and checks what it put there:
// the binary (linked with its git version), the units pointing at it, the
// unit Type=notify and rated 2.5 or below by `systemd-analyze security`, the
// sysusers.d entry creating the zketcd user, the example configuration and
// the backup script.
func TestMakeInstallStagesAHardenedNotifyUnit(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	dest := t.TempDir()
	bin := filepath.Join(t.TempDir(), "bin")
	cmd := exec.Command("make", "-C", repoRoot, "install", "DESTDIR="+dest, "PREFIX=/usr", "BIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	mode := func(rel string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(filepath.Join(dest, rel))
		if err != nil {
			t.Fatalf("make install did not stage %s: %v", rel, err)
		}
		return fi.Mode().Perm()
	}
	for rel, want := range map[string]os.FileMode{
		"usr/bin/zketcd": 0o755, "usr/bin/zketcd-backup": 0o755,
		"usr/lib/systemd/system/zketcd.service": 0o644, "usr/lib/systemd/system/zketcd-backup.service": 0o644,
		"usr/lib/systemd/system/zketcd-backup.timer": 0o644, "usr/lib/sysusers.d/zketcd.conf": 0o644,
		"usr/share/zketcd/zketcd.conf.yml": 0o644,
	} {
		if got := mode(rel); got != want {
			t.Errorf("%s: mode %v, want %v", rel, got, want)
		}
	}
	version, err := exec.Command(filepath.Join(dest, "usr/bin/zketcd"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(version), "zketcd Version: dev\n") || strings.Contains(string(version), "Git SHA: unknown") {
		t.Errorf("make install's binary carries no version or commit:\n%s", version)
	}
	unit, err := os.ReadFile(filepath.Join(dest, "usr/lib/systemd/system/zketcd.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nType=notify\n", "\nExecStart=/usr/bin/zketcd serve ", "\nUser=zketcd\n"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the installed unit lacks %q", strings.TrimSpace(want))
		}
	}
	backup, _ := os.ReadFile(filepath.Join(dest, "usr/lib/systemd/system/zketcd-backup.service"))
	if !strings.Contains(string(backup), "\nExecStart=/usr/bin/zketcd-backup\n") {
		t.Errorf("the installed backup service does not run /usr/bin/zketcd-backup:\n%s", backup)
	}

	t.Run("systemd-analyze security", func(t *testing.T) {
		if _, err := exec.LookPath("systemd-analyze"); err != nil {
			t.Skip("no systemd-analyze")
		}
		for _, unit := range []string{"zketcd.service", "zketcd-backup.service"} {
			out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--no-pager",
				filepath.Join(dest, "usr/lib/systemd/system", unit)).CombinedOutput()
			m := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(unit) + `: (\d+\.\d+)`).FindSubmatch(out)
			if m == nil {
				if strings.Contains(string(out), "offline") {
					t.Skipf("systemd-analyze cannot rate a unit offline here: %v %s", err, out)
				}
				t.Fatalf("systemd-analyze security %s: %v\n%s", unit, err, out)
			}
			rating, _ := strconv.ParseFloat(string(m[1]), 64)
			t.Logf("systemd-analyze security rates %s %.1f", unit, rating)
			if rating > 2.5 {
				t.Errorf("%s is rated %.1f, want 2.5 or below:\n%s", unit, rating, out)
			}
		}
	})

	t.Run("systemd-sysusers", func(t *testing.T) {
		if _, err := exec.LookPath("systemd-sysusers"); err != nil {
			t.Skip("no systemd-sysusers")
		}
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"passwd", "group"} {
			if err := os.WriteFile(filepath.Join(root, "etc", f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := exec.Command("systemd-sysusers", "--root="+root, filepath.Join(dest, "usr/lib/sysusers.d/zketcd.conf")).CombinedOutput(); err != nil {
			t.Fatalf("systemd-sysusers: %v\n%s", err, out)
		}
		passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
		if !regexp.MustCompile(`(?m)^zketcd:x:\d+:\d+:[^:]*:/var/lib/zketcd:/usr/sbin/nologin$`).Match(passwd) {
			t.Errorf("no zketcd system user in %q", passwd)
		}
	})
}
