package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool/dbostool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/benchtool"
)

// PeersReport compares, on one PostgreSQL and in one run, three ways of
// running one action of the benchmark's tool: a DBOS workflow with one
// step (what DBOS alone guarantees: the step is recorded once it
// answered), a guarded call on pgstore (retrysafe alone), and the guarded
// call as that DBOS step (dbostool: both).
type PeersReport struct {
	Started   time.Time `json:"started"`
	GoVersion string    `json:"go_version"`
	// Lone: one caller, in alternation, the median block's time per
	// action; Vs*: the median of the blocks' ratios.
	LoneDBOSUs          float64 `json:"lone_dbos_us"`
	LoneRetrysafeUs     float64 `json:"lone_retrysafe_us"`
	LoneBothUs          float64 `json:"lone_retrysafe_in_dbos_us"`
	LoneRetrysafeVsDBOS float64 `json:"lone_retrysafe_vs_dbos"` // latency: lower is faster
	LoneBothVsDBOS      float64 `json:"lone_retrysafe_in_dbos_vs_dbos"`
	// Concurrent callers, actions per second.
	Callers            int     `json:"callers"`
	ConcDBOS           float64 `json:"conc_dbos_per_s"`
	ConcRetrysafe      float64 `json:"conc_retrysafe_per_s"`
	ConcBoth           float64 `json:"conc_retrysafe_in_dbos_per_s"`
	ConcRetrysafeXDBOS float64 `json:"conc_retrysafe_x_dbos"` // throughput: higher is faster
	ConcBothXDBOS      float64 `json:"conc_retrysafe_in_dbos_x_dbos"`
}

