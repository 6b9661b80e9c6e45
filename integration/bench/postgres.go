package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// pgUser is the account PostgreSQL runs as when the harness runs as root
// (postgres refuses to): Debian's package creates it.
const pgUser = "postgres"

// pgBinDir returns the directory of PostgreSQL's server binaries: dir if
// set, else the newest /usr/lib/postgresql/*/bin (Debian's layout) that
// holds initdb and postgres.
func pgBinDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(found, func(i, j int) bool { // numeric: 9.6 < 15 < 16
		vi, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(found[i]))), 64)
		vj, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(found[j]))), 64)
		return vi < vj
	})
	for i := len(found) - 1; i >= 0; i-- {
		d := filepath.Dir(found[i])
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
}

// pgCredential returns the user PostgreSQL runs as: nil (the harness's
// own) unless the harness is root, then pgUser.
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(pgUser)
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL needs the %q user: %w", pgUser, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// postgres is a private PostgreSQL cluster: its own data directory, on a
// free 127.0.0.1 port, Debian's default settings (fsync on,
// synchronous_commit on), trust authentication on loopback.
type postgres struct {
	proc *process
	dir  string // data directory's parent, owned by the server's user
	port int
}

// dsn is kine's --endpoint for database db.
func (pg *postgres) dsn(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", pgUser, pg.port, db)
}

// startPostgres runs initdb in a fresh directory and starts the server
// (as pgUser when the harness is root), its log in logDir, and waits
// until it accepts connections.
func (e *Env) startPostgres(ctx context.Context, logDir string) (*postgres, error) {
	bin, err := pgBinDir(e.PGBinDir)
	if err != nil {
		return nil, err
	}
	cred, err := pgCredential()
	if err != nil {
		return nil, err
	}
	// Not under WorkDir: that is private to the harness's user.
	dir, err := os.MkdirTemp("", "zkbench-pg-")
	if err != nil {
		return nil, err
	}
	pg := &postgres{dir: dir}
	fail := func(err error) (*postgres, error) {
		if pg.proc != nil {
			_ = pg.proc.stop(10 * time.Second)
		}
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", pgUser,
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %w: %s", err, lastLine(string(out))))
	}
	if pg.port, err = freePort(); err != nil {
		return fail(err)
	}
	args := []string{"-D", data, "-c", "listen_addresses=127.0.0.1", "-p", strconv.Itoa(pg.port),
		"-c", "unix_socket_directories=" + dir}
	pg.proc, err = startProcessAs("postgres", dir, filepath.Join(logDir, "postgres.log"), filepath.Join(bin, "postgres"), args, nil, cred)
	if err != nil {
		return fail(err)
	}
	deadline := time.Now().Add(readyWithin)
	for {
		ready := exec.CommandContext(ctx, filepath.Join(bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(pg.port))
		if ready.Run() == nil {
			return pg, nil
		}
		switch {
		case pg.proc.exited():
			return fail(fmt.Errorf("postgres exited during start (%v): %s", pg.proc.err, pg.proc.logTail(5)))
		case ctx.Err() != nil:
			return fail(ctx.Err())
		case time.Now().After(deadline):
			return fail(fmt.Errorf("postgres not ready after %v: %s", readyWithin, pg.proc.logTail(5)))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StartKinePG starts a private PostgreSQL cluster and kine on it (kine
// creates its database), their logs in WorkDir/dir.
func (e *Env) StartKinePG(ctx context.Context, dir string) (*Target, error) {
	logDir, err := e.dir(dir)
	if err != nil {
		return nil, err
	}
	pg, err := e.startPostgres(ctx, logDir)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	stopPG := func() error {
		err := pg.proc.stop(30 * time.Second)
		return errors.Join(err, os.RemoveAll(pg.dir))
	}
	t, err := e.startKine(ctx, ServerKinePG, dir, []string{"--endpoint", pg.dsn("kine")})
	if err != nil {
		return nil, errors.Join(err, stopPG())
	}
	// Target.Stop stops kine first, then its helper PostgreSQL (a smart
	// shutdown waits for kine's connections), then removes the files.
	t.helpers = append(t.helpers, pg.proc)
	t.stopFn = func() error { return os.RemoveAll(pg.dir) }
	return t, nil
}
