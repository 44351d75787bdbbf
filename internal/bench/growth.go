package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// GrowthReport is the -growth -json output: how each durable store behaves
// as it fills up.
type GrowthReport struct {
	Ratios    GrowthRatios   `json:"ratios"`
	Stores    []GrowthResult `json:"stores"`
	GoVersion string         `json:"go"`
	Started   time.Time      `json:"started"`
}

// GrowthRatios are the figures the README quotes, per store ("bolt", "pg").
type GrowthRatios struct {
	P99LargestVsSmallest map[string]float64 `json:"p99_largest_vs_smallest"`  // goal ≤ 1.5
	P99SweepVsIdle       map[string]float64 `json:"p99_sweep_vs_idle"`        // at the largest size; goal ≤ 3
	ListLargestVsSmall   map[string]float64 `json:"list_largest_vs_smallest"` // goal ≤ 2
}

// GrowthResult is one store's figures at each size.
type GrowthResult struct {
	Store string       `json:"store"`
	Sizes []GrowthSize `json:"sizes"`
}

// GrowthSize is what a store of Records records measured.
type GrowthSize struct {
	Records   int     `json:"records"`
	Unknown   int     `json:"unknown"`
	Expired   int     `json:"expired"`     // the tenth the fill made expired, which the sweep must delete
	IdleP50   float64 `json:"idle_p50_us"` // a guarded call, µs
	IdleP99   float64 `json:"idle_p99_us"`
	SweepP50  float64 `json:"sweep_p50_us"` // a guarded call while a sweep of the expired 10% runs
	SweepP99  float64 `json:"sweep_p99_us"`
	BeforeP99 float64 `json:"before_sweep_p99_us"` // as many calls just before the sweep: its baseline
	Calls     int     `json:"sweep_calls"`         // calls measured during the sweep
	SweepS    float64 `json:"sweep_seconds"`       // the sweep of the expired 10%
	Swept     int     `json:"swept"`
	ListUs    float64 `json:"list_us"` // one page of 50 unknown records, median µs
}

// growthStore is one store filled to a size.
type growthStore struct {
	store   agenttool.Store
	tool    *agenttool.Tool
	op      *agenttool.Operator
	size    int
	close   func()
	latency []time.Duration
}

// runGrowth fills a boltstore (and a pgstore, with DATABASE_URL) to each
// size, and measures them side by side: the idle calls in rounds that call
// every size once, so that the machine's drift hits all sizes alike.
func runGrowth(w io.Writer, asJSON bool, svgPath string, sizes []int, calls int) error {
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
	dir, err := os.MkdirTemp("", "retrysafe-growth")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rep := GrowthReport{Started: time.Now().UTC(), GoVersion: goVersion(), Ratios: GrowthRatios{
		P99LargestVsSmallest: map[string]float64{}, P99SweepVsIdle: map[string]float64{}, ListLargestVsSmall: map[string]float64{}}}
	kinds := []string{"bolt"}
	url := os.Getenv("DATABASE_URL")
	if url != "" {
		kinds = append(kinds, "pg")
	} else {
		progress("growth: DATABASE_URL is not set: boltstore only")
	}
	for _, kind := range kinds {
		var stores []*growthStore
		for _, n := range sizes {
			gs, err := openGrowth(kind, dir, url, n)
			if err != nil {
				return err
			}
			defer gs.close()
			if err := fill(gs, n, func(done int) { progress("growth: %s, %d records: %d filled", kind, n, done) }); err != nil {
				return err
			}
			stores = append(stores, gs)
		}
		res := GrowthResult{Store: kind}
		progress("growth: %s: %d idle calls per size, in rounds …", kind, calls)
		seq := int64(0)
		for range calls {
			for _, gs := range stores {
				seq++
				start := time.Now()
				mustSucceed(gs.tool.Invoke(scope, input(seq)))
				gs.latency = append(gs.latency, time.Since(start))
			}
		}
		progress("growth: %s: listing a page of unknown records …", kind)
		lists := make([][]time.Duration, len(stores))
		for range 100 {
			for i, gs := range stores {
				start := time.Now()
				page, err := gs.op.Unknown(context.Background(), "", 50)
				if err != nil || len(page) == 0 {
					return fmt.Errorf("listing %s at %d: %d records, %v", kind, gs.size, len(page), err)
				}
				lists[i] = append(lists[i], time.Since(start))
			}
		}
		for i, gs := range stores {
			progress("growth: %s, %d records: calls during a sweep of the expired 10%% …", kind, gs.size)
			sz := GrowthSize{Records: gs.size, Unknown: gs.size / 100, Expired: gs.size / 10, ListUs: us(percentile(lists[i], 50))}
			sz.IdleP50, sz.IdleP99 = us(percentile(gs.latency, 50)), us(percentile(gs.latency, 99))
			// The baseline of the calls during the sweep: as many calls just
			// before it (at least 300), on the same store, so that the
			// disk's drift over the run does not enter the ratio.
			var before []time.Duration
			for range max(300, gs.size/300) {
				seq++
				start := time.Now()
				mustSucceed(gs.tool.Invoke(scope, input(seq)))
				before = append(before, time.Since(start))
			}
			sz.BeforeP99 = us(percentile(before, 99))
			during, swept, took, err := duringSweep(gs, &seq)
			if err != nil {
				return err
			}
			sz.Calls, sz.Swept, sz.SweepS = len(during), swept, took.Seconds()
			if len(during) > 0 {
				sz.SweepP50, sz.SweepP99 = us(percentile(during, 50)), us(percentile(during, 99))
			}
			res.Sizes = append(res.Sizes, sz)
		}
		first, last := res.Sizes[0], res.Sizes[len(res.Sizes)-1]
		rep.Ratios.P99LargestVsSmallest[kind] = round2(last.IdleP99 / first.IdleP99)
		rep.Ratios.ListLargestVsSmall[kind] = round2(last.ListUs / first.ListUs)
		if last.SweepP99 > 0 {
			rep.Ratios.P99SweepVsIdle[kind] = round2(last.SweepP99 / last.BeforeP99)
		}
		rep.Stores = append(rep.Stores, res)
	}
	if svgPath != "" {
		if err := os.WriteFile(svgPath, []byte(growthChart(rep)), 0o644); err != nil {
			return err
		}
	}
	if asJSON {
		return jsonLine(w, rep)
	}
	printGrowth(w, rep)
	return nil
}

