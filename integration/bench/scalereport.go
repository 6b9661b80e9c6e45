package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func quietLogger() *logrus.Logger {
	lg := logrus.New()
	lg.SetOutput(io.Discard)
	return lg
}

// scaleMeasure is one row of the scale tables: a measure of each stack.
type scaleMeasure struct {
	label string
	key   string // ScaleRow.M key; "data" for DataBytes
	unit  string // "s", "MB", "/s", "ms", "x"
	// lowerBetter says which way the zketcd/etcd ratio is good.
	lowerBetter bool
}

var scaleMeasures = []scaleMeasure{
	{"load, objects/s (64 clients, create transactions)", "load_objects_per_s", "/s", false},
	{"load, MB/s of keys and values", "load_mb_per_s", "/s", false},
	{"RSS after load: the API processes (zketcd instance / etcd's 3 members)", "rss_load_api_mb", "MB", true},
	{"RSS after load: ZooKeeper's 3 JVMs", "rss_load_zk_mb", "MB", true},
	{"RSS after load: the whole stack", "rss_load_total_mb", "MB", true},
	{"ZooKeeper's zk_approximate_data_size after load", "zk_data_load_mb", "MB", true},
	{"disk after load, all members", "disk_load_mb", "MB", true},
	{"paginated LIST of everything (500 a page, one revision)", "list_s", "s", true},
	{"watch from before the load catching up with every object", "watch_catchup_s", "s", true},
	{"10% of the objects written again", "update_s", "s", true},
	{"compaction --physical to the head", "compact_s", "s", true},
	{"peak RSS during compaction: API processes", "compact_peak_api_mb", "MB", true},
	{"peak RSS during compaction: the whole stack", "compact_peak_total_mb", "MB", true},
	{"write p99 before compaction", "write_p99_before_ms", "ms", true},
	{"write p99 during compaction", "write_p99_during_ms", "ms", true},
	{"linearizable read p99 before compaction", "read_p99_before_ms", "ms", true},
	{"linearizable read p99 during compaction", "read_p99_during_ms", "ms", true},
	{"RSS after compaction: API processes", "rss_compact_api_mb", "MB", true},
	{"RSS after compaction: ZooKeeper's 3 JVMs", "rss_compact_zk_mb", "MB", true},
	{"RSS after compaction: the whole stack", "rss_compact_total_mb", "MB", true},
	{"ZooKeeper's data size after compaction", "zk_data_compact_mb", "MB", true},
	{"10% written again, then a second compaction --physical (the steady state)", "second_compact_s", "s", true},
	{"write p99 before the second compaction", "second_write_p99_before_ms", "ms", true},
	{"write p99 during the second compaction", "second_write_p99_during_ms", "ms", true},
	{"linearizable read p99 before the second compaction", "second_read_p99_before_ms", "ms", true},
	{"linearizable read p99 during the second compaction", "second_read_p99_during_ms", "ms", true},
	{"RSS after the second compaction: API processes", "rss_compact2_api_mb", "MB", true},
	{"RSS after the second compaction: the whole stack", "rss_compact2_total_mb", "MB", true},
	{"ZooKeeper's data size after the second compaction", "zk_data_compact2_mb", "MB", true},
	{"half the objects written again, then a third compaction --physical (zketcd: a whole base)", "third_compact_s", "s", true},
	{"write p99 before the third compaction", "third_write_p99_before_ms", "ms", true},
	{"write p99 during the third compaction", "third_write_p99_during_ms", "ms", true},
	{"linearizable read p99 before the third compaction", "third_read_p99_before_ms", "ms", true},
	{"linearizable read p99 during the third compaction", "third_read_p99_during_ms", "ms", true},
	{"peak RSS during the third compaction: API processes", "third_compact_peak_api_mb", "MB", true},
	{"RSS after the third compaction: API processes", "rss_compact3_api_mb", "MB", true},
	{"RSS after the third compaction: the whole stack", "rss_compact3_total_mb", "MB", true},
	{"ZooKeeper's data size after the third compaction", "zk_data_compact3_mb", "MB", true},
	{"defragment (every member)", "defrag_s", "s", true},
	{"RSS after defragment: the whole stack", "rss_defrag_total_mb", "MB", true},
	{"ZooKeeper's data size after defragment", "zk_data_defrag_mb", "MB", true},
	{"disk after defragment, all members", "disk_defrag_mb", "MB", true},
	{"one instance (member) restart (the median), until a linearizable count sees every key", "restart_one_s", "s", true},
	{"RSS of the restarted instance (member)", "rss_restart_api_mb", "MB", true},
	{"the whole ensemble (cluster) restarted, until zketcd (etcd) serves every key", "restart_all_s", "s", true},
	{"kube-apiserver ready over the objects present (its watch cache loaded)", "kube_ready_s", "s", true},
	{"kube-apiserver: 10,000 creates (16 clients), objects/s", "kube_load_per_s", "/s", false},
	{"kube-apiserver: 10,000 creates, p99", "kube_load_p99_ms", "ms", true},
}

