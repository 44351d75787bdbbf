package agenttool_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/testproc"
	"github.com/retrysafe/retrysafe/reconcile"
)

// The crash points of the seeds.
const (
	beforeEffect = "before-effect" // the tool is about to reach the destination
	afterEffect  = "after-effect"  // the destination has the effect; no outcome is recorded
	afterRecord  = "after-record"  // the outcome is recorded; the reply has not been given
)

// fileDestination records effects durably, one request reference per line,
// as a destination's database would.
type fileDestination string

func (d fileDestination) effects(t testing.TB) []string {
	b, err := os.ReadFile(string(d))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func (d fileDestination) has(t testing.TB, ref string) bool {
	for _, e := range d.effects(t) {
		if e == ref {
			return true
		}
	}
	return false
}

func (d fileDestination) apply(t testing.TB, ref string) {
	f, err := os.OpenFile(string(d), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(ref + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// crashPoint tells the parent process where this process stands, then waits
// to be killed.
func crashPoint(at, want string) {
	if at != want {
		return
	}
	fmt.Printf("CRASHPOINT %s\n", at)
	os.Stdout.Sync()
	select {}
}

// TestCrashHelper is the process that the crash matrix starts and kills. It
// does nothing in a normal test run.
func TestCrashHelper(t *testing.T) {
	dbPath, pgSchema := os.Getenv("RETRYSAFE_CRASH_DB"), os.Getenv("RETRYSAFE_CRASH_PG_SCHEMA")
	if dbPath == "" && pgSchema == "" {
		t.Skip("run by TestCrashMatrix only")
	}
	dest := fileDestination(os.Getenv("RETRYSAFE_CRASH_DEST"))
	at := os.Getenv("RETRYSAFE_CRASH_AT")
	class := map[string]agenttool.Class{"keyed": agenttool.Keyed, "reconcilable": agenttool.Reconcilable, "at-most-once": agenttool.AtMostOnce}[os.Getenv("RETRYSAFE_CRASH_CLASS")]

	var store interface {
		agenttool.Store
		Close() error
	}
	var err error
	if pgSchema != "" { // a replica of many, on PostgreSQL
		store, err = pgstore.Open(context.Background(), &pgstore.Options{URL: os.Getenv("DATABASE_URL"), Schema: pgSchema})
	} else {
		store, err = boltstore.Open(dbPath, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	send := func(ctx context.Context, in emailInput) (sent, error) {
		ref := agenttool.RequestRef(ctx)
		crashPoint(at, beforeEffect)
		if class != agenttool.Keyed || !dest.has(t, ref) { // a keyed destination honours the key
			dest.apply(t, ref)
		}
		crashPoint(at, afterEffect)
		return sent{MessageID: "<" + ref + ">"}, nil
	}
	opts := agenttool.Options{
		Store: store, Class: class, Lease: time.Minute, Retry: fastRetry, WaitTimeout: 2 * time.Second,
		// One machine, one clock, and no attempt left in flight by the
		// killed process once the file is opened again: a not-applied
		// answer is trusted at once.
		ClockSkew: -1,
		Hooks:     agenttool.Hooks{Outcome: func(_ context.Context, _ agenttool.OutcomeEvent) { crashPoint(at, afterRecord) }},
	}
	if class == agenttool.Reconcilable {
		opts.Reconciler = reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
			if dest.has(t, ref) {
				return reconcile.AppliedWith([]byte(`{"message_id":"<` + ref + `>"}`))
			}
			return reconcile.NotAppliedYet()
		})
	}
	tool, err := agenttool.New("send_email", "Send an email.", send, opts)
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), emailToAna)
	fmt.Printf("ENVELOPE %s\n", env)
}

// runHelper starts the helper; with a crash point it kills the process with
// SIGKILL when it gets there. It returns the envelope the process printed,
// if it lived to print one.
func runHelper(t *testing.T, env []string, crash bool) (envelope.Envelope, bool) {
	t.Helper()
	p := testproc.Start(t, "TestCrashHelper", env...)
	var result envelope.Envelope
	printed, killed := false, false
	for p.Lines.Scan() {
		line := p.Lines.Text()
		if strings.HasPrefix(line, "CRASHPOINT ") && crash {
			p.Kill()
			killed = true
			break
		}
		if rest, ok := strings.CutPrefix(line, "ENVELOPE "); ok {
			var err error
			if result, err = envelope.Parse([]byte(rest)); err != nil {
				t.Fatalf("helper printed a bad envelope: %v", err)
			}
			printed = true
		}
	}
	werr := p.Wait()
	if crash && !killed {
		t.Fatalf("helper never reached its crash point (%v)\n%s", werr, p.Stderr.String())
	}
	if !crash && werr != nil {
		t.Fatalf("helper failed: %v\n%s", werr, p.Stderr.String())
	}
	return result, printed
}

// TestCrashMatrix kills a real process at each crash point of the seeds, for
// each class of tool that writes, on boltstore; then a new process retries the
// same logical action. Exactly one effect must exist where one happened, and
// the final envelope must tell the truth.
func TestCrashMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 18 processes")
	}
	type want struct {
		status  envelope.Status
		effects int
	}
	matrix := map[string]map[string]want{
		"keyed": {
			beforeEffect: {envelope.Success, 1}, // taken over, run with the same key
			afterEffect:  {envelope.Success, 1}, // run again with the same key: the destination dedupes
			afterRecord:  {envelope.Success, 1}, // replayed
		},
		"reconcilable": {
			beforeEffect: {envelope.Success, 1}, // reconciled: not applied, so run once
			afterEffect:  {envelope.Success, 1}, // reconciled: applied, not run again
			afterRecord:  {envelope.Success, 1}, // replayed
		},
		"at-most-once": {
			beforeEffect: {envelope.UnknownOutcome, 0}, // cannot know; nothing runs without a person
			afterEffect:  {envelope.UnknownOutcome, 1},
			afterRecord:  {envelope.Success, 1},
		},
	}
	for class, points := range matrix {
		for at, w := range points {
			t.Run(class+"/"+at, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				dest := fileDestination(filepath.Join(dir, "destination.log"))
				base := []string{
					"RETRYSAFE_CRASH_DB=" + filepath.Join(dir, "keys.db"),
					"RETRYSAFE_CRASH_DEST=" + string(dest),
					"RETRYSAFE_CRASH_CLASS=" + class,
				}
				runHelper(t, append(base, "RETRYSAFE_CRASH_AT="+at), true)
				// The restarted process runs at once, well inside the dead
				// holder's lease of a minute: bbolt's file lock proves that
				// holder gone, and boltstore ends its lease at Open.
				env, ok := runHelper(t, base, false)
				if !ok {
					t.Fatal("the restarted process printed no envelope")
				}
				effects := len(dest.effects(t))
				if env.Status != w.status || effects != w.effects {
					t.Fatalf("after a crash %s: %s with %d effects; want %s with %d", at, env, effects, w.status, w.effects)
				}
				if effects > 0 && env.Status == envelope.DefiniteFailure {
					t.Fatal("definite_failure for an effect that happened")
				}
				if effects == 0 && env.Status == envelope.Success {
					t.Fatal("success for an effect that did not happen")
				}
			})
		}
	}
}