func openGrowth(kind, dir, url string, n int) (*growthStore, error) {
	gs := &growthStore{size: n}
	switch kind {
	case "bolt":
		s, err := boltstore.Open(filepath.Join(dir, fmt.Sprintf("growth-%d.db", n)), nil)
		if err != nil {
			return nil, err
		}
		gs.store, gs.close = s, func() { s.Close() }
	default:
		b := make([]byte, 6)
		rand.Read(b)
		schema := "growth_" + hex.EncodeToString(b)
		s, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema})
		if err != nil {
			return nil, err
		}
		gs.store, gs.close = s, func() {
			s.Pool().Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			s.Close()
		}
	}
	gs.tool = guard(gs.store)
	op, err := agenttool.NewOperator(gs.store, gs.tool)
	if err != nil {
		return nil, err
	}
	gs.op = op
	return gs, nil
}

// fill imports n settled records through the store's bulk path
// (storekit.Importer), ten thousand at a time: 1% unknown, 10% expired,
// the rest succeeded and current, spread over a thousand principals.
func fill(gs *growthStore, n int, progress func(done int)) error {
	im, ok := gs.store.(storekit.Importer)
	if !ok {
		return fmt.Errorf("%T cannot import", gs.store)
	}
	now := time.Now()
	outcome := []byte(`{"version":1,"status":"success","tool":"send_email","request_ref":"send_email/growth","attempts":1,"result":{"message_id":"<1@mail.example>"},"next":"continue"}`)
	const chunk = 10_000
	recs := make([]agenttool.Record, 0, chunk)
	for i := 0; i < n; {
		recs = recs[:0]
		for ; i < n && len(recs) < chunk; i++ {
			r := agenttool.Record{
				Key: fmt.Sprintf("send_email/growth-%09d", i), Tool: "send_email", State: agenttool.Succeeded,
				Principal: digestOf(uint64(i % 1000)), Session: digestOf(uint64(i%1000) + 1<<32), Fingerprint: digestOf(uint64(i) + 1<<40),
				Token: uint64(i + 1), Attempts: 1, Outcome: outcome, Created: now.Add(-time.Hour), Updated: now.Add(-time.Hour),
				Expires: now.Add(24 * time.Hour),
			}
			switch {
			case i%100 == 0:
				r.State, r.Expires = agenttool.Unknown, time.Time{}
			case i%10 == 1:
				r.Expires = now.Add(-time.Minute)
			}
			recs = append(recs, r)
		}
		if err := im.Import(context.Background(), recs); err != nil {
			return err
		}
		if i%100_000 == 0 || i == n {
			progress(i)
		}
	}
	return nil
}

func digestOf(i uint64) agenttool.Digest {
	return sha256.Sum256(binary.BigEndian.AppendUint64(nil, i))
}

// sweepAhead is how far past their expiry the benchmark sweeps the
// expired tenth: boltstore keeps a settled record until its generation's
// window ends (an eighth of its lifetime at most: the fill's expired
// records lived 59 minutes, in windows of 256 s), so the sweep runs as of a
// time every such window has ended, as a sweeper does minutes later. No
// other record expires before a day; pgstore deletes the same records.
const sweepAhead = 10 * time.Minute

