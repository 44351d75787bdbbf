package boltstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
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
	"github.com/retrysafe/retrysafe/reconcile"
)

type note struct {
	Text string `json:"text"`
}

func notesIn(t *testing.T, s *boltstore.Store) int {
	t.Helper()
	n := 0
	s.DB().View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte("notes")); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n
}

// appendNote returns a tool whose effect is a note written with Effect; fail
// decides, per attempt, what goes wrong after the effect.
func appendNote(t *testing.T, s *boltstore.Store, after func(attempt int) error) *agenttool.Tool {
	t.Helper()
	tool, err := agenttool.New("append_note", "Append a note.", func(ctx context.Context, in note) (json.RawMessage, error) {
		res, err := s.Effect(ctx, func(tx *bolt.Tx) (json.RawMessage, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("notes"))
			if err != nil {
				return nil, err
			}
			n, _ := b.NextSequence()
			if err := b.Put([]byte(strconv.FormatUint(n, 10)), []byte(in.Text)); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"note_number":` + strconv.FormatUint(n, 10) + `}`), nil
		})
		if err != nil {
			return nil, err
		}
		info, _ := agenttool.CallInfoFrom(ctx)
		if after != nil {
			if err := after(info.Attempt); err != nil {
				return nil, err
			}
		}
		return res, nil
	}, agenttool.Options{Store: s, Class: agenttool.Reconcilable, Reconciler: s.Reconciler(),
		Retry: agenttool.RetryPolicy{InitialInterval: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func scope() context.Context {
	return agenttool.WithScope(context.Background(), "tenant-1", "incident-104")
}

func TestEffectIsAppliedOnce(t *testing.T) {
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "notes.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The reply is lost after the effect committed: the reconciler finds it.
	lost := appendNote(t, s, func(attempt int) error { return errors.New("connection reset by peer") })
	env := lost.Invoke(scope(), `{"text":"Check carrier scan"}`)
	if env.Status != envelope.Success || !env.Reconciled || string(env.Result) != `{"note_number":1}` || notesIn(t, s) != 1 {
		t.Fatalf("after a lost reply: %s with %d notes", env, notesIn(t, s))
	}
	// A keyed-style retry inside one call finds the effect already applied.
	flaky := appendNote(t, s, func(attempt int) error {
		if attempt == 1 {
			return envelope.MarkTransient(errors.New("421 try again"))
		}
		return nil
	})
	env = flaky.Invoke(scope(), `{"text":"Call the driver"}`)
	if env.Status != envelope.Success || env.Attempts != 2 || string(env.Result) != `{"note_number":2}` || notesIn(t, s) != 2 {
		t.Fatalf("a retry after the effect: %s with %d notes", env, notesIn(t, s))
	}
	if _, err := s.Effect(context.Background(), func(*bolt.Tx) (json.RawMessage, error) { return nil, nil }); envelope.Classify(err) != envelope.Definite {
		t.Errorf("Effect outside a guarded call: %v", err)
	}
}

func TestEffectRefusesAStaleHolder(t *testing.T) {
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "notes.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ran := false
	var effectErr error
	tool, _ := agenttool.New("probe", "", func(ctx context.Context, in note) (string, error) {
		// While this call runs, another takes its key over (its lease had
		// lapsed, say, during a long pause).
		ref := agenttool.RequestRef(ctx)
		rec, err := s.Get(ctx, ref)
		if err != nil {
			return "", err
		}
		if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: ref, Tool: rec.Tool, Principal: rec.Principal, Session: rec.Session, Fingerprint: rec.Fingerprint,
			Owner: "other", Now: time.Now().Add(2 * time.Hour), Lease: time.Hour, TakeOver: true}); err != nil {
			return "", err
		}
		_, effectErr = s.Effect(ctx, func(*bolt.Tx) (json.RawMessage, error) { ran = true; return nil, nil })
		return "", effectErr
	}, agenttool.Options{Store: s, Class: agenttool.Reconcilable, SettledByOperators: true, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	env := tool.Invoke(scope(), `{"text":"x"}`)
	if ran || !errors.Is(effectErr, storekit.ErrFenced) || envelope.Classify(effectErr) != envelope.Transient {
		t.Fatalf("a stale holder's Effect: ran=%v, err=%v", ran, effectErr)
	}
	if env.Status == envelope.Success {
		t.Errorf("envelope %s for an effect that did not happen", env)
	}
	if a := s.Reconciler().Check(context.Background(), reconcile.Request{Ref: env.RequestRef}); a.Verdict != reconcile.NotApplied {
		t.Errorf("reconciler after a refused effect: %v, want not applied", a.Verdict)
	}
}

func TestOpenEndsLeasesOfDeadProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := s.Claim(context.Background(), storekit.ClaimRequest{Key: "k/1", Owner: "dead", Now: now, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	s.Close() // the process "dies" holding the key
	s, err = boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Claim(context.Background(), storekit.ClaimRequest{Key: "k/1", Owner: "new", Now: now.Add(time.Second), Lease: time.Hour})
	if err != nil || res.Claimed || res.Record.State != agenttool.Unknown {
		t.Fatalf("claim after reopening: %+v, %v; want the dead holder's record unknown at once", res, err)
	}
}

// Once an Effect has committed, nothing can forget the key: a tool that
// then reports a transient error (retries exhausted) or a definite one does
// not free the key or record "not applied", and the next call does not
// apply the effect again.
func TestAnAppliedEffectIsNeverReleased(t *testing.T) {
	for name, after := range map[string]error{
		"transient": envelope.MarkTransient(errors.New("503 from the notifier, after the note was written")),
		"definite":  envelope.MarkDefinite(errors.New("the notifier refused the follow-up"), "refused"),
	} {
		t.Run(name, func(t *testing.T) {
			s, err := boltstore.Open(filepath.Join(t.TempDir(), "notes.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tool := appendNote(t, s, func(int) error { return after })
			in := `{"text":"check the carrier scan"}`
			first := tool.Invoke(scope(), in)
			if first.Status != envelope.Success || !first.Reconciled {
				t.Errorf("after an effect committed and the tool failed: %s; want the effect confirmed", first)
			}
			again := tool.Invoke(scope(), in)
			if again.Status != envelope.Success || notesIn(t, s) != 1 {
				t.Fatalf("next call: %s, %d notes; want one note, replayed", again, notesIn(t, s))
			}
		})
	}
}

// A panic in an Effect callback fails its own write only: it is reported to
// its own caller, the writes that shared its transaction commit, and the
// store keeps working.
// noteAtOnce calls tool n times at once, each in a session of its own,
// every fourth with the text "boom", and fails with wedged unless every
// call returns within 10 s. A panic that reaches a caller is recovered, as
// a server recovers a handler's, and leaves that call's envelope empty.
func noteAtOnce(t *testing.T, tool *agenttool.Tool, n int, wedged string) []envelope.Envelope {
	t.Helper()
	envs := make([]envelope.Envelope, n)
	var wg sync.WaitGroup
	for i := range n {
		text := "note-" + strconv.Itoa(i)
		if i%4 == 0 {
			text = "boom"
		}
		ctx := agenttool.WithScope(context.Background(), "tenant-1", "s-"+strconv.Itoa(i))
		wg.Go(func() {
			defer func() { recover() }()
			envs[i] = tool.Invoke(ctx, `{"text":"`+text+`"}`)
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal(wedged)
	}
	return envs
}

func TestPanickingEffectFailsOnlyItsOwnWrite(t *testing.T) {
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "notes.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tool, err := agenttool.New("append_note", "", func(ctx context.Context, in note) (json.RawMessage, error) {
		return s.Effect(ctx, func(tx *bolt.Tx) (json.RawMessage, error) {
			if in.Text == "boom" {
				panic("the callback's bug")
			}
			b, err := tx.CreateBucketIfNotExists([]byte("notes"))
			if err != nil {
				return nil, err
			}
			return json.RawMessage(`{}`), b.Put([]byte(in.Text), nil)
		})
	}, agenttool.Options{Store: s, Class: agenttool.Reconcilable, Reconciler: s.Reconciler()})
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	envs := noteAtOnce(t, tool, n, "the store is wedged after a panicking callback")
	for i, env := range envs {
		if i%4 == 0 {
			if env.Status != envelope.DefiniteFailure || env.Error.Code != "effect_panicked" {
				t.Errorf("call %d, whose callback panicked: %s", i, env)
			}
			continue
		}
		if env.Status != envelope.Success {
			t.Errorf("call %d, sharing a batch with a panic: %s", i, env)
		}
	}
	if got := notesIn(t, s); got != n-n/4 {
		t.Errorf("%d notes, want %d", got, n-n/4)
	}
	// The store still works.
	if env := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-1", "later"), `{"text":"after"}`); env.Status != envelope.Success {
		t.Errorf("after the panics: %s", env)
	}
}

// A commit handler that an effect's callback registers runs after the
// commit, where no recovery of the write's own reaches it. One that
// panics leaves the store working, and no call whose effect committed is
// told it was not applied.
func TestACommitHandlerThatPanicsNeitherStopsTheStoreNorDeniesTheEffect(t *testing.T) {
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "notes.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var panicked atomic.Int32
	tool, err := agenttool.New("append_note", "", func(ctx context.Context, in note) (json.RawMessage, error) {
		return s.Effect(ctx, func(tx *bolt.Tx) (json.RawMessage, error) {
			if in.Text == "boom" {
				tx.OnCommit(func() {
					panicked.Add(1)
					panic("the commit handler's bug")
				})
			}
			b, err := tx.CreateBucketIfNotExists([]byte("notes"))
			if err != nil {
				return nil, err
			}
			return json.RawMessage(`{}`), b.Put([]byte(in.Text+"/"+agenttool.RequestRef(ctx)), nil)
		})
	}, agenttool.Options{Store: s, Class: agenttool.Reconcilable, Reconciler: s.Reconciler()})
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	envs := noteAtOnce(t, tool, n, "the store's writes stopped after a commit handler panicked")
	// A call whose claim shared the transaction is told the store failed
	// and the tool did not run — true: it did not — and a later call of
	// its action settles it. One whose effect committed is never told it
	// failed.
	written := map[string]bool{}
	s.DB().View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("notes")).ForEach(func(k, _ []byte) error {
			written[string(k[strings.IndexByte(string(k), '/')+1:])] = true
			return nil
		})
	})
	for i, env := range envs {
		if written[env.RequestRef] && env.Status == envelope.DefiniteFailure {
			t.Errorf("call %d, whose effect committed, was told it failed: %s", i, env.Status)
		}
	}
	if panicked.Load() == 0 {
		t.Error("no commit handler ran: the test exercised nothing")
	}
	if env := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-1", "later"), `{"text":"after"}`); env.Status != envelope.Success {
		t.Errorf("after the panics: %s", env)
	}
}
