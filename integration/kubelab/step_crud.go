package kubelab

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zketcd/zketcd/internal/rvmap"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// revRow is one line of the resourceVersion ↔ revision ↔ zxid table.
type revRow struct {
	object, op string
	rv         int64 // resourceVersion kube-apiserver answered
	etcdRev    int64 // the revision read with clientv3 from zketcd
}

func stepCRUD(ctx context.Context, x *Experiment, say func(string, ...any)) error {
	if err := x.needMain(); err != nil {
		return err
	}
	a, kv := x.API, x.KV
	var rows []revRow
	nsKey := "/registry/namespaces/" + x.NS
	cmPath := "/api/v1/namespaces/" + x.NS + "/configmaps"
	cmKey := "/registry/configmaps/" + x.NS + "/cm"

	// modRev checks that kube-apiserver's resourceVersion is the key's
	// mod_revision in zketcd.
	modRev := func(object, op, key string, o *Object) (*clientv3.GetResponse, error) {
		resp, err := kv.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) != 1 {
			return nil, fmt.Errorf("%s after %s: key %s not in zketcd", object, op, key)
		}
		if got := resp.Kvs[0].ModRevision; got != o.RV() {
			return nil, fmt.Errorf("%s after %s: resourceVersion %d, but mod_revision of %s in zketcd is %d", object, op, o.RV(), key, got)
		}
		rows = append(rows, revRow{object: object, op: op, rv: o.RV(), etcdRev: resp.Kvs[0].ModRevision})
		return resp, nil
	}

	ns, err := a.Create(ctx, "/api/v1/namespaces", Namespace(x.NS))
	if err != nil {
		return err
	}
	say("POST namespace %s -> 201, resourceVersion %s", x.NS, ns.Metadata.ResourceVersion)
	if _, err := modRev("namespace/"+x.NS, "create", nsKey, ns); err != nil {
		return err
	}
	cm, err := a.Create(ctx, cmPath, ConfigMap("cm", map[string]string{"a": "1"}))
	if err != nil {
		return err
	}
	say("POST configmap %s/cm -> 201, resourceVersion %s", x.NS, cm.Metadata.ResourceVersion)
	if _, err := modRev("configmap/"+x.NS+"/cm", "create", cmKey, cm); err != nil {
		return err
	}
	mp, err := a.MergePatch(ctx, cmPath+"/cm", map[string]any{"data": map[string]string{"b": "2"}})
	if err != nil {
		return err
	}
	say("PATCH (application/merge-patch+json) data.b=2 -> resourceVersion %s", mp.Metadata.ResourceVersion)
	if _, err := modRev("configmap/"+x.NS+"/cm", "merge patch", cmKey, mp); err != nil {
		return err
	}
	sp, err := a.StrategicPatch(ctx, cmPath+"/cm", map[string]any{"metadata": map[string]any{"labels": map[string]string{"tier": "e2e"}}})
	if err != nil {
		return err
	}
	say("PATCH (application/strategic-merge-patch+json) labels.tier=e2e -> resourceVersion %s", sp.Metadata.ResourceVersion)
	resp, err := modRev("configmap/"+x.NS+"/cm", "strategic merge patch", cmKey, sp)
	if err != nil {
		return err
	}
	if !(cm.RV() < mp.RV() && mp.RV() < sp.RV()) {
		return fmt.Errorf("resourceVersions not increasing: %d, %d, %d", cm.RV(), mp.RV(), sp.RV())
	}
	if k := resp.Kvs[0]; k.CreateRevision != cm.RV() || k.Version != 3 {
		return fmt.Errorf("%s: create_revision %d (want %d), version %d (want 3)", cmKey, k.CreateRevision, cm.RV(), k.Version)
	}

	got, err := a.Get(ctx, cmPath+"/cm")
	if err != nil {
		return err
	}
	if got.RV() != sp.RV() || got.Data["a"] != "1" || got.Data["b"] != "2" || got.Metadata.Labels["tier"] != "e2e" {
		return fmt.Errorf("GET configmap: resourceVersion %d data %v labels %v; want %d, a=1 b=2, tier=e2e", got.RV(), got.Data, got.Metadata.Labels, sp.RV())
	}
	say("GET configmap -> resourceVersion %d, data %v, labels %v", got.RV(), got.Data, got.Metadata.Labels)

	before, err := kv.Get(ctx, "/kubelab-probe")
	if err != nil {
		return err
	}
	list, err := a.List(ctx, cmPath)
	if err != nil {
		return err
	}
	after, err := kv.Get(ctx, "/kubelab-probe")
	if err != nil {
		return err
	}
	if len(list.Items) != 1 || list.Items[0].RV() != sp.RV() {
		return fmt.Errorf("LIST configmaps: %d items (want cm at %d)", len(list.Items), sp.RV())
	}
	if list.RV() < before.Header.Revision || list.RV() > after.Header.Revision {
		return fmt.Errorf("LIST resourceVersion %d is not the store revision: zketcd was at %d before and %d after",
			list.RV(), before.Header.Revision, after.Header.Revision)
	}
	say("LIST configmaps -> resourceVersion %d (zketcd's revision was %d just before and %d just after)",
		list.RV(), before.Header.Revision, after.Header.Revision)
	rows = append(rows, revRow{object: "configmaps in " + x.NS, op: "list", rv: list.RV()})

	del, err := a.Delete(ctx, cmPath+"/cm")
	if err != nil {
		return err
	}
	say("DELETE configmap -> 200 (%s)", del.Kind)
	if _, err := a.Get(ctx, cmPath+"/cm"); HTTPCode(err) != 404 {
		return fmt.Errorf("GET after DELETE: want 404, got %v", err)
	}
	if r, err := kv.Get(ctx, cmKey); err != nil || len(r.Kvs) != 0 {
		return fmt.Errorf("%s still in zketcd after DELETE (%v)", cmKey, err)
	}
	// The deletion's revision, from the store's history.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var delRev int64
	for wr := range kv.Watch(wctx, cmKey, clientv3.WithRev(sp.RV()+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) > 0 {
			if ev := wr.Events[0]; ev.Type == clientv3.EventTypeDelete {
				delRev = ev.Kv.ModRevision
			}
			break
		}
	}
	cancel()
	if delRev == 0 {
		return fmt.Errorf("no DELETE event for %s after revision %d", cmKey, sp.RV())
	}
	say("GET after DELETE -> 404; the deletion is revision %d in zketcd", delRev)
	rows = append(rows, revRow{object: "configmap/" + x.NS + "/cm", op: "delete", rv: 0, etcdRev: delRev})

	return mapRevisions(ctx, x, rows, nsKey, say)
}

