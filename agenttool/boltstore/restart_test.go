package boltstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/testproc"
	"github.com/retrysafe/retrysafe/reconcile"
)

// restartActions is how many logical actions each run of
// TestRestartHelper makes, the same ones every run, in turn: an email
// sent to a destination outside the store that can be asked about it, a
// note appended through Store.Effect, and a text message sent at most
// once, to a destination that cannot be asked.
const restartActions = 420

// sentLog is a destination outside the store: one request reference a
// line, each written and synced before the tool returns.
type sentLog string

func (d sentLog) refs() ([]string, error) {
	b, err := os.ReadFile(string(d))
	if os.IsNotExist(err) {
		return nil, nil
	}
	return strings.Fields(string(b)), err
}

// check answers whether ref was sent, as a destination that can be asked.
func (d sentLog) check(ref string) reconcile.Answer {
	refs, err := d.refs()
	if err != nil {
		return reconcile.CantSayBecause(err)
	}
	if slices.Contains(refs, ref) {
		return reconcile.AppliedWith([]byte(`"sent"`))
	}
	return reconcile.NotAppliedYet()
}

func (d sentLog) send(ref string) error {
	f, err := os.OpenFile(string(d), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteString(ref + "\n"); err != nil {
		return err
	}
	return f.Sync()
}

// TestRestartHelper makes every action of restartActions from 16
// goroutines, printing "OPEN" once the store is open and "DONE i ref
// status" as each call returns; with RETRYSAFE_RESTART_SWEEP it also runs
// the sweeper, which settles what a killed process left pending and drops
// generations; RETRYSAFE_RESTART_AHEAD sets the tools' clock ahead of the
// machine's. TestEveryActionHasOneEffectAcrossKills kills it.
func TestRestartHelper(t *testing.T) {
	path := os.Getenv("RETRYSAFE_RESTART_DB")
	if path == "" {
		t.Skip("run by TestEveryActionHasOneEffectAcrossKills only")
	}
	dest := sentLog(os.Getenv("RETRYSAFE_RESTART_DEST"))
	ahead, _ := time.ParseDuration(os.Getenv("RETRYSAFE_RESTART_AHEAD"))
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("OPEN")
	opts := agenttool.Options{Store: s, Class: agenttool.Reconcilable, Lease: 10 * time.Second, KeyTTL: 40 * time.Second,
		Retry:       agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond, MaxElapsed: time.Second},
		WaitTimeout: 5 * time.Second, ClockSkew: -1, Now: func() time.Time { return time.Now().Add(ahead) }}
	emailOpts := opts
	emailOpts.Reconciler = reconcile.Func(func(_ context.Context, ref string) reconcile.Answer { return dest.check(ref) })
	email, err := agenttool.New("send_email", "", func(ctx context.Context, in note) (string, error) {
		if err := dest.send(agenttool.RequestRef(ctx)); err != nil {
			return "", envelope.MarkDefinite(err, "")
		}
		return "sent", nil
	}, emailOpts)
	if err != nil {
		t.Fatal(err)
	}
	notesOpts := opts
	notesOpts.Reconciler = s.Reconciler()
	notes, err := agenttool.New("append_note", "", func(ctx context.Context, in note) (json.RawMessage, error) {
		return s.Effect(ctx, func(tx *bolt.Tx) (json.RawMessage, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("notes"))
			if err != nil {
				return nil, err
			}
			n, _ := b.NextSequence()
			return json.RawMessage(`"noted"`), b.Put([]byte(strconv.FormatUint(n, 10)), []byte(in.Text))
		})
	}, notesOpts)
	if err != nil {
		t.Fatal(err)
	}
	texts, err := agenttool.New("send_text", "", func(ctx context.Context, in note) (string, error) {
		if err := dest.send(agenttool.RequestRef(ctx)); err != nil {
			return "", envelope.MarkDefinite(err, "")
		}
		return "sent", nil
	}, withClass(opts, agenttool.AtMostOnce))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("RETRYSAFE_RESTART_SWEEP") != "" {
		op, err := agenttool.NewOperator(s, email, notes, texts)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				op.SweepOnce(context.Background(), agenttool.SweeperOptions{Interval: 20 * time.Millisecond})
				time.Sleep(time.Millisecond) // pacing only
			}
		}()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < restartActions; i = int(next.Add(1) - 1) {
				tool := []*agenttool.Tool{email, notes, texts}[i%3]
				ctx := agenttool.WithScope(context.Background(), "tenant-1", fmt.Sprintf("session-%d", i))
				env := tool.Invoke(ctx, fmt.Sprintf(`{"text":"action %d"}`, i))
				code := ""
				if env.Error != nil {
					code = "/" + env.Error.Code
				}
				fmt.Printf("DONE %d %s %s%s\n", i, env.RequestRef, env.Status, code)
			}
		})
	}
	wg.Wait()
}

