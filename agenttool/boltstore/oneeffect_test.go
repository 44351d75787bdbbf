package boltstore_test

// At most one effect per action, and answers that tell the truth, while
// the process is killed mid-call, the disk fills, and calls of one action
// and its neighbours race with lost replies and the sweeper. (From a
// fresh-context review that found no fault here.)

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/testproc"
	"github.com/retrysafe/retrysafe/reconcile"
)

// The action the model asks for, its rewording (another key of the same
// tool and session) and a neighbour in another session.
const (
	parcelNote         = `{"text":"tell ana the parcel left at nine"}`
	parcelNoteReworded = `{"text":"let ana know the parcel left at 9"}`
)

// faultTool builds the tool the killed process and the restarted one both
// use. kind is "reconcilable", "keyed", "at-most-once" (a sender to dest)
// or "effect" (a note committed with its record). hook, if set, runs at the
// named points of an attempt: "before" the effect, "after" it (for
// "effect": inside the effect's transaction, before it commits).
func faultTool(t testing.TB, s *boltstore.Store, dest sentLog, kind string, hook func(at string), lease ...time.Duration) *agenttool.Tool {
	t.Helper()
	if hook == nil {
		hook = func(string) {}
	}
	opts := agenttool.Options{Store: s, Lease: 10 * time.Second, KeyTTL: time.Hour, WaitTimeout: 3 * time.Second, ClockSkew: -1,
		Retry: agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond, MaxElapsed: time.Second}}
	if len(lease) > 0 {
		opts.Lease = lease[0]
	}
	var fn func(ctx context.Context, in note) (json.RawMessage, error)
	switch kind {
	case "effect":
		opts.Class, opts.Reconciler = agenttool.Reconcilable, s.Reconciler()
		fn = func(ctx context.Context, in note) (json.RawMessage, error) {
			hook("before")
			return s.Effect(ctx, func(tx *bolt.Tx) (json.RawMessage, error) {
				b, err := tx.CreateBucketIfNotExists([]byte("notes"))
				if err != nil {
					return nil, err
				}
				n, _ := b.NextSequence()
				if err := b.Put([]byte(strconv.FormatUint(n, 10)), []byte(agenttool.RequestRef(ctx))); err != nil {
					return nil, err
				}
				hook("after")
				return json.RawMessage(`"noted"`), nil
			})
		}
	default:
		opts.Class = map[string]agenttool.Class{"reconcilable": agenttool.Reconcilable, "keyed": agenttool.Keyed, "at-most-once": agenttool.AtMostOnce}[kind]
		if kind == "reconcilable" {
			opts.Reconciler = reconcile.Func(func(_ context.Context, ref string) reconcile.Answer { return dest.check(ref) })
		}
		fn = func(ctx context.Context, in note) (json.RawMessage, error) {
			ref := agenttool.RequestRef(ctx)
			hook("before")
			refs, err := dest.refs()
			if err != nil {
				return nil, envelope.MarkDefinite(err, "")
			}
			// A keyed destination honours the reference: a resend is
			// answered, not applied again.
			if kind != "keyed" || !slices.Contains(refs, ref) {
				if err := dest.send(ref); err != nil {
					return nil, envelope.MarkDefinite(err, "")
				}
			}
			hook("after")
			return json.RawMessage(`"sent"`), nil
		}
	}
	tool, err := agenttool.New("send_note", "Send a note.", fn, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func inSession(session string) context.Context {
	return agenttool.WithScope(context.Background(), "tenant-1/user-1", session)
}

// TestOneEffectKillHelper is the process TestOneEffect_AProcessKilledMidCall… kills: it
// makes the action once and stops at ONEEFFECT_AT ("before" or "after" the
// effect), telling the parent, which kills it there.
func TestOneEffectKillHelper(t *testing.T) {
	path := os.Getenv("ONEEFFECT_DB")
	if path == "" {
		t.Skip("run by TestOneEffect_AProcessKilledMidCall… only")
	}
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := os.Getenv("ONEEFFECT_AT")
	tool := faultTool(t, s, sentLog(os.Getenv("ONEEFFECT_DEST")), os.Getenv("ONEEFFECT_KIND"), func(here string) {
		if here == at {
			fmt.Println("CRASHPOINT " + here)
			os.Stdout.Sync()
			select {}
		}
	})
	env := tool.Invoke(inSession("conv-1"), parcelNote)
	fmt.Printf("ENVELOPE %s\n", env)
}

// effectsOf counts the effects per request reference: sent to dest, or
// noted in the store's file.
func effectsOf(t *testing.T, kind string, dest sentLog, s *boltstore.Store) map[string]int {
	t.Helper()
	n := map[string]int{}
	if kind == "effect" {
		s.DB().View(func(tx *bolt.Tx) error {
			if b := tx.Bucket([]byte("notes")); b != nil {
				b.ForEach(func(_, v []byte) error { n[string(v)]++; return nil })
			}
			return nil
		})
		return n
	}
	refs, err := dest.refs()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		n[r]++
	}
	return n
}

