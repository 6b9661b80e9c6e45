package engine_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/embed/embedtest"
	"github.com/zketcd/zketcd/internal/engine"
	"github.com/zketcd/zketcd/internal/revision"
	"github.com/zketcd/zketcd/internal/testutil"
	"github.com/zketcd/zketcd/internal/zkstore"
)

func rawZK(t *testing.T) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{zkAddr(t)}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newerEntry is an intact log entry record of format byte f (as a newer
// zketcd would write one): a valid format-1 entry with its first byte
// replaced and its checksum recomputed.
func newerEntry(f byte) []byte {
	data := zkstore.EncodeEntry(&revision.Entry{Writer: revision.WriterTag{Nonce: 1, Seq: 1}})
	b := append([]byte{f}, data[1:len(data)-4]...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

func openBackend(t *testing.T, root string) (*engine.Engine, error) {
	t.Helper()
	lg := testutil.Logger(logrus.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := engine.Open(ctx, engine.Config{
		Store: zkstore.Config{Servers: []string{zkAddr(t)}, Root: root, Logger: lg},
		Name:  "format-test", Logger: lg,
	})
	if err == nil {
		t.Cleanup(b.Close)
	}
	return b, err
}

func wantNewerFormat(t *testing.T, err error, parts ...string) {
	t.Helper()
	if !errors.Is(err, zkstore.ErrNewerFormat) {
		t.Fatalf("err %v, want a newer-format refusal", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%q does not say %q", err, p)
		}
	}
}

// TestAnInstanceRefusesDataOfANewerFormatNamingTheVersions: a log entry of
// a newer format appearing under a running instance halts it (health,
// Status, every request), and an instance does not open a root whose log,
// base description or meta is of a newer format.
func TestAnInstanceRefusesDataOfANewerFormatNamingTheVersions(t *testing.T) {
	in := embedtest.Start(t, []string{zkAddr(t)}, embedtest.Options{})
	c := in.Client(t)
	ctx := testutil.Context(t, 30*time.Second)
	put, err := c.Put(ctx, "a", "1")
	if err != nil {
		t.Fatal(err)
	}
	if v := haltedGauge(t, in); v != 0 {
		t.Fatalf("zketcd_halted %v before any fault", v)
	}
	root := in.Root()
	raw := rawZK(t)

	// A newer zketcd appends an entry in a format this build does not read.
	lsn := in.Engine().State().LSN + 1
	head, _ := json.Marshal(map[string]int64{"lsn": lsn, "rev": put.Header.Revision + 1})
	if _, err := raw.Multi(
		&zk.CreateRequest{Path: fmt.Sprintf("%s/log/%010d/%020d", root, lsn>>14, lsn), Data: newerEntry(4), Acl: zk.WorldACL(zk.PermAll)},
		&zk.SetDataRequest{Path: root + "/head", Data: head, Version: -1},
	); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	testutil.Eventually(t, 20*time.Second, "halted by a newer entry", func() bool { return errors.Is(in.Engine().Health(), engine.ErrHalted) })
	t.Logf("halted %v after a format-4 entry appeared: %v", time.Since(written).Round(time.Millisecond), in.Engine().Health())
	wantNewerFormat(t, in.Engine().Health(), "log entry has format 4, newer than this zketcd reads (up to 3)", "upgrade this instance")
	if v := haltedGauge(t, in); v != 1 {
		t.Fatalf("zketcd_halted %v, want 1", v)
	}
	st, err := c.Status(ctx, in.Endpoint())
	if err != nil || !strings.Contains(strings.Join(st.Errors, " "), "format 4") {
		t.Fatalf("Status: %v %v", st, err)
	}
	if _, err := c.Get(ctx, "a", clientv3.WithSerializable()); !errors.Is(err, rpctypes.ErrCorrupt) {
		t.Fatalf("serializable get of a halted instance: %v", err)
	}
	if _, err := c.Put(ctx, "a", "2"); !errors.Is(err, rpctypes.ErrCorrupt) {
		t.Fatalf("put on a halted instance: %v", err)
	}
	in.Close()
	_, err = openBackend(t, root)
	wantNewerFormat(t, err, "log entry has format 4")

	// A base description of a newer format.
	if _, err := raw.Set(root+"/compact", []byte(`{"gen":0,"format":3}`), -1); err != nil {
		t.Fatal(err)
	}
	_, err = openBackend(t, root)
	wantNewerFormat(t, err, "base description "+root+"/compact has format 3, newer than this zketcd reads (up to 2)")

	// A root of a newer format.
	data, _, err := raw.Get(root + "/meta")
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	if err := json.Unmarshal(data, &meta); err != nil {
		t.Fatal(err)
	}
	meta["format"] = zkstore.MetaFormat + 1
	data, _ = json.Marshal(meta)
	if _, err := raw.Set(root+"/meta", data, -1); err != nil {
		t.Fatal(err)
	}
	_, err = openBackend(t, root)
	wantNewerFormat(t, err, "zketcd root "+root+" has format 4, newer than this zketcd reads (up to 3)")
}

// haltedGauge returns the instance's zketcd_halted.
func haltedGauge(t *testing.T, in *embedtest.Instance) float64 {
	t.Helper()
	mfs, err := in.Zketcd().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "zketcd_halted" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no zketcd_halted metric")
	return 0
}