// quietStoreConfig is a zkstore configuration with the lab's ZooKeeper
// identity that logs nothing.
func quietStoreConfig(l *Lab, servers []string, root string) (zkstore.Config, error) {
	sec, err := l.Security()
	if err != nil {
		return zkstore.Config{}, err
	}
	id, err := sec.ZKIdentity()
	if err != nil {
		return zkstore.Config{}, err
	}
	return zkstore.Config{Servers: servers, Root: root, Auth: []string{id}, Logger: zkLogger(io.Discard)}, nil
}

// mapRevisions maps every row to the log entry and zxid that made it,
// checks the zxid against ZooKeeper's own stat of that entry, prints the
// table, and shows `zketcd rv` on the same revisions.
func mapRevisions(ctx context.Context, x *Experiment, rows []revRow, key string, say func(string, ...any)) error {
	cfg, err := quietStoreConfig(x.Lab, []string{x.ZK.Addr()}, x.root())
	if err != nil {
		return err
	}
	st, err := zkstore.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	ix, err := rvmap.Load(ctx, st)
	if err != nil {
		return err
	}
	var tbl strings.Builder
	fmt.Fprintf(&tbl, "%-26s %-22s %15s %13s %9s %-12s %s\n", "object", "operation", "resourceVersion", "etcd revision", "log entry", "zxid", "epoch:counter")
	var revs []string
	var prevZxid int64
	for _, r := range rows {
		rev := r.etcdRev
		if rev == 0 {
			rev = r.rv
		}
		m := ix.Revision(rev)
		if !m.Found {
			return fmt.Errorf("revision %d (%s %s) is not in the log of %s", rev, r.op, r.object, x.root())
		}
		zx, err := st.EntryZxid(m.LSN)
		if err != nil {
			return err
		}
		if zx != m.Zxid {
			return fmt.Errorf("revision %d: log entry %d has czxid 0x%x in ZooKeeper, the replay says 0x%x", rev, m.LSN, zx, m.Zxid)
		}
		if m.Zxid < prevZxid && r.op != "list" {
			return fmt.Errorf("zxids out of revision order at revision %d", rev)
		}
		prevZxid = m.Zxid
		rvs, ers := "-", "-"
		if r.rv != 0 {
			rvs = strconv.FormatInt(r.rv, 10)
		}
		if r.etcdRev != 0 {
			ers = strconv.FormatInt(r.etcdRev, 10)
		}
		fmt.Fprintf(&tbl, "%-26s %-22s %15s %13s %9d %-12s %d:%d\n", r.object, r.op, rvs, ers, m.LSN,
			fmt.Sprintf("0x%x", m.Zxid), m.Zxid>>32, m.Zxid&0xffffffff)
		revs = append(revs, "--revision", strconv.FormatInt(rev, 10))
	}
	say("resourceVersion = zketcd revision = the ZooKeeper transaction (zxid) that created the log entry holding it\n"+
		"(zxid checked against ZooKeeper's stat of %s/log/.../<entry>):\n%s", x.root(), indent(tbl.String(), "    "))
	k := ix.Key(key)
	if !k.Found || ix.Revision(k.CreateRevision).Zxid != k.CreateZxid {
		return fmt.Errorf("%s: czxid %s does not match revision %d's zxid", key, rvmap.ZxidString(k.CreateZxid), k.CreateRevision)
	}

	args := append([]string{"rv", "--zk", x.ZK.Addr(), "--zk-root", x.root(), "--zk-auth-file", x.Zketcd.Security().ZKAuthFile, key}, revs...)
	out, err := exec.CommandContext(ctx, x.Lab.Zketcd, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("zketcd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	say("$ zketcd %s\n%s", strings.Join(args, " "), indent(string(out), "    "))
	if !strings.Contains(string(out), rvmap.ZxidString(k.CreateZxid)) {
		return fmt.Errorf("zketcd rv does not show %s", rvmap.ZxidString(k.CreateZxid))
	}
	x.Note("resourceVersion -> zxid: %d objects/operations mapped, each checked against ZooKeeper's stat", len(rows))
	return nil
}