// A run of TestRestartHelper: it is killed (SIGKILL) once stop says so,
// or runs to its end; it returns the lines "DONE" printed.
func runRestartHelper(t *testing.T, env []string, stop func(line string, done int) bool) []string {
	t.Helper()
	p := testproc.Start(t, "TestRestartHelper", env...)
	var done []string
	killed := false
	for p.Lines.Scan() {
		line := p.Lines.Text()
		if rest, ok := strings.CutPrefix(line, "DONE "); ok {
			done = append(done, rest)
		}
		if stop != nil && stop(line, len(done)) {
			p.Kill()
			killed = true
			break
		}
	}
	if err := p.Wait(); !killed && err != nil {
		t.Fatalf("helper failed: %v\n%s", err, p.Stderr.String())
	}
	if stop != nil && !killed {
		t.Fatalf("helper ended before it could be killed\n%s", p.Stderr.String())
	}
	return done
}

// TestEveryActionHasOneEffectAcrossKills kills a process while many
// actions move between the places of the file (claimed into the pending
// bucket, settled into generations or, with a committed effect, into the
// records bucket), restarts it twice in quick succession (each Open ends
// the leases of what it finds pending; the second is killed before any
// sweep settles them), then again as calls and the sweeper take over and
// settle the actions the kills left pending, and once more to the end.
// Meanwhile generations end and are dropped, by writes when the file
// holds many and by the sweeper. The first process's clock runs ten
// minutes ahead of the next ones', as a machine's clock set back after a
// crash would leave it: its records and leases end later than the
// restarted processes expect.
//
// In the end no action has two effects; every action that can be asked
// about, or whose effect committed with its record, succeeded with one;
// an action sent at most once succeeded with one, or is unknown (its
// sender was killed before it could know) and counted so. The file
// passes bbolt's check; each record is in one place, exported once and
// counted once.
func TestEveryActionHasOneEffectAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 10 processes")
	}
	t.Run("layout 7", func(t *testing.T) { everyActionHasOneEffectAcrossKills(t, false) })
	// The file the first kill leaves is rewritten as the build before
	// generations would have left it (layout 6: pending records, with
	// their live leases, and their slots among the others), and upgraded
	// by the Open of the next process.
	t.Run("upgraded from layout 6", func(t *testing.T) { everyActionHasOneEffectAcrossKills(t, true) })
}