// A crash mid approved retry leaves the record fencing its scope while live,
// then listed and asked about before any retry.
//
// A process claims an approved retry (DecideClaim marks it TakenOver) and
// dies before recording anything. Checks (these hold up): while its lease
// is live the record fences a reworded copy and is not listed by the
// operator; once lapsed, Operator.Unknown lists it with the dead attempt
// counted, the reworded copy is fenced, and the resend asks the destination
// (trust rule: pending until the lapsed lease + AttemptTimeout + ClockSkew)
// instead of retrying blindly.
func TestCrash_MidApprovedRetryFencesAndAsksFirst(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		c := newClock()
		store := open()
		m := firstLost()
		ans := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: ans, Now: c.Now,
			Retry: agenttool.RetryPolicy{MaxAttempts: 1}, WaitTimeout: 20 * time.Millisecond, ClockSkew: time.Second})
		op, _ := agenttool.NewOperator(store, tool)
		first := tool.Invoke(scoped(), lunch)
		mustStatus(t, first, envelope.UnknownOutcome)
		c.Advance(2 * time.Second) // the person finds it not applied once attempt 1 can no longer land
		if err := op.ResolveNotApplied(context.Background(), first.RequestRef, first.Attempts, "maria", "not in the log"); err != nil {
			t.Fatal(err)
		}
		rec, _ := store.Get(context.Background(), first.RequestRef)
		// The dying process claims the approved retry.
		res, err := store.Claim(context.Background(), storekit.ClaimRequest{Key: rec.Key, Tool: rec.Tool, Principal: rec.Principal,
			Session: rec.Session, Fingerprint: rec.Fingerprint, Owner: "dying", Now: c.Now(), Lease: time.Minute, TakeOver: true})
		if err != nil || !res.Claimed {
			t.Fatalf("claim: %+v %v", res, err)
		}
		live, _ := op.Unknown(context.Background(), "", 0)
		rw := tool.Invoke(scoped(), lunchReworded)
		t.Logf("live: operator lists %d; reworded %s", len(live), rw)
		if len(live) != 0 || rw.Error == nil || rw.Error.Code != envelope.CodeEarlierUnknown {
			t.Errorf("live approved retry: listed %d, reworded %s", len(live), rw)
		}
		c.Advance(time.Minute + 100*time.Millisecond) // lapsed, but the dead attempt may still land (ClockSkew 1s)
		lapsed, _ := op.Unknown(context.Background(), "", 0)
		ans.set(reconcile.NotAppliedYet())
		resend := tool.Invoke(scoped(), lunch)
		t.Logf("lapsed: operator lists %+v; resend %s", len(lapsed), resend)
		if len(lapsed) != 1 || lapsed[0].Attempts != 2 {
			t.Errorf("lapsed approved retry listed as %+v", lapsed)
		}
		if m.count() != 0 || resend.Status == envelope.Success {
			t.Errorf("resend after a crash mid approved retry ran blindly: %s (%d emails)", resend, m.count())
		}
		c.Advance(time.Minute)
		later := tool.Invoke(scoped(), lunch)
		t.Logf("later: %s", later)
		if m.count() != 1 {
			t.Errorf("%d emails", m.count())
		}
	})
}
