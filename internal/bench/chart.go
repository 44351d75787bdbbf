package main

import (
	"fmt"
	"math"
	"strings"
)

// chart draws calls/s against concurrency (log scale on both axes) as a
// small SVG, with no dependencies.
func chart(rep Report) string {
	const w, h, left, right, top, bottom = 640, 400, 70, 200, 30, 50
	type series struct {
		name, color string
		dashed      bool
		points      [][2]float64
	}
	var g, u, b series
	g = series{name: "boltstore, guarded", color: "#1f77b4"}
	u = series{name: "bbolt Update ×2", color: "#d62728"}
	b = series{name: "bbolt Batch ×2", color: "#2ca02c"}
	for _, c := range rep.Concurrency {
		x := float64(c.Callers)
		g.points = append(g.points, [2]float64{x, c.Guarded})
		u.points = append(u.points, [2]float64{x, c.Update})
		b.points = append(b.points, [2]float64{x, c.Batch})
	}
	all := []series{g, u, b}
	if pg := rep.PG; pg != nil {
		pgG := series{name: "pgstore, guarded", color: "#9467bd", dashed: true}
		pgB := series{name: fmt.Sprintf("bare SQL pair, %d conns", pg.PoolConns), color: "#8c564b", dashed: true}
		pgW := series{name: fmt.Sprintf("bare SQL pair, %d conns", pg.WidePoolConns), color: "#e377c2", dashed: true}
		pgC := series{name: "SQL pair, grouped by hand", color: "#7f7f7f", dashed: true}
		for _, c := range pg.Concurrency {
			x := float64(c.Callers)
			pgG.points = append(pgG.points, [2]float64{x, c.Guarded})
			pgB.points = append(pgB.points, [2]float64{x, c.Bare})
			pgW.points = append(pgW.points, [2]float64{x, c.BareWide})
			pgC.points = append(pgC.points, [2]float64{x, c.Grouped})
		}
		all = append(all, pgG, pgB, pgW, pgC)
	}
	maxY := 1.0
	for _, s := range all {
		for _, p := range s.points {
			maxY = math.Max(maxY, p[1])
		}
	}
	minY := 10.0
	logMaxY := math.Ceil(math.Log10(maxY))
	px := func(x float64) float64 { return left + (math.Log2(x)/math.Log2(256))*(w-left-right) }
	py := func(y float64) float64 {
		v := (math.Log10(math.Max(y, minY)) - 1) / (logMaxY - 1)
		return h - bottom - v*(h-top-bottom)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%d" y="18" font-size="14">durable calls per second against concurrent callers</text>`+"\n", left)
	for e := 1.0; e <= logMaxY; e++ {
		y := py(math.Pow(10, e))
		fmt.Fprintf(&sb, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, w-right, y, y, left-6, y+4, humanize(math.Pow(10, e)))
	}
	for _, c := range []float64{1, 8, 64, 256} {
		x := px(c)
		fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%g</text>`+"\n",
			x, x, top, h-bottom, x, h-bottom+16, c)
	}
	fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="middle">concurrent callers</text>`+"\n", (left+w-right)/2, h-12)
	for i, s := range all {
		var pts []string
		for _, p := range s.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
			fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", px(p[0]), py(p[1]), s.color)
		}
		if len(pts) > 1 {
			dash := ""
			if s.dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(&sb, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.color, dash)
		}
		ly := top + 20 + i*20
		fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			w-right+12, ly-10, s.color, w-right+30, ly, s.name)
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

func humanize(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}