func everyActionHasOneEffectAcrossKills(t *testing.T, six bool) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.db")
	dest := sentLog(filepath.Join(dir, "sent.log"))
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Generations ending while the processes run, and many that ended
	// before: a write that starts one drops those.
	now := time.Now()
	var old []agenttool.Record
	for i := range 2000 {
		exp := now.Add(time.Duration(i%20)*300*time.Millisecond - 2*time.Second)
		if i%3 == 0 {
			exp = now.Add(-time.Duration(i) * time.Minute)
		}
		old = append(old, agenttool.Record{Key: fmt.Sprintf("old/%05d", i), Tool: "send_email", State: agenttool.Succeeded,
			Token: uint64(i + 1), Attempts: 1, Outcome: []byte(`{"status":"success"}`),
			Created: exp.Add(-8 * time.Second), Updated: exp.Add(-8 * time.Second), Expires: exp})
	}
	if err := s.Import(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	s.Close()
	base := []string{"RETRYSAFE_RESTART_DB=" + path, "RETRYSAFE_RESTART_DEST=" + string(dest)}
	sweep := append(base[:len(base):len(base)], "RETRYSAFE_RESTART_SWEEP=1")
	afterDone := func(n int) func(string, int) bool { return func(_ string, done int) bool { return done >= n } }
	atOpen := func(line string, _ int) bool { return line == "OPEN" }

	first := runRestartHelper(t, append(base[:len(base):len(base)], "RETRYSAFE_RESTART_AHEAD=10m"), afterDone(150))
	answered := map[string]bool{}
	for _, line := range first {
		answered[strings.Fields(line)[0]] = true
	}
	interrupted := 0 // the first action the kill interrupted
	for answered[strconv.Itoa(interrupted)] {
		interrupted++
	}
	pending, _ := pendingIn(t, path)
	if pending == 0 {
		t.Fatal("the first kill left no action pending")
	}
	t.Logf("pending after the first kill: %d", pending)
	if six {
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(boltstore.LayoutSix); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	runRestartHelper(t, sweep, atOpen)
	runRestartHelper(t, sweep, atOpen)
	pending, _ = pendingIn(t, path)
	t.Logf("pending after two quick restarts: %d", pending)
	// Killed as the calls reach the actions the first kill interrupted,
	// taking them over and settling them, beside the sweeper.
	runRestartHelper(t, sweep, afterDone(interrupted+4))
	pending, takenOver := pendingIn(t, path)
	t.Logf("pending after a kill while settling them: %d, %d of them taken over", pending, takenOver)
	done := runRestartHelper(t, sweep, nil)

	refs, status := map[int]string{}, map[int]envelope.Status{}
	for _, line := range done {
		f := strings.Fields(line)
		i, _ := strconv.Atoi(f[0])
		refs[i], status[i] = f[1], envelope.Status(strings.Split(f[2], "/")[0])
	}
	if len(refs) != restartActions {
		t.Fatalf("the last run answered %d actions, want %d", len(refs), restartActions)
	}
	sent := map[string]int{}
	refsSent, err := dest.refs()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refsSent {
		sent[r]++
	}
	s, err = boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	noted := map[string]int{}
	s.DB().View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("after the kills: %v", err)
		}
		if b := tx.Bucket([]byte("notes")); b != nil {
			b.ForEach(func(_, v []byte) error { noted[string(v)]++; return nil })
		}
		return nil
	})
	ctx := context.Background()
	unknown := 0
	for i := range restartActions {
		effects := sent[refs[i]]
		if i%3 == 1 {
			effects = noted[fmt.Sprintf("action %d", i)]
		}
		rec, err := s.Get(ctx, refs[i])
		if err != nil {
			t.Errorf("action %d (%s): %v", i, refs[i], err)
			continue
		}
		switch {
		case effects > 1:
			t.Errorf("action %d (%s) has %d effects", i, refs[i], effects)
		case status[i] == envelope.Success && (effects != 1 || rec.State != agenttool.Succeeded):
			t.Errorf("action %d (%s): success with %d effects, recorded %v", i, refs[i], effects, rec.State)
		case status[i] == envelope.UnknownOutcome && i%3 == 2 && rec.State == agenttool.Unknown:
			unknown++ // sent at most once, by a process killed before it could know
		case status[i] != envelope.Success:
			t.Errorf("action %d (%s), replayed after the kills: %s with %d effects, recorded %v", i, refs[i], status[i], effects, rec.State)
		}
	}
	t.Logf("%d actions sent at most once are unknown after the kills", unknown)
	seen := map[string]bool{}
	exported := 0
	for after := ""; ; {
		page, next, err := s.Export(ctx, after, 97)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			if seen[r.Key] {
				t.Errorf("%s exported twice", r.Key)
			}
			seen[r.Key] = true
			exported++
		}
		if next == "" {
			break
		}
		after = next
	}
	for i, ref := range refs {
		if !seen[ref] {
			t.Errorf("action %d (%s) is not exported", i, ref)
		}
	}
	counts, err := s.Count(ctx, storekit.CountRequest{})
	if err != nil {
		t.Fatal(err)
	}
	counted, unknownCounted := 0, 0
	for _, c := range counts {
		counted += c.Records
		if c.State == agenttool.Unknown {
			unknownCounted += c.Records
		}
	}
	if counted != exported || unknownCounted != unknown {
		t.Errorf("Count counts %d records, %d unknown; Export lists %d, and %d actions are unknown", counted, unknownCounted, exported, unknown)
	}
	if n, err := s.CountUnknown(ctx); err != nil || n != unknown {
		t.Errorf("CountUnknown: %d, %v; %d actions are unknown", n, err, unknown)
	}
}

// pendingIn counts the pending records of the store at path, and those
// among them taken over from a holder presumed dead, opening it read-only
// (which ends no lease).
func pendingIn(t *testing.T, path string) (pending, takenOver int) {
	t.Helper()
	s, err := boltstore.Open(path, &boltstore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for after := ""; ; {
		page, next, err := s.Export(context.Background(), after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			if r.State == agenttool.Pending {
				pending++
				if r.TakenOver {
					takenOver++
				}
			}
		}
		if next == "" {
			return pending, takenOver
		}
		after = next
	}
}

func withClass(o agenttool.Options, c agenttool.Class) agenttool.Options {
	o.Class = c
	return o
}