// tally counts answers by status and code.
func tally(envs []envelope.Envelope) map[string]int {
	n := map[string]int{}
	for _, env := range envs {
		k := string(env.Status)
		if env.Error != nil {
			k += "/" + env.Error.Code
		}
		n[k]++
	}
	return n
}

// checkEnvelopes checks what each answer said against the effects.
func checkEnvelopes(t *testing.T, what string, envs []envelope.Envelope, effects map[string]int) {
	t.Helper()
	for _, env := range envs {
		code := ""
		if env.Error != nil {
			code = env.Error.Code
		}
		switch env.Status {
		case envelope.Success:
			if effects[env.RequestRef] != 1 {
				t.Errorf("%s: success for %s, which has %d effects: %s", what, env.RequestRef, effects[env.RequestRef], env)
			}
		case envelope.DefiniteFailure:
			switch code {
			case envelope.CodeStoreUnavailable, envelope.CodeCancelled, envelope.CodeKeyReused:
				// Say nothing of the action / of this call's reference.
			default:
				if effects[env.RequestRef] != 0 {
					t.Errorf("%s: definite_failure (%s) for %s, which has %d effects: %s", what, code, env.RequestRef, effects[env.RequestRef], env)
				}
			}
			if env.Earlier != nil && env.Earlier.State == envelope.ActionSucceeded && effects[env.Earlier.RequestRef] != 1 {
				t.Errorf("%s: says the earlier %s succeeded, which has %d effects: %s", what, env.Earlier.RequestRef, effects[env.Earlier.RequestRef], env)
			}
		}
	}
	for ref, n := range effects {
		if n > 1 {
			t.Errorf("%s: %s has %d effects", what, ref, n)
		}
	}
}

