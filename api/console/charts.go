package console

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
)

// Server-rendered SVG charts. Every chart with nothing to show renders the
// "no data in this window" message (data-testid="no-data") instead of
// axes, never a made-up chart.

var esc = template.HTMLEscapeString

// palette colours series and segments, in order.
var palette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// noData is the message a chart shows when it has nothing to draw.
func noData(testid, what string) template.HTML {
	return template.HTML(fmt.Sprintf(`<p class="no-data" data-testid="no-data" data-chart="%s">No data in this window: %s.</p>`, esc(testid), esc(what)))
}

// histSeries is one series of a wait histogram.
type histSeries struct {
	Label string
	Bins  []queuereport.HistogramBin
}

func binLabel(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 60:
		return fmt.Sprintf("%gs", s)
	case s < 3600:
		return fmt.Sprintf("%gm", s/60)
	}
	return fmt.Sprintf("%gh", s/3600)
}

// histogramSVG draws the series' bins as bars side by side per bin, with the
// objective (seconds; 0: none) as a vertical dashed line inside the bin
// that holds it. testid is the chart's data-testid.
func histogramSVG(testid, title string, series []histSeries, objectiveS float64) template.HTML {
	total, nbins, maxC := 0, 0, 0
	for _, s := range series {
		nbins = max(nbins, len(s.Bins))
		for _, b := range s.Bins {
			total += b.Count
			maxC = max(maxC, b.Count)
		}
	}
	if total == 0 || nbins == 0 {
		return noData(testid, title+": no job started after waiting")
	}
	const w, h, left, bottom, top = 720.0, 240.0, 44.0, 36.0, 24.0
	plotW, plotH := w-left-10, h-bottom-top
	bw := plotW / float64(nbins)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" data-testid="%s" role="img" viewBox="0 0 %g %g" xmlns="http://www.w3.org/2000/svg"><title>%s</title>`,
		esc(testid), w, h, esc(title))
	fmt.Fprintf(&b, `<text x="%g" y="14" class="chart-title">%s</text>`, left, esc(title))
	step := (maxC + 3) / 4 // whole-number ticks: 0, step, …, 4·step ≥ maxC
	maxC = 4 * step
	for i := 0; i <= 4; i++ {
		y := top + plotH - plotH*float64(i)/4
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#ddd"/><text x="%g" y="%g" class="axis" text-anchor="end">%d</text>`,
			left, y, w-10, y, left-4, y+4, i*step)
	}
	sw := (bw - 4) / float64(len(series))
	for si, s := range series {
		for i, bin := range s.Bins {
			if bin.Count == 0 {
				continue
			}
			bh := plotH * float64(bin.Count) / float64(maxC)
			x := left + float64(i)*bw + 2 + float64(si)*sw
			fmt.Fprintf(&b, `<rect data-series="%d" data-bin="%d" data-count="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %d waits in [%s, %s)</title></rect>`,
				si, i, bin.Count, x, top+plotH-bh, sw, bh, palette[si%len(palette)], esc(s.Label), bin.Count, binLabel(bin.LowS), highLabel(bin.HighS))
		}
	}
	axis := series[0].Bins // the bins of a series that has them (all share WaitHistogramEdges)
	for _, s := range series {
		if len(s.Bins) > len(axis) {
			axis = s.Bins
		}
	}
	if len(axis) > 0 {
		for i, bin := range axis {
			if i%2 == 0 || nbins <= 10 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%g" class="axis">%s</text>`, left+float64(i)*bw+1, top+plotH+14, binLabel(bin.LowS))
			}
		}
		if x, ok := objectiveX(axis, objectiveS, left, bw); ok {
			fmt.Fprintf(&b, `<line data-testid="objective-marker" x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#c00" stroke-width="2" stroke-dasharray="5,3"/><text x="%.1f" y="%g" class="axis objective">objective %s</text>`,
				x, top-4, x, top+plotH, x+3, top+6, esc(fmtDur(objectiveS)))
		}
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" class="axis">wait (initial waits ended by a start)</text>`, left, h-4)
	b.WriteString(`</svg>`)
	if len(series) > 1 {
		b.WriteString(`<p class="legend">`)
		for si, s := range series {
			fmt.Fprintf(&b, `<span class="swatch sw%d"></span>%s `, si, esc(s.Label))
		}
		b.WriteString(`</p>`)
	}
	return template.HTML(b.String())
}