// duringSweep sweeps the expired records in the background and times
// guarded calls until it ends.
func duringSweep(gs *growthStore, seq *int64) (latency []time.Duration, swept int, took time.Duration, err error) {
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		var err error
		swept, err = storekit.SweepAll(context.Background(), gs.store, time.Now().Add(sweepAhead), 0, nil)
		took = time.Since(start)
		done <- err
	}()
	for {
		select {
		case err := <-done:
			return latency, swept, took, err
		default:
		}
		*seq++
		t := time.Now()
		mustSucceed(gs.tool.Invoke(scope, input(*seq)))
		latency = append(latency, time.Since(t))
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func us(d time.Duration) float64 { return round2(float64(d.Nanoseconds()) / 1e3) }

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// sweptOf says what a size's sweep deleted, against the expired tenth it
// had to.
func sweptOf(z GrowthSize) string {
	s := fmt.Sprintf("%d of %d in %.2fs", z.Swept, z.Expired, z.SweepS)
	if z.Swept != z.Expired {
		s += " (NOT the expired tenth)"
	}
	return s
}

func printGrowth(w io.Writer, rep GrowthReport) {
	line := func(cols ...string) { fmt.Fprintln(w, strings.Join(cols, " | ")) }
	fmt.Fprintf(w, "retrysafe growth benchmark, %s, %s\n", rep.GoVersion, rep.Started.Format(time.RFC3339))
	for _, s := range rep.Stores {
		fmt.Fprintln(w)
		line(s.Store+"store records", "call p50 µs", "call p99 µs", "just before the sweep p99 µs", "during sweep p50 µs", "during sweep p99 µs (calls)", "sweep of 10%", "list 50 unknown µs")
		for _, z := range s.Sizes {
			line(humanize(float64(z.Records)), f0(z.IdleP50), f0(z.IdleP99), f0(z.BeforeP99), f0(z.SweepP50),
				fmt.Sprintf("%s (%d)", f0(z.SweepP99), z.Calls), sweptOf(z), f0(z.ListUs))
		}
	}
	fmt.Fprintln(w)
	r := rep.Ratios
	for _, s := range rep.Stores {
		fmt.Fprintf(w, "ratios %s: p99_largest_vs_smallest %.2f (goal ≤ 1.5), p99_sweep_vs_idle %.2f (goal ≤ 3, against the calls just before), list_largest_vs_smallest %.2f (goal ≤ 2)\n",
			s.Store, r.P99LargestVsSmallest[s.Store], r.P99SweepVsIdle[s.Store], r.ListLargestVsSmall[s.Store])
	}
}

// growthChart draws the p99 of a guarded call against the records in the
// store (log scale), idle and during a sweep, for each store.
func growthChart(rep GrowthReport) string {
	const w, h, left, right, top, bottom = 640, 400, 70, 200, 30, 50
	colors := map[string][2]string{"bolt": {"#1f77b4", "#aec7e8"}, "pg": {"#9467bd", "#c5b0d5"}}
	maxY, minX, maxX := 1.0, math.Inf(1), 1.0
	for _, s := range rep.Stores {
		for _, z := range s.Sizes {
			maxY = math.Max(maxY, math.Max(z.IdleP99, z.SweepP99))
			minX, maxX = math.Min(minX, float64(z.Records)), math.Max(maxX, float64(z.Records))
		}
	}
	maxY *= 1.15
	px := func(x float64) float64 {
		if maxX == minX {
			return left
		}
		return left + (math.Log10(x)-math.Log10(minX))/(math.Log10(maxX)-math.Log10(minX))*(w-left-right)
	}
	py := func(y float64) float64 { return h - bottom - y/maxY*(h-top-bottom) }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%d" y="18" font-size="14">p99 of a guarded call (µs) against records in the store</text>`+"\n", left)
	for i := 0; i <= 4; i++ {
		v := maxY * float64(i) / 4
		fmt.Fprintf(&sb, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n",
			left, w-right, py(v), py(v), left-6, py(v)+4, v)
	}
	if len(rep.Stores) > 0 {
		for _, z := range rep.Stores[0].Sizes {
			x := px(float64(z.Records))
			fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
				x, x, top, h-bottom, x, h-bottom+16, humanize(float64(z.Records)))
		}
	}
	fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="middle">records in the store</text>`+"\n", (left+w-right)/2, h-12)
	legend := 0
	for _, s := range rep.Stores {
		for j, name := range []string{"idle", "during a sweep"} {
			color := colors[s.Store][j]
			var pts []string
			for _, z := range s.Sizes {
				y := z.IdleP99
				if j == 1 {
					y = z.SweepP99
				}
				if y == 0 {
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(float64(z.Records)), py(y)))
				fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", px(float64(z.Records)), py(y), color)
			}
			if len(pts) > 1 {
				fmt.Fprintf(&sb, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
			}
			ly := top + 20 + legend*20
			legend++
			fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%sstore, %s</text>`+"\n",
				w-right+12, ly-10, color, w-right+30, ly, s.Store, name)
		}
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}