// runPeers measures the three side by side on url, each with a schema of
// its own that it drops after.
func runPeers(w io.Writer, asJSON bool, url string, quick bool) error {
	progress := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	ctx := context.Background()
	n, conc := 600, 6000
	if quick {
		n, conc = 60, 640
	}
	b := make([]byte, 6)
	rand.Read(b)
	suffix := hex.EncodeToString(b)
	rsSchema, dbosSchema := "peers_rs_"+suffix, "peers_dbos_"+suffix
	store, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: rsSchema})
	if err != nil {
		return err
	}
	defer func() {
		store.Pool().Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{rsSchema}.Sanitize()+" CASCADE")
		store.Pool().Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{dbosSchema}.Sanitize()+" CASCADE")
		store.Close()
	}()
	guarded := guard(store)
	step, err := dbostool.New(guarded, nil)
	if err != nil {
		return err
	}
	dctx, err := dbos.NewContext(ctx, dbos.Config{AppName: "retrysafe-bench-peers", ApplicationVersion: "bench", DatabaseURL: url,
		DatabaseSchema: dbosSchema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	// DBOS alone: one step, the tool called as it is.
	plain := func(ctx dbos.Context, i int64) (string, error) {
		return dbos.RunAsStep(ctx, func(ctx context.Context) (string, error) {
			return benchtool.Tool{}.Call(ctx, input(i))
		}, dbos.WithStepName("send_email"))
	}
	// Both: the guarded call as that step.
	both := func(ctx dbos.Context, i int64) (envelope.Envelope, error) {
		return step.Run(ctx, dbostool.Call{Principal: "tenant-42/user-7", Args: input(i)})
	}
	dbos.RegisterWorkflow(dctx, plain, dbos.WithWorkflowName("plain"))
	dbos.RegisterWorkflow(dctx, both, dbos.WithWorkflowName("both"))
	if err := dbos.Launch(dctx); err != nil {
		return err
	}
	defer dbos.Shutdown(dctx, 10*time.Second)

	seq := int64(1 << 40) // apart from other runs' inputs in a reused database
	next := func() int64 { seq++; return seq }
	runPlain := func(i int64) error {
		h, err := dbos.RunWorkflow(dctx, plain, i, dbos.WithWorkflowID("plain-"+suffix+"-"+strconv.FormatInt(i, 10)))
		if err != nil {
			return err
		}
		_, err = h.GetResult()
		return err
	}
	runBoth := func(i int64) error {
		h, err := dbos.RunWorkflow(dctx, both, i, dbos.WithWorkflowID("both-"+suffix+"-"+strconv.FormatInt(i, 10)))
		if err != nil {
			return err
		}
		env, err := h.GetResult()
		if err != nil {
			return err
		}
		if env.Status != envelope.Success {
			return fmt.Errorf("guarded DBOS step: %s", env)
		}
		return nil
	}
	runGuarded := func(ctx context.Context, i int64) error {
		if env := guarded.Invoke(ctx, input(i)); env.Status != envelope.Success {
			return fmt.Errorf("guarded call: %s", env)
		}
		return nil
	}
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	progress("peers: warming up …")
	for range 50 {
		must(runPlain(next()))
		must(runBoth(next()))
		must(runGuarded(scope, next()))
	}
	rep := PeersReport{Started: time.Now().UTC(), GoVersion: goVersion(), Callers: 64}
	progress("peers: one caller, %d actions each, in alternation …", n)
	rs := alternate(n, func() { must(runGuarded(scope, next())) }, func() { must(runPlain(next())) })
	bo := alternate(n, func() { must(runBoth(next())) }, func() { must(runPlain(next())) })
	rep.LoneRetrysafeUs, rep.LoneDBOSUs, rep.LoneRetrysafeVsDBOS = us1(rs.CallNs), us1(rs.BaselineNs), round2(rs.Ratio)
	rep.LoneBothUs, rep.LoneBothVsDBOS = us1(bo.CallNs), round2(bo.Ratio)
	progress("peers: %d callers, %d actions each way …", rep.Callers, conc)
	var err1, err2, err3 error
	// In turns, twice, so that the machine's drift hits all three.
	var d, r, bt []float64
	for range 2 {
		var x float64
		x, err1 = fanOut(rep.Callers, conc, func(int) error { return runPlain(next64()) })
		d = append(d, x)
		x, err2 = fanOut(rep.Callers, conc, func(g int) error { return runGuarded(callerScopes[g], next64()) })
		r = append(r, x)
		x, err3 = fanOut(rep.Callers, conc, func(int) error { return runBoth(next64()) })
		bt = append(bt, x)
		if err1 != nil || err2 != nil || err3 != nil {
			return fmt.Errorf("peers under load: DBOS %v; retrysafe %v; both %v", err1, err2, err3)
		}
	}
	rep.ConcDBOS, rep.ConcRetrysafe, rep.ConcBoth = round0(mean(d)), round0(mean(r)), round0(mean(bt))
	rep.ConcRetrysafeXDBOS, rep.ConcBothXDBOS = round2(rep.ConcRetrysafe/rep.ConcDBOS), round2(rep.ConcBoth/rep.ConcDBOS)
	if asJSON {
		return jsonLine(w, rep)
	}
	fmt.Fprintf(w, "retrysafe beside DBOS Transact Go on one PostgreSQL, %s, %s\n\n", rep.GoVersion, rep.Started.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "one action\tDBOS: a workflow of one step\tretrysafe: a guarded call\tretrysafe as the DBOS step (dbostool)")
	fmt.Fprintf(tw, "one caller, µs\t%s\t%s (%.2f×)\t%s (%.2f×)\n", f0(rep.LoneDBOSUs), f0(rep.LoneRetrysafeUs), rep.LoneRetrysafeVsDBOS, f0(rep.LoneBothUs), rep.LoneBothVsDBOS)
	fmt.Fprintf(tw, "%d callers, actions/s\t%s\t%s (%.2f×)\t%s (%.2f×)\n", rep.Callers, f0(rep.ConcDBOS), f0(rep.ConcRetrysafe), rep.ConcRetrysafeXDBOS, f0(rep.ConcBoth), rep.ConcBothXDBOS)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, "\n(ratios: one caller, time against DBOS's; 64 callers, actions/s against DBOS's)")
	return err
}

// seq64 numbers the actions of concurrent callers, apart from the lone ones.
var seq64 atomic.Int64

func next64() int64 { return 1<<50 + seq64.Add(1) }

func us1(ns float64) float64 { return round2(ns / 1e3) }

func round0(v float64) float64 { return float64(int64(v + 0.5)) }

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