func fmtScale(v float64, unit string) string {
	switch unit {
	case "s":
		if v < 10 {
			return fmt.Sprintf("%.2f s", v)
		}
		return fmt.Sprintf("%.1f s", v)
	case "MB":
		return fmt.Sprintf("%s MB", fmtNum(v))
	case "ms":
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmtNum(v)
}

// Markdown renders the scale section: setup, the mix, a table per size
// (zketcd, etcd, ratio), the per-object shape across sizes, the targets,
// and the plots.
func (r *ScaleReport) Markdown(rel string, plots []plotFile) string {
	var b strings.Builder
	b.WriteString("## Kubernetes-sized data (scale benchmark)\n\n")
	fmt.Fprintf(&b, "Generated by `make bench-scale` (`zkbench -scale`) on %s, %s (%d CPUs), load average %s at the start. "+
		"A 3-member etcd 3.7.3 against one zketcd instance on a 3-member ZooKeeper 3.8.0 "+
		"(each JVM `-Xmx%s`, starting small; zketcd told so with `--zk-heap-bytes`), both with `--quota-backend-bytes` 16 GiB, one stack at a time on the same machine, "+
		"loaded with kube-like objects by %d clients, each object created by a transaction as kube-apiserver creates it. "+
		"The measured turns took %.0f min in all.\n\n",
		r.Date, r.Machine.CPUModel, r.Machine.NProc, fmtLoad(r.Machine.LoadStart), r.ZKHeap, r.Clients, r.Elapsed/60)
	r.writeProvenance(&b)
	b.WriteString("The objects (integration/kubedata, seeded, so every run writes the same bytes): real Kubernetes objects built with " +
		"k8s.io/api and serialized by apimachinery's own protobuf serializer into kube-apiserver's storage envelope, and one custom " +
		"resource kind as JSON, under the keys kube-apiserver uses (`/registry/<resource>/<namespace>/<name>`):\n\n")
	mdHeader(&b, "kind", "share", "mean size", "encoding")
	var mean float64
	for _, m := range r.Mix {
		mdRow(&b, m.Kind, fmt.Sprintf("%.0f%%", 100*m.Share), fmt.Sprintf("%.0f B", m.MeanBytes), m.Encoding)
		mean += m.Share * m.MeanBytes
	}
	fmt.Fprintf(&b, "\nMean value %.0f B. The shares follow what large clusters hold: pods and events dominate, a lease per node, "+
		"endpoint slices per service, secrets with random bytes (keys and tokens do not compress), a few ConfigMaps of 40–100 KiB.\n\n", mean)

	for _, n := range r.sizes() {
		z, e := r.row(ScaleZketcd, n), r.row(ScaleEtcd, n)
		data := 0.0
		for _, x := range []*ScaleRow{z, e} {
			if x != nil && x.DataBytes > 0 {
				data = mb(x.DataBytes)
			}
		}
		fmt.Fprintf(&b, "### %s objects (%s MB of keys and values)\n\n", fmtNum(float64(n)), fmtNum(data))
		mdHeader(&b, "measure", "zketcd", "etcd, 3 members", "zketcd / etcd")
		for _, m := range scaleMeasures {
			zv, zok := z.get(m.key)
			ev, eok := e.get(m.key)
			if !zok && !eok {
				continue
			}
			cell := func(v float64, ok bool) string {
				if !ok {
					return "—"
				}
				return fmtScale(v, m.unit)
			}
			ratio := "—"
			if zok && eok && ev > 0 {
				ratio = fmtRatio(zv / ev)
			}
			mdRow(&b, m.label, cell(zv, zok), cell(ev, eok), ratio)
		}
		b.WriteString("\nThe machine's load average (1 min) at the start and end of each stack's turn:")
		for _, x := range []*ScaleRow{z, e} {
			if x != nil {
				fmt.Fprintf(&b, " %s %.1f → %.1f;", x.Stack, x.Load[0][0], x.Load[1][0])
			}
		}
		b.WriteString("\n")
		for _, x := range []*ScaleRow{z, e} {
			if x == nil {
				continue
			}
			for _, note := range x.Notes {
				fmt.Fprintf(&b, "\n%s: %s\n", x.Stack, oneLine(note))
			}
			for _, err := range x.Errors {
				fmt.Fprintf(&b, "\n%s stopped: %s\n", x.Stack, oneLine(err))
			}
		}
		b.WriteString("\n")
		if z != nil {
			if ram, ok := z.get("rss_load_api_mb"); ok && z.DataBytes > 0 {
				fmt.Fprintf(&b, "zketcd instance RSS per byte held: %.2f after load", ram/mb(z.DataBytes))
				if v, ok := z.get("rss_compact_api_mb"); ok {
					fmt.Fprintf(&b, ", %.2f after compaction", v/mb(z.DataBytes))
				}
				if v, ok := z.get("zk_data_load_mb"); ok && v > 0 {
					fmt.Fprintf(&b, "; ZooKeeper holds %.2f bytes per byte of data after load", v/mb(z.DataBytes))
				}
				if v, ok := z.get("rss_load_zk_mb"); ok {
					fmt.Fprintf(&b, ", its 3 JVMs %.2f bytes of RSS", v/mb(z.DataBytes))
				}
				b.WriteString(".\n\n")
			}
		}
	}
	r.writeShape(&b)
	r.writeTargets(&b)
	for _, p := range plots {
		fmt.Fprintf(&b, "![%s](%s)\n\n", p.title, filepath.ToSlash(filepath.Join(rel, p.file)))
	}
	return b.String()
}

// writeShape tables the cost per object of each step at each size, and
// its growth from the smallest to the largest size (1.0: linear).
func (r *ScaleReport) writeShape(b *strings.Builder) {
	sizes := r.sizes()
	if len(sizes) < 2 {
		return
	}
	b.WriteString("### Cost against size\n\n")
	b.WriteString("Each cell is the cost per 100,000 objects; the last column divides the largest size's by the smallest's " +
		"(1.00: the step grows linearly; above 1.2 it grows worse than linearly).\n\n")
	hdr := []string{"step", "stack"}
	for _, n := range sizes {
		hdr = append(hdr, fmtNum(float64(n)))
	}
	hdr = append(hdr, "growth")
	mdHeader(b, hdr...)
	steps := []scaleMeasure{
		{"load (s)", "load_s", "s", true},
		{"LIST (s)", "list_s", "s", true},
		{"watch catch-up (s)", "watch_catchup_s", "s", true},
		{"compaction (s)", "compact_s", "s", true},
		{"second compaction (s)", "second_compact_s", "s", true},
		{"third compaction (s)", "third_compact_s", "s", true},
		{"instance restart (s)", "restart_one_s", "s", true},
		{"ensemble restart (s)", "restart_all_s", "s", true},
		{"RSS after load, API (MB)", "rss_load_api_mb", "MB", true},
		{"RSS after load, stack (MB)", "rss_load_total_mb", "MB", true},
		{"disk after load (MB)", "disk_load_mb", "MB", true},
	}
	for _, st := range steps {
		for _, stack := range []string{ScaleZketcd, ScaleEtcd} {
			cells := []string{st.label, stack}
			var first, last float64
			for _, n := range sizes {
				v, ok := r.row(stack, n).get(st.key)
				if !ok {
					cells = append(cells, "—")
					continue
				}
				per := v / (float64(n) / 100000)
				if first == 0 {
					first = per
				}
				last = per
				if per >= 100 {
					cells = append(cells, fmtNum(math.Round(per)))
				} else {
					cells = append(cells, fmt.Sprintf("%.3g", per))
				}
			}
			growth := "—"
			if first > 0 && last > 0 {
				growth = fmt.Sprintf("%.2f", last/first)
			}
			mdRow(b, append(cells, growth)...)
		}
	}
	b.WriteString("\n")
}

// writeTargets checks issue 22's targets at each size.
func (r *ScaleReport) writeTargets(b *strings.Builder) {
	b.WriteString("### Targets\n\n")
	mdHeader(b, "target", "size", "measured", "met")
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	for _, n := range r.sizes() {
		z, e := r.row(ScaleZketcd, n), r.row(ScaleEtcd, n)
		if z == nil {
			continue
		}
		data := mb(z.DataBytes)
		for _, k := range []string{"rss_load_api_mb", "rss_compact_api_mb"} {
			if v, ok := z.get(k); ok && data > 0 {
				what := "instance RSS ≤ 1.2× the data it holds, after load"
				if k == "rss_compact_api_mb" {
					what = "instance RSS ≤ 1.2× the data it holds, after compaction"
				}
				mdRow(b, what, fmtNum(float64(n)), fmt.Sprintf("%.2f×", v/data), yes(v/data <= 1.2))
			}
		}
		if e == nil {
			continue
		}
		zt, zok := z.get("rss_compact_total_mb")
		et, eok := e.get("rss_compact_total_mb")
		if zok && eok && et > 0 {
			mdRow(b, "whole stack RSS ≤ 1.5× etcd's three members (after compaction)", fmtNum(float64(n)), fmt.Sprintf("%.2f×", zt/et), yes(zt/et <= 1.5))
		}
		for _, c := range []struct{ prefix, what string }{{"", "physical compaction"}, {"second_", "second physical compaction (steady state)"}, {"third_", "third physical compaction (half the objects rewritten)"}} {
			zc, zok := z.get(c.prefix + "compact_s")
			ec, eok := e.get(c.prefix + "compact_s")
			if zok && eok && ec > 0 {
				mdRow(b, c.what+" ≤ etcd's time", fmtNum(float64(n)), fmt.Sprintf("%.2f×", zc/ec), yes(zc <= ec))
			}
			for _, k := range []string{"write", "read"} {
				before, ok1 := z.get(c.prefix + k + "_p99_before_ms")
				during, ok2 := z.get(c.prefix + k + "_p99_during_ms")
				if ok1 && ok2 && before > 0 {
					mdRow(b, k+" p99 during the "+c.what+" ≤ 2× outside it", fmtNum(float64(n)), fmt.Sprintf("%.2f×", during/before), yes(during <= 2*before))
				}
			}
		}
		for _, m := range []scaleMeasure{
			{"load no slower than etcd", "load_objects_per_s", "", false},
			{"LIST no slower than etcd", "list_s", "", true},
			{"watch catch-up no slower than etcd", "watch_catchup_s", "", true},
			{"instance restart no slower than etcd's member restart", "restart_one_s", "", true},
		} {
			zv, ok1 := z.get(m.key)
			ev, ok2 := e.get(m.key)
			if !ok1 || !ok2 || ev == 0 {
				continue
			}
			ratio := zv / ev
			met := ratio <= 1
			if !m.lowerBetter {
				met = ratio >= 1
			}
			mdRow(b, m.label, fmtNum(float64(n)), fmt.Sprintf("%.2f× etcd's", ratio), yes(met))
		}
	}
	b.WriteString("\nWhere a target is missed, docs/bench/analysis.md gives the bound measured.\n\n")
}

// writePlots draws memory and time against size.
func (r *ScaleReport) writePlots(dir string) ([]plotFile, error) {
	if len(r.sizes()) < 2 {
		return nil, nil
	}
	var out []plotFile
	for _, pl := range []struct {
		file, title, ylabel string
		keys                []string
	}{
		{"scale-memory.png", "RSS after load against objects", "MB", []string{"rss_load_api_mb", "rss_load_zk_mb", "rss_compact_total_mb"}},
		{"scale-time.png", "time of each step against objects", "s", []string{"load_s", "list_s", "watch_catchup_s", "compact_s", "restart_one_s", "restart_all_s"}},
	} {
		p := plot.New()
		p.Title.Text = pl.title
		p.X.Label.Text = "objects"
		p.Y.Label.Text = pl.ylabel
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		lines := 0
		for si, stack := range []string{ScaleZketcd, ScaleEtcd} {
			for ki, k := range pl.keys {
				var xys plotter.XYs
				for _, n := range r.sizes() {
					if v, ok := r.row(stack, n).get(k); ok && v > 0 {
						xys = append(xys, plotter.XY{X: float64(n), Y: v})
					}
				}
				if len(xys) < 2 || (stack == ScaleEtcd && strings.Contains(k, "_zk_")) {
					continue
				}
				l, pts, err := plotter.NewLinePoints(xys)
				if err != nil {
					return nil, err
				}
				c := plotutilColor(ki)
				l.Color, pts.Color = c, c
				if si == 1 {
					l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				}
				p.Add(l, pts)
				p.Legend.Add(stack+" "+k, l)
				lines++
			}
		}
		if lines == 0 {
			continue
		}
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, pl.file)); err != nil {
			return nil, err
		}
		out = append(out, plotFile{title: pl.title, file: pl.file})
	}
	return out, nil
}

func plotutilColor(i int) color.Color {
	palette := []color.RGBA{{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
		{0xd6, 0x27, 0x28, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}}
	return palette[i%len(palette)]
}

// writeProvenance says which run measured which rows, when the report
// holds rows of more than one (a run replaces only the sizes and stacks it
// measures): the figures of different runs compare different builds and
// machine states.
func (r *ScaleReport) writeProvenance(b *strings.Builder) {
	var runs []string
	cells := map[string][]string{}
	for _, row := range r.Rows {
		m := row.Measured
		if m == "" {
			m = "an earlier run that did not record its build"
		}
		if _, ok := cells[m]; !ok {
			runs = append(runs, m)
		}
		cells[m] = append(cells[m], fmt.Sprintf("%s at %s", row.Stack, fmtNum(float64(row.Objects))))
	}
	if len(runs) < 2 {
		return
	}
	b.WriteString("The rows come from more than one run; compare figures within a run:\n\n")
	for _, m := range runs {
		fmt.Fprintf(b, "- %s: %s\n", m, strings.Join(cells[m], ", "))
	}
	b.WriteString("\n")
}