func highLabel(h *float64) string {
	if h == nil {
		return "∞"
	}
	return binLabel(*h)
}

// objectiveX places objective seconds on the bin axis: inside its bin,
// linearly between the bin's edges (the open last bin: at its start).
func objectiveX(bins []queuereport.HistogramBin, objective, left, bw float64) (float64, bool) {
	if objective <= 0 {
		return 0, false
	}
	for i, bin := range bins {
		if objective < bin.LowS {
			continue
		}
		if bin.HighS == nil {
			return left + float64(i)*bw, true
		}
		if objective < *bin.HighS {
			return left + (float64(i)+(objective-bin.LowS)/(*bin.HighS-bin.LowS))*bw, true
		}
	}
	return 0, false
}

// shareSegment is one part of a stacked share bar.
type shareSegment struct {
	Label string
	Share float64 // 0..1
}

// shareBarSVG draws segments as one stacked horizontal bar with a legend.
func shareBarSVG(testid, title string, segs []shareSegment) template.HTML {
	sum := 0.0
	for _, s := range segs {
		sum += s.Share
	}
	if sum <= 0 {
		return noData(testid, title+": no job waited")
	}
	const w, barH = 720.0, 28.0
	rows := (len(segs) + 2) / 3
	h := 22 + barH + 8 + float64(rows)*18
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" data-testid="%s" role="img" viewBox="0 0 %g %g" xmlns="http://www.w3.org/2000/svg"><title>%s</title>`, esc(testid), w, h, esc(title))
	fmt.Fprintf(&b, `<text x="4" y="14" class="chart-title">%s</text>`, esc(title))
	x := 4.0
	for i, s := range segs {
		sw := (w - 8) * s.Share / sum
		if sw <= 0 {
			continue
		}
		fmt.Fprintf(&b, `<rect data-segment="%s" x="%.1f" y="20" width="%.1f" height="%g" fill="%s"><title>%s %.1f %%</title></rect>`,
			esc(s.Label), x, sw, barH, palette[i%len(palette)], esc(s.Label), s.Share*100)
		x += sw
	}
	for i, s := range segs {
		lx, ly := 4+float64(i%3)*240, 22+barH+18+float64(i/3)*18
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="10" height="10" fill="%s"/><text x="%g" y="%g" class="axis">%s %.1f %%</text>`,
			lx, ly-9, palette[i%len(palette)], lx+14, ly, esc(s.Label), s.Share*100)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// span is an interval on a timeline lane; mark a point.
type span struct {
	From, To time.Time
	Label    string
	Colour   int // palette index
}

type mark struct {
	At    time.Time
	Label string
}

// lane is one row of a timeline.
type lane struct {
	Label string
	Spans []span
	Marks []mark
}

// timelineSVG draws lanes over [from, to].
func timelineSVG(testid, title string, lanes []lane) template.HTML {
	var from, to time.Time
	n := 0
	see := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if from.IsZero() || t.Before(from) {
			from = t
		}
		if t.After(to) {
			to = t
		}
	}
	for _, l := range lanes {
		for _, s := range l.Spans {
			see(s.From)
			see(s.To)
			n++
		}
		for _, m := range l.Marks {
			see(m.At)
			n++
		}
	}
	if n == 0 {
		return noData(testid, title+": nothing recorded yet")
	}
	if !to.After(from) {
		to = from.Add(time.Second)
	}
	const w, left, laneH = 720.0, 130.0, 30.0
	h := 24 + laneH*float64(len(lanes)) + 22
	plotW := w - left - 10
	xOf := func(t time.Time) float64 { return left + plotW*t.Sub(from).Seconds()/to.Sub(from).Seconds() }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" data-testid="%s" role="img" viewBox="0 0 %g %g" xmlns="http://www.w3.org/2000/svg"><title>%s</title>`, esc(testid), w, h, esc(title))
	fmt.Fprintf(&b, `<text x="4" y="14" class="chart-title">%s</text>`, esc(title))
	for i, l := range lanes {
		y := 24 + laneH*float64(i)
		fmt.Fprintf(&b, `<text x="4" y="%g" class="axis">%s</text><line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#eee"/>`, y+18, esc(l.Label), left, y+laneH, w-10, y+laneH)
		for _, s := range l.Spans {
			x1, x2 := xOf(s.From), xOf(s.To)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="%s"><title>%s: %s → %s (%s)</title></rect>`,
				x1, y+6, math.Max(x2-x1, 2), laneH-12, palette[s.Colour%len(palette)], esc(s.Label), fmtTime(s.From), fmtTime(s.To), esc(fmtDur(s.To.Sub(s.From).Seconds())))
			if x2-x1 > 7*float64(len(s.Label)) { // the label fits inside
				fmt.Fprintf(&b, `<text x="%.1f" y="%g" class="axis" fill="#fff">%s</text>`, x1+4, y+19, esc(s.Label))
			}
		}
		for k, m := range l.Marks {
			x := xOf(m.At)
			fmt.Fprintf(&b, `<circle data-mark="%s" cx="%.1f" cy="%g" r="5" fill="#333"><title>%s at %s</title></circle>`, esc(m.Label), x, y+laneH/2, esc(m.Label), fmtTime(m.At))
			anchor := "start"
			if x > w-120 {
				anchor = "end"
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%g" class="axis" text-anchor="%s">%s</text>`, x+7, y+8+float64(k%2)*18, anchor, esc(m.Label))
		}
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" class="axis">%s</text><text x="%g" y="%g" class="axis" text-anchor="end">%s (%s later)</text>`,
		left, h-6, fmtTime(from), w-10, h-6, fmtTime(to), esc(fmtDur(to.Sub(from).Seconds())))
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// pairRow is one metric of a before/after chart.
type pairRow struct {
	Label         string
	Before, After *float64
}