// A process killed (SIGKILL) before or after its tool's effect, then the
// same file opened again at once by another process, which the model
// floods with the same action and a rewording of it, from many goroutines
// at once. The action has at most one effect; the rewording runs only if
// the earlier one was found not applied, and never beside it; every answer
// tells the truth about the effects.
func TestOneEffect_AProcessKilledMidCallThenResentAndRewordedInParallel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, kind := range []string{"reconcilable", "keyed", "at-most-once", "effect"} {
		for _, at := range []string{"before", "after"} {
			t.Run(kind+"/"+at, func(t *testing.T) {
				dir := t.TempDir()
				path, dest := filepath.Join(dir, "keys.db"), sentLog(filepath.Join(dir, "sent.log"))
				p := testproc.Start(t, "TestOneEffectKillHelper", "ONEEFFECT_DB="+path, "ONEEFFECT_DEST="+string(dest), "ONEEFFECT_KIND="+kind, "ONEEFFECT_AT="+at)
				if !p.Until(func(l string) bool { return strings.HasPrefix(l, "CRASHPOINT") }) {
					t.Fatalf("the helper never reached its crash point: %v\n%s", p.Wait(), p.Stderr.String())
				}
				p.Kill()
				s, err := boltstore.Open(path, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				tool := faultTool(t, s, dest, kind, nil)
				var mu sync.Mutex
				var envs []envelope.Envelope
				var wg sync.WaitGroup
				for i := range 8 {
					wg.Go(func() {
						in := parcelNote
						if i%2 == 1 {
							in = parcelNoteReworded
						}
						for range 2 {
							env := tool.Invoke(inSession("conv-1"), in)
							mu.Lock()
							envs = append(envs, env)
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				effects := effectsOf(t, kind, dest, s)
				checkEnvelopes(t, kind+"/"+at, envs, effects)
				total := 0
				for _, n := range effects {
					total += n
				}
				if total > 1 {
					t.Errorf("the action and its rewording, asked for together after the kill, have %d effects: %v", total, effects)
				}
				t.Logf("answers: %v; effects: %v", tally(envs), effects)
			})
		}
	}
}

// TestOneEffectDiskFullHelper makes diskFullActions actions, half through a
// reconcilable sender and half through Store.Effect, from 8 goroutines,
// while the file cannot grow (RLIMIT_FSIZE at its size: a full disk for
// this file, whose commits fail as soon as they need a new page, while
// those that fit in its free pages still commit); then lifts the limit and
// makes every action again, twice. It checks the answers against the
// effects itself (a failing helper fails TestOneEffect_ADiskThatFills…).
func TestOneEffectDiskFullHelper(t *testing.T) {
	path := os.Getenv("ONEEFFECT_FULL_DB")
	if path == "" {
		t.Skip("run by TestOneEffect_ADiskThatFills… only")
	}
	dest := sentLog(os.Getenv("ONEEFFECT_FULL_DEST"))
	mode := os.Getenv("ONEEFFECT_FULL_MODE")
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	// In modes "mid-call" and "close" the disk fills (the file cannot
	// grow past its size then), or the store is closed, at the tenth
	// effect: between effects and their outcomes (for Store.Effect:
	// inside the effect's transaction, before it commits).
	var fill func()
	var effectsMade atomic.Int32
	hook := func(at string) {
		if at == "after" && mode != "before" && effectsMade.Add(1) == 10 {
			fill()
		}
	}
	var tools []*agenttool.Tool
	build := func() {
		// Short leases, so that the second round takes over what the
		// first could not settle.
		tools = []*agenttool.Tool{faultTool(t, s, dest, "reconcilable", hook, time.Second), faultTool(t, s, dest, "effect", hook, time.Second)}
	}
	build()
	signal.Ignore(syscall.SIGXFSZ)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	limit := func(size int64) {
		full := lim
		full.Cur = uint64(size)
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &full); err != nil {
			panic(err)
		}
	}
	switch mode {
	case "before":
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		limit(max(fi.Size(), 64<<10))
	case "mid-call":
		fill = func() {
			fi, err := os.Stat(path)
			if err != nil {
				panic(err)
			}
			limit(fi.Size())
		}
	case "close":
		closing := s
		fill = func() { go closing.Close() } // Close waits for the write transaction the hook may run in
	}
	round := func(name string) map[int]envelope.Envelope {
		var mu sync.Mutex
		out := map[int]envelope.Envelope{}
		var wg sync.WaitGroup
		next := make(chan int)
		for range 8 {
			wg.Go(func() {
				for i := range next {
					env := tools[i%2].Invoke(inSession("s-"+strconv.Itoa(i)), fmt.Sprintf(`{"text":"action %d"}`, i))
					mu.Lock()
					out[i] = env
					mu.Unlock()
				}
			})
		}
		for i := range diskFullActions {
			next <- i
		}
		close(next)
		wg.Wait()
		fmt.Printf("ROUND %s %v\n", name, tally(slices.Collect(maps.Values(out))))
		return out
	}
	first := round("full")
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	if mode == "close" {
		s.Close()
		if s, err = boltstore.Open(path, nil); err != nil {
			t.Fatal(err)
		}
		build()
	}
	// Only the first round's call of an action ran before this: one that
	// said nothing was done by it must have done nothing.
	noted1, sent1 := effectsOf(t, "effect", dest, s), effectsOf(t, "reconcilable", dest, s)
	for i, env := range first {
		effects := sent1
		if i%2 == 1 {
			effects = noted1
		}
		if env.Status == envelope.DefiniteFailure && effects[env.RequestRef] != 0 {
			t.Errorf("action %d: its only call so far answered definite_failure, and the action has %d effects: %s", i, effects[env.RequestRef], env)
		}
	}
	second := round("freed")
	third := round("again")
	noted := effectsOf(t, "effect", dest, s)
	sent := effectsOf(t, "reconcilable", dest, s)
	for i := range diskFullActions {
		effects := sent
		if i%2 == 1 {
			effects = noted
		}
		for r, envs := range [][]envelope.Envelope{{first[i]}, {second[i]}, {third[i]}} {
			checkEnvelopes(t, fmt.Sprintf("action %d, round %d", i, r+1), envs, effects)
		}
		if third[i].Status != envelope.Success {
			t.Errorf("action %d: the third round, with the disk freed long since, answered %s", i, third[i])
		}
	}
	s.DB().View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("the file after the full disk: %v", err)
		}
		return nil
	})
}

const diskFullActions = 300

