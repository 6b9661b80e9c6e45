package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var serverColors = map[string]color.Color{
	ServerEtcd: color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	ServerKine: color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	ServerZK1:  color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	ServerZK3:  color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
}

var serverShapes = map[string]draw.GlyphDrawer{
	ServerEtcd: draw.CircleGlyph{},
	ServerKine: draw.SquareGlyph{},
	ServerZK1:  draw.TriangleGlyph{},
	ServerZK3:  draw.CrossGlyph{},
}

// writePlots writes the PNG plots into dir and returns them.
func (r *Report) writePlots(dir string) ([]plotFile, error) {
	var out []plotFile
	for _, w := range AllWorkloads {
		f, err := r.throughputPlot(dir, w)
		if err != nil {
			return out, err
		}
		if f.file != "" {
			out = append(out, f)
		}
	}
	for _, c := range cdfCells {
		f, err := r.cdfPlot(dir, c.workload, c.clients)
		if err != nil {
			return out, err
		}
		if f.file != "" {
			out = append(out, f)
		}
	}
	return out, nil
}

func (r *Report) throughputPlot(dir, workload string) (plotFile, error) {
	p := plot.New()
	p.Title.Text = "throughput vs clients: " + workload
	p.X.Label.Text = "clients"
	p.Y.Label.Text = "ops/s"
	p.X.Scale = plot.LogScale{}
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var ticks plot.ConstantTicks
	seenTick := map[int]bool{}
	lines := 0
	for _, s := range StandaloneServers {
		var xys plotter.XYs
		for _, c := range r.cells([]string{workload}) {
			n, _ := strconv.Atoi(c[1])
			if !seenTick[n] {
				seenTick[n] = true
				ticks = append(ticks, plot.Tick{Value: float64(n), Label: c[1]})
			}
			if x := r.find(s, workload, n); ok(x) {
				xys = append(xys, plotter.XY{X: float64(n), Y: x.Throughput})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return plotFile{}, err
		}
		l.Color = serverColors[s]
		l.Width = vg.Points(1.5)
		pts.Color = serverColors[s]
		pts.Shape = serverShapes[s]
		pts.Radius = vg.Points(3)
		p.Add(l, pts)
		p.Legend.Add(ServerLabel(s), l, pts)
		lines++
	}
	if lines == 0 {
		return plotFile{}, nil
	}
	p.X.Tick.Marker = ticks
	if len(ticks) > 0 {
		p.X.Min, p.X.Max = ticks[0].Value*0.8, ticks[len(ticks)-1].Value*1.25
		for _, t := range ticks {
			p.X.Min = math.Min(p.X.Min, t.Value*0.8)
			p.X.Max = math.Max(p.X.Max, t.Value*1.25)
		}
	}
	name := "throughput-" + workload + ".png"
	if err := p.Save(6*vg.Inch, 3.6*vg.Inch, filepath.Join(dir, name)); err != nil {
		return plotFile{}, err
	}
	return plotFile{title: "throughput vs clients, " + workload, file: name}, nil
}

// cdfPlot plots the latency CDF of workload at clients concurrency for
// every server.
func (r *Report) cdfPlot(dir, workload string, clients int) (plotFile, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("latency CDF: %s, %d clients", workload, clients)
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = latencyTicks{}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	lines := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range StandaloneServers {
		x := r.find(s, workload, clients)
		if !ok(x) {
			continue
		}
		pts := x.Samples()
		if len(pts) == 0 {
			pts = x.CDF
		}
		if len(pts) == 0 {
			continue
		}
		xys := cdfPoints(pts, 1000)
		for _, p := range xys {
			lo, hi = math.Min(lo, p.X), math.Max(hi, p.X)
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return plotFile{}, err
		}
		l.Color = serverColors[s]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (p99 %s ms)", ServerLabel(s), fmtMs(x.P99Ms)), l)
		lines++
	}
	if lines == 0 {
		return plotFile{}, nil
	}
	// Set the range: a log axis cannot pad a single value down to 0.
	p.X.Min, p.X.Max = lo*0.8, hi*1.25
	name := fmt.Sprintf("cdf-%s-%d.png", workload, clients)
	if err := p.Save(6*vg.Inch, 3.6*vg.Inch, filepath.Join(dir, name)); err != nil {
		return plotFile{}, err
	}
	return plotFile{title: fmt.Sprintf("latency CDF, %s, %d clients", workload, clients), file: name}, nil
}

// cdfCells are the cells whose latency CDF is plotted (and kept in the
// JSON).
var cdfCells = []struct {
	workload string
	clients  int
}{{WPutSeq, 16}, {WPutRand, 16}}

// keepCDF stores the quantiles of the CDF cells in r.
func keepCDF(r *Result) {
	for _, c := range cdfCells {
		if r.Workload == c.workload && r.Clients == c.clients {
			r.CDF = quantiles(r.samples, 500)
		}
	}
}

// cdfPoints returns at most n+1 points of the empirical CDF of sorted
// (positive) samples, always including the maximum.
func cdfPoints(sorted []float64, n int) plotter.XYs {
	var xys plotter.XYs
	step := max(1, len(sorted)/n)
	for i := 0; i < len(sorted); i += step {
		v := math.Max(sorted[i], 1e-3)
		xys = append(xys, plotter.XY{X: v, Y: float64(i+1) / float64(len(sorted))})
	}
	last := sorted[len(sorted)-1]
	xys = append(xys, plotter.XY{X: math.Max(last, 1e-3), Y: 1})
	return xys
}

// latencyTicks labels a logarithmic millisecond axis at 1-2-5 steps.
type latencyTicks struct{}

func (latencyTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for dec := 1e-3; dec <= 1e5; dec *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := dec * m
			if v < lo || v > hi {
				continue
			}
			ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
		}
		for m := 3.0; m < 10; m++ {
			if v := dec * m; m != 5 && v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v}) // minor tick
			}
		}
	}
	return ts
}