// beforeAfterSVG draws each row's before and after values as two bars,
// each row on its own scale (the rows have different units); rows without
// both values are left out.
func beforeAfterSVG(testid, title string, rows []pairRow) template.HTML {
	var keep []pairRow
	for _, r := range rows {
		if r.Before != nil && r.After != nil {
			keep = append(keep, r)
		}
	}
	if len(keep) == 0 {
		return noData(testid, title+": neither window has a value to compare")
	}
	const w, left, rowH = 720.0, 240.0, 34.0
	h := 40 + rowH*float64(len(keep))
	plotW := w - left - 90
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" data-testid="%s" role="img" viewBox="0 0 %g %g" xmlns="http://www.w3.org/2000/svg"><title>%s</title>`, esc(testid), w, h, esc(title))
	fmt.Fprintf(&b, `<text x="4" y="14" class="chart-title">%s</text><rect x="%g" y="4" width="10" height="10" fill="%s"/><text x="%g" y="13" class="axis">before</text><rect x="%g" y="4" width="10" height="10" fill="%s"/><text x="%g" y="13" class="axis">after</text>`,
		esc(title), w-200, palette[0], w-186, w-120, palette[1], w-106)
	for i, r := range keep {
		y := 28 + rowH*float64(i)
		m := math.Max(math.Abs(*r.Before), math.Abs(*r.After))
		if m == 0 {
			m = 1
		}
		fmt.Fprintf(&b, `<text x="4" y="%g" class="axis">%s</text>`, y+16, esc(r.Label))
		for j, v := range []float64{*r.Before, *r.After} {
			bw := plotW * math.Abs(v) / m
			fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%.1f" height="12" fill="%s"/><text x="%.1f" y="%g" class="axis">%s</text>`,
				left, y+float64(j)*13, math.Max(bw, 1), palette[j], left+bw+4, y+float64(j)*13+10, fmtNum(v))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