// The disk fills (the file cannot grow) while many calls run: claims,
// outcomes and effects fail mid-call, singly and in shared commits. Then
// it is freed and every action asked for again. No action has two
// effects, every answer tells the truth, and every action ends settled.
func TestOneEffect_ADiskThatFillsMidCallNeitherLiesNorRepeats(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	t.Run("full before the calls", func(t *testing.T) { diskFull(t, "before") })
	t.Run("full between effects and outcomes", func(t *testing.T) { diskFull(t, "mid-call") })
	t.Run("closed between effects and outcomes", func(t *testing.T) { diskFull(t, "close") })
}

func diskFull(t *testing.T, mode string) {
	dir := t.TempDir()
	p := testproc.Start(t, "TestOneEffectDiskFullHelper", "ONEEFFECT_FULL_DB="+filepath.Join(dir, "keys.db"), "ONEEFFECT_FULL_DEST="+filepath.Join(dir, "sent.log"), "ONEEFFECT_FULL_MODE="+mode)
	var lines []string
	for p.Lines.Scan() {
		lines = append(lines, p.Lines.Text())
	}
	err := p.Wait()
	for _, l := range lines {
		if strings.HasPrefix(l, "ROUND") {
			t.Log(l)
		}
	}
	if err != nil {
		t.Fatalf("the helper failed (%v):\n%s\n%s", err, strings.Join(lines, "\n"), p.Stderr.String())
	}
}

// memDest is a destination in memory that counts deliveries by reference;
// every third delivery's reply is lost (the effect applied, the tool told
// unknown).
type memDest struct {
	mu   sync.Mutex
	sent map[string]int
	n    int
}

func (d *memDest) deliver(ref string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent[ref]++
	d.n++
	if d.n%3 == 0 {
		return envelope.MarkUnknown(fmt.Errorf("reply to %s lost", ref))
	}
	return nil
}

func (d *memDest) snapshot() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for k, v := range d.sent {
		out[k] = v
	}
	return out
}

// Many goroutines make the same actions and their neighbours (other
// actions of the same session, and of another session) at once, on one
// file, while a third of the replies are lost and the sweeper runs. No
// reference is delivered twice, and every answer tells the truth.
func TestOneEffect_SameAndNeighbouringActionsInParallelWithLostReplies(t *testing.T) {
	for _, class := range []agenttool.Class{agenttool.Reconcilable, agenttool.Keyed, agenttool.AtMostOnce} {
		t.Run(class.String(), func(t *testing.T) {
			s, err := boltstore.Open(filepath.Join(t.TempDir(), "keys.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			dest := &memDest{sent: map[string]int{}}
			opts := agenttool.Options{Store: s, Class: class, Lease: 5 * time.Second, KeyTTL: time.Hour, WaitTimeout: 500 * time.Millisecond,
				ClockSkew: -1, Retry: agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond, MaxElapsed: time.Second}}
			if class == agenttool.Reconcilable {
				opts.Reconciler = reconcile.Func(func(_ context.Context, ref string) reconcile.Answer {
					if dest.snapshot()[ref] > 0 {
						return reconcile.AppliedWith([]byte(`"sent"`))
					}
					return reconcile.NotAppliedYet()
				})
			}
			tool, err := agenttool.New("send_note", "", func(ctx context.Context, in note) (string, error) {
				ref := agenttool.RequestRef(ctx)
				if class == agenttool.Keyed && dest.snapshot()[ref] > 0 {
					return "sent", nil // the destination honours the key
				}
				return "sent", dest.deliver(ref)
			}, opts)
			if err != nil {
				t.Fatal(err)
			}
			op, err := agenttool.NewOperator(s, tool)
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			var sweeping sync.WaitGroup
			sweeping.Go(func() {
				for ctx.Err() == nil {
					op.SweepOnce(ctx, agenttool.SweeperOptions{})
					time.Sleep(5 * time.Millisecond)
				}
			})
			var mu sync.Mutex
			var envs []envelope.Envelope
			var wg sync.WaitGroup
			for g := range 24 {
				wg.Go(func() {
					for k := range 12 {
						session := fmt.Sprintf("conv-%d", (g+k)%2)
						in := fmt.Sprintf(`{"text":"action %d"}`, (g*7+k)%3)
						env := tool.Invoke(inSession(session), in)
						mu.Lock()
						envs = append(envs, env)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			stop()
			sweeping.Wait()
			effects := dest.snapshot()
			checkEnvelopes(t, class.String(), envs, effects)
			t.Logf("answers: %v; effects: %v", tally(envs), effects)
		})
	}
}
