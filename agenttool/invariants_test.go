package agenttool_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mrand "math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// I1: 64 goroutines calling one logical action run the tool once, and all
// 64 envelopes agree.
func TestI1_ConcurrentCallsRunToolOnce(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		m := &mailServer{delay: 20 * time.Millisecond}
		tool := newEmailTool(t, m, agenttool.Options{Store: open(), Class: agenttool.Reconcilable})
		envs := make([]envelope.Envelope, 64)
		var wg sync.WaitGroup
		for i := range envs {
			wg.Go(func() { envs[i] = tool.Invoke(scoped(), emailToAna) })
		}
		wg.Wait()
		if got := m.runs.Load(); got != 1 {
			t.Fatalf("tool ran %d times, want 1", got)
		}
		replayed := 0
		for _, e := range envs {
			mustStatus(t, e, envelope.Success)
			if e.RequestRef != envs[0].RequestRef || !bytes.Equal(e.Result, envs[0].Result) || e.Attempts != 1 {
				t.Fatalf("envelopes disagree:\n%s\n%s", envs[0], e)
			}
			if e.Replayed {
				replayed++
			}
		}
		if replayed != 63 {
			t.Errorf("%d envelopes marked replayed, want 63", replayed)
		}
	})
}

// I1: after an attempt whose outcome is unknown, a reconcilable or
// at-most-once tool is never run again for that key.
func TestI1_UnknownOutcomeIsNeverRunAgain(t *testing.T) {
	for _, class := range []agenttool.Class{agenttool.Reconcilable, agenttool.AtMostOnce} {
		t.Run(class.String(), func(t *testing.T) {
			storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
				m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
				tool := newEmailTool(t, m, agenttool.Options{Store: open(), Class: class})
				first := tool.Invoke(scoped(), emailToAna)
				mustStatus(t, first, envelope.UnknownOutcome)
				// The model repeats the call, with the same intent written differently.
				again := tool.Invoke(scoped(), `{ "subject":"Lunch", "body":"See you at noon.", "to":"ana@example.com" }`)
				mustStatus(t, again, envelope.UnknownOutcome)
				if m.runs.Load() != 1 || m.count() != 1 {
					t.Fatalf("tool ran %d times with %d effects, want 1 and 1", m.runs.Load(), m.count())
				}
				if !again.Replayed || again.RequestRef != first.RequestRef {
					t.Errorf("repeat = %s, want a replayed unknown outcome for %s", again, first.RequestRef)
				}
				wantNext := map[agenttool.Class]envelope.Next{agenttool.Reconcilable: envelope.DoNotRetry, agenttool.AtMostOnce: envelope.AskHuman}[class]
				if first.Next != wantNext || again.Next != wantNext {
					t.Errorf("next = %s then %s, want %s", first.Next, again.Next, wantNext)
				}
			})
		})
	}
}

// I1: a pending record whose lease expired (its process died) is unknown,
// not free.
func TestI1_ExpiredLeaseIsUnknownNotFree(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store, clk := open(), newClock()
		m := &mailServer{}
		opts := agenttool.Options{Store: store, Class: agenttool.Reconcilable, Now: clk.Now, Lease: time.Minute}
		tool := newEmailTool(t, m, opts)
		// A first process claimed the key and died before recording anything.
		ref := recordOfRef(t, emailToAna)
		dead := holderOf(t, store, ref, clk.Now(), emailToAna)
		clk.Advance(2 * time.Minute)
		env := tool.Invoke(scoped(), emailToAna)
		mustStatus(t, env, envelope.UnknownOutcome)
		if m.runs.Load() != 0 {
			t.Fatalf("the tool ran %d times after a dead holder; an expired lease must mean unknown", m.runs.Load())
		}
		rec, err := store.Get(context.Background(), ref)
		if err != nil || rec.State != agenttool.Unknown {
			t.Fatalf("record = %+v, %v; want state unknown", rec, err)
		}
		// The dead holder, if it wakes, is fenced out.
		if err := store.Finish(context.Background(), storekit.FinishRequest{Key: ref, Token: dead, State: agenttool.Succeeded, Now: clk.Now(), TTL: time.Hour}); !errors.Is(err, storekit.ErrFenced) {
			t.Errorf("stale holder's Finish = %v, want ErrFenced", err)
		}
	})
}

// holderOf claims ref the way a guarded call for input would and returns the
// fencing token; the holder then "dies".
func holderOf(t *testing.T, store agenttool.Store, ref string, now time.Time, input string) uint64 {
	t.Helper()
	// Derive the principal and fingerprint digests through a real call on a
	// throwaway store that records them.
	rec := recordOf(t, input)
	res, err := store.Claim(context.Background(), storekit.ClaimRequest{
		Key: ref, Tool: "send_email", Principal: rec.Principal, Session: rec.Session, Fingerprint: rec.Fingerprint,
		Owner: "dead-process", Now: now, Lease: time.Minute, FenceScope: rec.FenceScope,
	})
	if err != nil || !res.Claimed {
		t.Fatalf("forging a claim: %+v, %v", res, err)
	}
	return res.Record.Token
}

// recordOf returns the record a successful call for input leaves behind.
func recordOf(t *testing.T, input string) agenttool.Record {
	t.Helper()
	s := memstore.New()
	tool := newEmailTool(t, &mailServer{}, agenttool.Options{Store: s, Class: agenttool.Reconcilable})
	env := tool.Invoke(scoped(), input)
	rec, err := s.Get(context.Background(), env.RequestRef)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// I2: the envelope never lies. Each row scripts the destination and checks
// the status against the effects it recorded.
func TestI2_EnvelopeMatchesEffects(t *testing.T) {
	refused := envelope.MarkDefinite(errors.New("550 mailbox unavailable"), "invalid_recipient")
	unavailable := envelope.MarkTransient(errors.New("421 try again later"))
	tests := []struct {
		name        string
		class       agenttool.Class
		dedupe      bool
		script      func(n int) (bool, error)
		wantStatus  envelope.Status
		wantEffects int
		wantRuns    int64
		wantState   agenttool.State // 0: no record left
	}{
		{"success", agenttool.Reconcilable, false, nil, envelope.Success, 1, 1, agenttool.Succeeded},
		{"definite failure", agenttool.Reconcilable, false, func(int) (bool, error) { return false, refused }, envelope.DefiniteFailure, 0, 1, agenttool.Failed},
		{"transient then success", agenttool.Reconcilable, false, func(n int) (bool, error) {
			if n == 1 {
				return false, unavailable
			}
			return true, nil
		}, envelope.Success, 1, 2, agenttool.Succeeded},
		{"transient every time", agenttool.AtMostOnce, false, func(int) (bool, error) { return false, unavailable }, envelope.DefiniteFailure, 0, 3, 0},
		{"lost reply, reconcilable", agenttool.Reconcilable, false, func(int) (bool, error) { return true, errLostReply }, envelope.UnknownOutcome, 1, 1, agenttool.Unknown},
		{"lost request, at-most-once", agenttool.AtMostOnce, false, func(int) (bool, error) { return false, errLostReply }, envelope.UnknownOutcome, 0, 1, agenttool.Unknown},
		{"lost reply, keyed retry with same key", agenttool.Keyed, true, func(n int) (bool, error) {
			if n == 1 {
				return true, errLostReply
			}
			return true, nil
		}, envelope.Success, 1, 2, agenttool.Succeeded},
		{"lost reply then refused, keyed", agenttool.Keyed, true, func(n int) (bool, error) {
			if n == 1 {
				return true, errLostReply
			}
			return false, unavailable
		}, envelope.UnknownOutcome, 1, 3, agenttool.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := memstore.New()
			m := &mailServer{script: tt.script, dedupe: tt.dedupe}
			env := newEmailTool(t, m, agenttool.Options{Store: store, Class: tt.class}).Invoke(scoped(), emailToAna)
			mustStatus(t, env, tt.wantStatus)
			if m.count() != tt.wantEffects || m.runs.Load() != tt.wantRuns {
				t.Errorf("effects %d runs %d, want %d and %d", m.count(), m.runs.Load(), tt.wantEffects, tt.wantRuns)
			}
			if int64(env.Attempts) != tt.wantRuns {
				t.Errorf("attempts = %d, want %d", env.Attempts, tt.wantRuns)
			}
			rec, err := store.Get(context.Background(), env.RequestRef)
			switch {
			case tt.wantState == 0 && !errors.Is(err, agenttool.ErrNotFound):
				t.Errorf("record = %+v, %v; want the key released", rec, err)
			case tt.wantState != 0 && (err != nil || rec.State != tt.wantState):
				t.Errorf("record state = %v (%v), want %v", rec.State, err, tt.wantState)
			}
			if err := env.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// I2 (pitfall "effect done, completion write failed"): the envelope says
// success because the effect happened, and a retry does not run it again.
func TestI2_CompletionWriteFailsAfterEffect(t *testing.T) {
	store, clk := &faultyStore{Store: memstore.New()}, newClock()
	m := &mailServer{}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Now: clk.Now})
	store.failFinish.Store(true)
	env := tool.Invoke(scoped(), emailToAna)
	mustStatus(t, env, envelope.Success)
	store.failFinish.Store(false)
	clk.Advance(2 * time.Minute) // the holder's lease lapses
	again := tool.Invoke(scoped(), emailToAna)
	mustStatus(t, again, envelope.UnknownOutcome)
	if m.runs.Load() != 1 {
		t.Fatalf("tool ran %d times, want 1", m.runs.Load())
	}
}

// I2 (pitfall "completion dropped by a cancelled context"): the caller's
// context is cancelled while the tool runs; the outcome is still recorded.
func TestI2_OutcomeRecordedAfterCallerCancels(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		ctx, cancel := context.WithCancel(scoped())
		m := &mailServer{script: func(int) (bool, error) { cancel(); return true, nil }}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable})
		env := tool.Invoke(ctx, emailToAna)
		mustStatus(t, env, envelope.Success)
		rec, err := store.Get(context.Background(), env.RequestRef)
		if err != nil || rec.State != agenttool.Succeeded {
			t.Fatalf("record after a cancelled caller = %+v, %v; want succeeded", rec, err)
		}
	})
}

// I3: the key comes from trusted code. A model-supplied key is refused by
// default, stripped on request, and never changes the key.
func TestI3_ModelCannotChooseTheKey(t *testing.T) {
	m := &mailServer{}
	store := memstore.New()
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable})
	for _, field := range []string{"idempotency_key", "idempotencyKey", "Idempotency-Key", "request_id", "requestId", "dedup_key"} {
		in := `{"to":"ana@example.com","subject":"Lunch","` + field + `":"k-1"}`
		env := tool.Invoke(scoped(), in)
		mustStatus(t, env, envelope.DefiniteFailure)
		if env.Error.Code != envelope.CodeModelSuppliedKey || env.Next != envelope.FixInput || !strings.Contains(env.Error.Message, field) {
			t.Errorf("%s: envelope %s, want model_supplied_key naming the field", field, env)
		}
	}
	if m.runs.Load() != 0 || store.Len() != 0 {
		t.Fatalf("refused calls ran the tool %d times and left %d records", m.runs.Load(), store.Len())
	}

	var seen []string
	wrapped, err := agenttool.Wrap(recordingTool{seen: &seen}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, SettledByOperators: true, ModelKeys: agenttool.StripModelKeys,
		IdentifyingFields: []string{"to"}})
	if err != nil {
		t.Fatal(err)
	}
	// The first call carries a key, so that the tool has a key to see.
	keyed1 := wrapped.Invoke(scoped(), `{"to":"ana@example.com","idempotency_key":"model-1"}`)
	plain := wrapped.Invoke(scoped(), `{"to":"ana@example.com"}`)
	keyed2 := wrapped.Invoke(scoped(), `{"to":"ana@example.com","idempotency_key":"model-2"}`)
	if plain.RequestRef != keyed1.RequestRef || keyed1.RequestRef != keyed2.RequestRef {
		t.Errorf("model keys changed the reference: %s %s %s", plain.RequestRef, keyed1.RequestRef, keyed2.RequestRef)
	}
	if len(seen) != 1 || strings.Contains(seen[0], "model-") {
		t.Errorf("tool saw %q; want one run without the model's key", seen)
	}
	if !keyed2.Replayed {
		t.Errorf("a retry with another model key ran again: %s", keyed2)
	}
}

type recordingTool struct{ seen *[]string }

func (recordingTool) Name() string        { return "send_email" }
func (recordingTool) Description() string { return "Send an email." }
func (r recordingTool) Call(_ context.Context, in string) (string, error) {
	*r.seen = append(*r.seen, in)
	return `{"ok":true}`, nil
}

// I3: the key is bound to the trusted scope; the same input in another
// session or for another principal is another action.
func TestI3_KeyBoundToScope(t *testing.T) {
	m := &mailServer{}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable})
	a := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9"), emailToAna)
	b := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10"), emailToAna)
	c := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-42/user-8", "conversation-9"), emailToAna)
	d := tool.Invoke(agenttool.WithActionID(agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9"), "step-1"), emailToAna)
	refs := map[string]bool{a.RequestRef: true, b.RequestRef: true, c.RequestRef: true, d.RequestRef: true}
	if len(refs) != 4 {
		t.Errorf("refs %v are not distinct across scope and action id", refs)
	}
	if !strings.HasPrefix(a.RequestRef, "send_email/") {
		t.Errorf("ref %q does not start with the tool name", a.RequestRef)
	}
	// An action id makes the action's identity, whatever the wording.
	e := tool.Invoke(agenttool.WithActionID(scoped(), "step-2"), emailToAna)
	f := tool.Invoke(agenttool.WithActionID(scoped(), "step-2"), `{"to":"ana@example.com","subject":"Lunch?"}`)
	mustStatus(t, f, envelope.DefiniteFailure)
	if f.RequestRef != e.RequestRef || f.Error.Code != envelope.CodeKeyReused {
		t.Errorf("same action id, other input: %s", f)
	}
}

// I4: if the store cannot claim the key, the tool is not run.
func TestI4_FailClosedWhenStoreIsDown(t *testing.T) {
	t.Run("store refuses", func(t *testing.T) {
		store := &faultyStore{Store: memstore.New()}
		store.failClaim.Store(true)
		m := &mailServer{}
		env := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed}).Invoke(scoped(), emailToAna)
		mustStatus(t, env, envelope.DefiniteFailure)
		if env.Error.Code != envelope.CodeStoreUnavailable || !strings.Contains(env.Error.Message, "connection to store refused") {
			t.Errorf("envelope %s, want store_unavailable with the cause", env)
		}
		if m.runs.Load() != 0 {
			t.Fatal("tool ran without a claim")
		}
	})
	t.Run("bolt file closed", func(t *testing.T) {
		store := openBolt(t, filepath.Join(t.TempDir(), "keys.db"))
		store.Close()
		m := &mailServer{}
		env := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable}).Invoke(scoped(), emailToAna)
		mustStatus(t, env, envelope.DefiniteFailure)
		if env.Error.Code != envelope.CodeStoreUnavailable || m.runs.Load() != 0 {
			t.Fatalf("envelope %s after %d runs, want store_unavailable and no run", env, m.runs.Load())
		}
	})
	t.Run("corrupt stored outcome", func(t *testing.T) {
		store := memstore.New()
		m := &mailServer{}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Codec: brokenCodec{}})
		first := tool.Invoke(scoped(), emailToAna)
		mustStatus(t, first, envelope.Success)
		// The record says the action succeeded; only its result is lost. The
		// envelope says so: a success without a result, never "nothing was
		// done", and no second run.
		again := tool.Invoke(scoped(), emailToAna)
		mustStatus(t, again, envelope.Success)
		if !again.Replayed || len(again.Result) != 0 || !strings.Contains(again.Note, "cannot be read") || m.runs.Load() != 1 {
			t.Fatalf("unreadable record: %s after %d runs; want a replayed success without its result and no second run", again, m.runs.Load())
		}
		// A failure whose outcome cannot be read is still not applied.
		failing := newEmailTool(t, &mailServer{script: func(int) (bool, error) {
			return false, envelope.MarkDefinite(errors.New("550 no such user"), "smtp_550")
		}}, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Codec: brokenCodec{}})
		in := `{"to":"nobody@example.com","subject":"Lunch"}`
		mustStatus(t, failing.Invoke(scoped(), in), envelope.DefiniteFailure)
		if env := failing.Invoke(scoped(), in); env.Status != envelope.DefiniteFailure || strings.Contains(env.Note, "Nothing was done. Try") {
			t.Errorf("an unreadable failure: %s", env)
		}
	})
}

// brokenCodec stores outcomes it cannot read back.
type brokenCodec struct{}

func (brokenCodec) Encode(_ string, b []byte) ([]byte, error) { return b, nil }
func (brokenCodec) Decode(string, []byte) ([]byte, error) {
	return nil, errors.New("cipher: message authentication failed")
}

// I5: the same key with a different input fingerprint runs nothing and
// leaves the first record untouched.
func TestI5_KeyReusedWithDifferentInput(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, IdentifyingFields: []string{"to", "subject"}})
		first := tool.Invoke(scoped(), emailToAna)
		mustStatus(t, first, envelope.Success)
		before, err := store.Get(context.Background(), first.RequestRef)
		if err != nil {
			t.Fatal(err)
		}
		other := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch","body":"Actually, see you at one."}`)
		mustStatus(t, other, envelope.DefiniteFailure)
		if other.Error.Code != envelope.CodeKeyReused || other.RequestRef != first.RequestRef || other.Next != envelope.AskHuman {
			t.Errorf("envelope %s, want key_reused_with_different_input for %s", other, first.RequestRef)
		}
		after, err := store.Get(context.Background(), first.RequestRef)
		if err != nil || !recordsEqual(before, after) {
			t.Errorf("first record changed:\n%+v\n%+v", before, after)
		}
		if m.runs.Load() != 1 {
			t.Errorf("tool ran %d times, want 1", m.runs.Load())
		}
		// The same input again still replays.
		if again := tool.Invoke(scoped(), emailToAna); !again.Replayed || again.Status != envelope.Success {
			t.Errorf("same input after a mismatch: %s", again)
		}
	})
}

func recordsEqual(a, b agenttool.Record) bool {
	return a.Key == b.Key && a.State == b.State && a.Fingerprint == b.Fingerprint && a.Token == b.Token &&
		a.Updated.Equal(b.Updated) && bytes.Equal(a.Outcome, b.Outcome) && a.Principal == b.Principal
}

// I6: a record made for one principal is never replayed to, resolved by or
// revealed to another.
func TestI6_PrincipalBinding(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable})
		ana := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-1/ana", "shared-session"), emailToAna)
		eve := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-2/eve", "shared-session"), emailToAna)
		mustStatus(t, ana, envelope.Success)
		mustStatus(t, eve, envelope.Success)
		if eve.Replayed || eve.RequestRef == ana.RequestRef || bytes.Equal(eve.Result, ana.Result) {
			t.Fatalf("another principal saw the first principal's record: %s", eve)
		}
		// Even a record reached under the very same key is not revealed to
		// another principal: the store refuses before anything is written.
		rec, err := store.Get(context.Background(), ana.RequestRef)
		if err != nil {
			t.Fatal(err)
		}
		res, err := store.Claim(context.Background(), storekit.ClaimRequest{
			Key: ana.RequestRef, Tool: "send_email", Principal: agenttool.Digest{1}, Fingerprint: rec.Fingerprint,
			Owner: "eve", Now: time.Now(), Lease: time.Minute, TakeOver: true,
		})
		if err != nil || res.Claimed || res.Conflict != storekit.OtherPrincipal {
			t.Fatalf("claim by another principal = %+v, %v; want OtherPrincipal", res, err)
		}
		after, _ := store.Get(context.Background(), ana.RequestRef)
		if !recordsEqual(rec, after) {
			t.Error("a refused claim changed the record")
		}
	})
}

// I7: a key lifetime shorter than the retry window plus the lease is
// rejected at construction, naming both durations.
func TestI7_WindowsThatFit(t *testing.T) {
	_, err := agenttool.New("send_email", "Send an email.", (&mailServer{}).send, agenttool.Options{
		Store: memstore.New(), Class: agenttool.Keyed,
		Retry: agenttool.RetryPolicy{MaxElapsed: 12 * time.Minute}, Lease: time.Minute, KeyTTL: 10 * time.Minute,
	})
	if !errors.Is(err, agenttool.ErrInvalidOptions) {
		t.Fatalf("err = %v, want ErrInvalidOptions", err)
	}
	for _, want := range []string{"key lifetime 10m0s", "retry window 12m0s", "lease 1m0s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := agenttool.New("send_email", "", (&mailServer{}).send, agenttool.Options{
		Store: memstore.New(), Class: agenttool.Keyed, Lease: -time.Second,
	}); !errors.Is(err, agenttool.ErrInvalidOptions) || !strings.Contains(err.Error(), "Lease") {
		t.Errorf("negative lease: %v", err)
	}
}

// I8: the store keeps digests of inputs, not inputs, and stored outcomes
// pass through the codec.
func TestI8_StoreKeepsNoInput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	store := openBolt(t, path)
	codec := newSealCodec(t)
	m := &mailServer{}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Codec: codec})
	secret := `{"to":"ana@example.com","subject":"Diagnosis","body":"SECRET-LAB-RESULT-4711"}`
	first := tool.Invoke(scoped(), secret)
	mustStatus(t, first, envelope.Success)
	replay := tool.Invoke(scoped(), secret)
	if !replay.Replayed || !bytes.Equal(replay.Result, first.Result) {
		t.Fatalf("replay through the codec = %s", replay)
	}
	store.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"SECRET-LAB-RESULT-4711", "ana@example.com", "tenant-42/user-7", "conversation-9", "Diagnosis", "@mail.test"} {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("the store file contains %q", s)
		}
	}
}

// sealCodec encrypts outcomes with AES-GCM, binding them to their key.
type sealCodec struct{ aead cipher.AEAD }

func newSealCodec(t *testing.T) sealCodec {
	block, err := aes.NewCipher(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	return sealCodec{aead}
}

func (c sealCodec) Encode(key string, b []byte) ([]byte, error) {
	nonce := make([]byte, c.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return c.aead.Seal(nonce, nonce, b, []byte(key)), nil
}

func (c sealCodec) Decode(key string, b []byte) ([]byte, error) {
	n := c.aead.NonceSize()
	if len(b) < n {
		return nil, errors.New("short ciphertext")
	}
	return c.aead.Open(nil, b[:n], b[n:], []byte(key))
}

// I1 (pitfall "a rejected caller cleaning up"): a keyed call whose holder's
// lease lapsed takes over with the same key, and the old holder can neither
// record its outcome over the new one nor release the new holder's claim.
func TestI1_TakeoverFencesTheOldHolder(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store, clk := open(), newClock()
		ref := recordOfRef(t, emailToAna)
		old := holderOf(t, store, ref, clk.Now(), emailToAna)
		clk.Advance(2 * time.Minute)
		// While the new holder runs, the record is pending again: only the
		// token tells the old holder from the new one.
		ctx := context.Background()
		m := &mailServer{dedupe: true, script: func(int) (bool, error) {
			if err := store.Release(ctx, ref, old); !errors.Is(err, storekit.ErrFenced) {
				t.Errorf("old holder's Release = %v, want ErrFenced", err)
			}
			if err := store.Finish(ctx, storekit.FinishRequest{Key: ref, Token: old, State: agenttool.Failed, Now: clk.Now(), TTL: time.Hour}); !errors.Is(err, storekit.ErrFenced) {
				t.Errorf("old holder's Finish = %v, want ErrFenced", err)
			}
			if err := store.Renew(ctx, storekit.RenewRequest{Key: ref, Token: old, Until: clk.Now().Add(time.Hour), Now: clk.Now()}); !errors.Is(err, storekit.ErrFenced) {
				t.Errorf("old holder's Renew = %v, want ErrFenced", err)
			}
			return true, nil
		}}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed, Now: clk.Now})
		env := tool.Invoke(scoped(), emailToAna)
		mustStatus(t, env, envelope.Success)
		if env.RequestRef != ref || m.count() != 1 {
			t.Fatalf("takeover: %s with %d effects", env, m.count())
		}
		if rec, _ := store.Get(ctx, ref); rec.State != agenttool.Succeeded {
			t.Errorf("record after the old holder's attempts: %v", rec.State)
		}
	})
}

func recordOfRef(t *testing.T, input string) string {
	t.Helper()
	return recordOf(t, input).Key
}

// honestDest applies effects by ref, knows what is in flight, and answers
// checks truthfully: Applied, Pending while a request for the ref is in
// flight, NotApplied otherwise.
type honestDest struct {
	mu       sync.Mutex
	effects  map[string]int
	inflight map[string]int
	rng      *mrand.Rand
}

func (d *honestDest) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	ref := req.Ref
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.effects[ref] > 0:
		return reconcile.AppliedWith([]byte(`{"found":true}`))
	case d.inflight[ref] > 0:
		return reconcile.StillPending()
	}
	return reconcile.NotAppliedYet()
}

func (d *honestDest) send(ctx context.Context, in emailInput) (sent, error) {
	ref := agenttool.RequestRef(ctx)
	d.mu.Lock()
	d.inflight[ref]++
	r := d.rng.IntN(10)
	delay := time.Duration(d.rng.IntN(3)) * time.Millisecond
	d.mu.Unlock()
	time.Sleep(delay) // the destination's latency; orders nothing
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inflight[ref]--
	switch {
	case r < 3:
		return sent{}, errLostReply // not applied, reply lost
	case r < 6:
		d.effects[ref]++
		return sent{}, errLostReply // applied, reply lost
	case r < 7:
		return sent{}, envelope.MarkTransient(errors.New("503"))
	}
	d.effects[ref]++
	return sent{MessageID: ref}, nil
}

// I1 under a sweeper racing the calls: at most one effect per key, and no
// success without its effect.
func TestI1_SweeperRacingCallsNeverApplyTwice(t *testing.T) {
	for seed := range uint64(40) {
		d := &honestDest{effects: map[string]int{}, inflight: map[string]int{}, rng: mrand.New(mrand.NewPCG(seed, 1))}
		store := memstore.New()
		tool, err := agenttool.New("send_email", "Send.", d.send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
			Reconciler: d, Retry: fastRetry, Lease: 30 * time.Millisecond, WaitTimeout: 5 * time.Millisecond, ClockSkew: -1})
		if err != nil {
			t.Fatal(err)
		}
		op, _ := agenttool.NewOperator(store, tool)
		inputs := []string{lunch, lunchReworded, `{"to":"ana@example.com","subject":"LUNCH","body":"See you at noon."}`}
		var wg sync.WaitGroup
		var emu sync.Mutex
		var envs []envelope.Envelope
		for g := range 8 {
			wg.Go(func() {
				for i := range 10 {
					env := tool.Invoke(scoped(), inputs[(g+i)%len(inputs)])
					emu.Lock()
					envs = append(envs, env)
					emu.Unlock()
				}
			})
		}
		wg.Go(func() {
			for range 20 {
				op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
				time.Sleep(time.Millisecond) // paces the sweeps among the calls; orders nothing
			}
		})
		wg.Wait()
		d.mu.Lock()
		total := 0
		for ref, n := range d.effects {
			total += n
			if n > 1 {
				t.Errorf("seed %d: %s applied %d times", seed, ref, n)
			}
		}
		for _, env := range envs {
			if env.Status == envelope.Success && d.effects[env.RequestRef] == 0 {
				t.Errorf("seed %d: success for %s, never applied: %s", seed, env.RequestRef, env)
			}
		}
		if total > 1 {
			t.Logf("seed %d: %d emails for lunch/reworded: %v", seed, total, d.effects)
		}
		d.mu.Unlock()
	}
}

// claimAckLost applies the next claim and loses its acknowledgement once
// armed: the store committed the pending record, and the caller hears an
// error (a connection that dropped after COMMIT).
type claimAckLost struct {
	agenttool.Store
	armed atomic.Bool
}

func (s *claimAckLost) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, r)
	if err == nil && res.Claimed && s.armed.CompareAndSwap(true, false) {
		return storekit.ClaimResult{}, errStoreDown
	}
	return res, err
}

// A claim the store cannot make (a claim that timed out in a process
// paused mid-call, a connection that broke) fails closed (I4), but does
// not say that nothing was done when the key's record, read after it,
// says otherwise (I2): an action done by an earlier call is replayed, one
// another call holds is in progress, and only a key with nothing to read
// — or whose record the rules would have to change — answers
// store_unavailable. (Found by the replica test: a paused replica's
// queued copy answered store_unavailable for an email its other call had
// just sent.)
func TestI2_AClaimTheStoreCannotMakeSaysWhatTheKeyHolds(t *testing.T) {
	store := &faultyStore{Store: memstore.New()}
	m := &mailServer{}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, WaitTimeout: -1})
	first := tool.Invoke(scoped(), emailToAna)
	mustStatus(t, first, envelope.Success)
	store.failClaim.Store(true)
	again := tool.Invoke(scoped(), emailToAna)
	if again.Status != envelope.Success || !again.Replayed || again.RequestRef != first.RequestRef {
		t.Errorf("the same action, its claim failing after it was done: %s; want its success replayed", again)
	}
	other := tool.Invoke(scoped(), `{"to":"bob@example.com","subject":"Report","body":"Attached."}`)
	if other.Status != envelope.DefiniteFailure || other.Error.Code != envelope.CodeStoreUnavailable {
		t.Errorf("a new action, its claim failing: %s; want store_unavailable", other)
	}
	if n := m.runs.Load(); n != 1 {
		t.Errorf("%d runs; want the first alone", n)
	}
}

// I4 without stranding: a call whose claim was applied but whose
// acknowledgement was lost ran nothing, said so ("Nothing was done. Try
// again later."), and the action can be done by trying again later, as
// told, without a person.
//
// An at-most-once tool: the claim commits, its reply is lost, the call
// answers store_unavailable. The model tries again: for the lease (a
// minute) the action is "in progress" (nothing runs), and the whole
// conversation's emails wait behind it; after the lease, the pending
// record is taken for a dead holder's: its outcome is unknown, counted as
// one attempt, "may already have happened" — and the action waits for a
// person who is asked to confirm an email that was never attempted.
func TestI4_LostClaimAcknowledgementDoesNotStrandTheAction(t *testing.T) {
	clk := newClock()
	store := &claimAckLost{Store: memstore.New()}
	m := &mailServer{}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Now: clk.Now, WaitTimeout: -1})
	store.armed.Store(true)
	first := tool.Invoke(scoped(), emailToAna)
	t.Logf("first:        %s", first)
	if first.Status != envelope.DefiniteFailure || first.Error.Code != envelope.CodeStoreUnavailable {
		t.Fatalf("the call whose claim's acknowledgement was lost: %s; want store_unavailable", first)
	}
	clk.Advance(2 * time.Minute) // "try again later"
	later := tool.Invoke(scoped(), emailToAna)
	t.Logf("tried later:  %s", later)
	if later.Status != envelope.Success || m.count() != 1 {
		t.Errorf("after trying again later, as told: %s, %d runs; want the email sent once (nothing was ever attempted)", later.Status, m.runs.Load())
	}
}

// A settled action replayed from the read only to the same principal;
// another principal with the same action ID is refused, never told success.
func TestI6_AClaimAnsweredFromAReadRepliesToItsOwnPrincipalAlone(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := &faultyStore{Store: open()}
		m := &mailServer{}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, WaitTimeout: -1})
		ctxA := agenttool.WithActionID(scoped(), "act-1")
		first := tool.Invoke(ctxA, emailToAna)
		mustStatus(t, first, envelope.Success)
		store.failClaim.Store(true)
		again := tool.Invoke(ctxA, emailToAna)
		if again.Status != envelope.Success || !again.Replayed {
			t.Errorf("same: %s", again)
		}
		ctxB := agenttool.WithActionID(agenttool.WithScope(context.Background(), "tenant-42/user-8", "conversation-1"), "act-1")
		other := tool.Invoke(ctxB, emailToAna)
		if other.Status == envelope.Success || other.Replayed {
			t.Errorf("other principal told: %s", other)
		}
		otherIn := tool.Invoke(ctxA, `{"to":"bob@example.com","subject":"x"}`)
		if otherIn.Status == envelope.Success {
			t.Errorf("other input told success: %s", otherIn)
		}
		if m.count() != 1 {
			t.Errorf("%d effects", m.count())
		}
	})
}

// A record past its lifetime is not replayed from a read.
func TestI2_AClaimAnsweredFromAReadNeverReplaysARecordPastItsLifetime(t *testing.T) {
	clk := newClock()
	store := &faultyStore{Store: memstore.New()}
	m := &mailServer{}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, WaitTimeout: -1, Now: clk.Now, KeyTTL: time.Hour})
	first := tool.Invoke(scoped(), emailToAna)
	mustStatus(t, first, envelope.Success)
	clk.Advance(3 * time.Hour)
	store.failClaim.Store(true)
	again := tool.Invoke(scoped(), emailToAna)
	if again.Status != envelope.DefiniteFailure || again.Error.Code != envelope.CodeStoreUnavailable {
		t.Errorf("expired record, claim failing: %s; want store_unavailable", again)
	}
}

// A holder whose lease lapsed is not in progress.
func TestI2_AClaimAnsweredFromAReadNeverCallsALapsedHolderRunning(t *testing.T) {
	clk := newClock()
	store := &faultyStore{Store: memstore.New()}
	m := &mailServer{}
	m.script = func(n int) (bool, error) {
		if n == 1 {
			store.die()
		}
		return true, nil
	}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, WaitTimeout: -1, Now: clk.Now, Lease: time.Minute})
	first := tool.Invoke(scoped(), emailToAna)
	t.Logf("first: %s", first)
	store.heal()
	clk.Advance(10 * time.Minute)
	store.failClaim.Store(true)
	again := tool.Invoke(scoped(), emailToAna)
	if again.Status == envelope.Success || (again.Error != nil && again.Error.Code == envelope.CodeInProgress) {
		t.Errorf("lapsed holder: %s", again)
	}
	t.Logf("again: %s", again)
	store.heal()
	third := tool.Invoke(scoped(), emailToAna)
	t.Logf("third: %s", third)
	if m.count() != 1 {
		t.Errorf("%d effects; want 1", m.count())
	}
}

// A takeover whose acknowledgement was lost is given back unknown,
// awaiting reconciliation — never approved for a retry: the dead holder's
// attempt (which delivered) is checked, not sent again. (Found by a
// review: the claim was given back approved, and the next call sent the
// email a second time.)
func TestI1_ALostClaimAcknowledgementOfATakeoverApprovesNoRetry(t *testing.T) {
	clk := newClock()
	faulty := &faultyStore{Store: memstore.New()}
	store := &claimAckLost{Store: faulty}
	m := &mailServer{}
	m.script = func(n int) (bool, error) {
		if n == 1 {
			faulty.die()
		}
		return true, nil
	}
	rec := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		if m.sent(ref) > 0 {
			return reconcile.AppliedWith([]byte(`{"message_id":"x"}`))
		}
		return reconcile.NotAppliedYet()
	})
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: rec, WaitTimeout: -1, Now: clk.Now, Lease: time.Minute})
	first := tool.Invoke(scoped(), emailToAna)
	t.Logf("first: %s", first)
	faulty.heal()
	clk.Advance(10 * time.Minute)
	store.armed.Store(true)
	second := tool.Invoke(scoped(), emailToAna)
	t.Logf("second: %s", second)
	third := tool.Invoke(scoped(), emailToAna)
	t.Logf("third: %s", third)
	if m.count() != 1 {
		t.Errorf("%d effects; want 1 (the dead holder's)", m.count())
	}
}

// So too when the action taken over went on in place of another (its
// record names the one it replaced, and a takeover keeps that): its own
// attempt may have applied it, and it is given back unknown — not
// approved as a write in another's place that never ran is. (Found by a
// review on two PostgreSQL replicas: the reworded copy, delivered with its
// reply lost, was given back approved, and the next call sent it again
// and answered success.)
func TestI1_ALostClaimAcknowledgementOfATakenOverReplacementApprovesNoRetry(t *testing.T) {
	// The first wording: not delivered, its reply lost. The reworded copy,
	// in its place: delivered, its reply lost. Later sends deliver.
	m := &mailServer{script: func(n int) (bool, error) { return n > 1, errLostReply }}
	var firstRef atomic.Value
	firstRef.Store("")
	rec := reconcile.Func(func(_ context.Context, ref string) reconcile.Answer {
		if ref == firstRef.Load() {
			return reconcile.NotAppliedYet() // the first never came
		}
		return reconcile.StillPending() // the destination cannot tell yet
	})
	store := &claimAckLost{Store: memstore.New()}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: rec, WaitTimeout: -1})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	firstRef.Store(first.RequestRef)
	reworded := tool.Invoke(scoped(), lunchReworded)
	mustStatus(t, reworded, envelope.UnknownOutcome)
	if r, err := store.Get(context.Background(), reworded.RequestRef); err != nil || r.Replaces != first.RequestRef || m.sent(reworded.RequestRef) != 1 {
		t.Fatalf("set-up: the reworded copy's record %+v (%v), sent %d times; want it in place of %s, sent once", r, err, m.sent(reworded.RequestRef), first.RequestRef)
	}
	store.armed.Store(true)
	lost := tool.Invoke(scoped(), lunchReworded)
	t.Logf("the takeover whose acknowledgement was lost: %s", lost)
	if r, err := store.Get(context.Background(), reworded.RequestRef); err != nil || r.State != agenttool.Unknown || r.RetryApproved {
		t.Errorf("given back as %v, approved %v (%v); want unknown, awaiting reconciliation: its attempt may have applied it", r.State, r.RetryApproved, err)
	}
	again := tool.Invoke(scoped(), lunchReworded)
	t.Logf("again: %s", again)
	if n := m.sent(reworded.RequestRef); n != 1 {
		t.Errorf("the reworded copy was sent %d times; want 1: %s", n, again)
	}
	if again.Status == envelope.Success && !again.Replayed && !again.Reconciled {
		t.Errorf("a fresh success for an action delivered before: %s", again)
	}
}

// A claim whose caller gave up (StoreTimeout) while its INSERT waited on
// another transaction's lock of the key (a replica paused mid-write) does
// not live on in the server to commit later for a call that answered
// store_unavailable: whichever replica is asked after, the action runs
// once, and every answer is true when given. (From a review that found
// no fault.)
func TestI1_AClaimThatOutlivesItsCallerOnPostgreSQLRunsTheActionOnce(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	schema := pgtest.Schema(t, url)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	m := &mailServer{}
	rec := reconcile.Func(func(_ context.Context, ref string) reconcile.Answer {
		if m.sent(ref) > 0 {
			return reconcile.AppliedWith([]byte(`{"message_id":"<x@mail.test>"}`))
		}
		return reconcile.NotAppliedYet()
	})
	replica := func() (*agenttool.Tool, agenttool.Store) {
		s, err := pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return newEmailTool(t, m, agenttool.Options{Store: s, Class: agenttool.Reconcilable, Reconciler: rec,
			Lease: 2 * time.Second, StoreTimeout: 400 * time.Millisecond, WaitTimeout: 300 * time.Millisecond}), s
	}
	a, sa := replica()
	b, sb := replica()
	// The action's reference, from the same tool on a store of its own.
	ref := newEmailTool(t, &mailServer{}, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: rec}).Invoke(scoped(), lunch).RequestRef

	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "records"}.Sanitize()+` (key, tool, state, principal, fingerprint, token, created, updated)
		VALUES ($1, 'other', 2, '\x00'::bytea, '\x00'::bytea, 0, now(), now())`, ref); err != nil {
		t.Fatal(err)
	}
	held := a.Invoke(scoped(), lunch)
	tx.Rollback(ctx)
	if held.Error == nil || held.Error.Code != envelope.CodeStoreUnavailable {
		t.Errorf("a call while another transaction holds the key: %s; want store_unavailable", held)
	}
	mustBeTrue(t, "a call while another transaction holds the key", held, m, sa)
	// The replicas in turn, until both answered success.
	for i, done := 0, 0; i < 40 && done < 2; i++ {
		tool, store := a, sa
		if i%2 == 1 {
			tool, store = b, sb
		}
		env := tool.Invoke(scoped(), lunch)
		mustBeTrue(t, "a call after", env, m, store)
		if env.Status == envelope.Success {
			done++
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if n := m.sent(ref); n != 1 {
		t.Errorf("%s was delivered %d times; want 1", ref, n)
	}
}

// Wait loop: a live holder while claims keep failing: no second effect,
// not stuck, and the answer after the holder finishes is its success.
func TestI1_ACallWaitingOnAHolderWhileItsClaimsFailSendsNothing(t *testing.T) {
	store := &faultyStore{Store: memstore.New()}
	release := make(chan struct{})
	m := &mailServer{}
	m.script = func(n int) (bool, error) {
		if n == 1 {
			<-release
		}
		return true, nil
	}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, WaitTimeout: 2 * time.Second})
	done := make(chan envelope.Envelope, 1)
	go func() { done <- tool.Invoke(scoped(), emailToAna) }()
	for m.runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	store.failClaim.Store(true)
	res := make(chan envelope.Envelope, 1)
	go func() { res <- tool.Invoke(scoped(), emailToAna) }()
	time.Sleep(200 * time.Millisecond)
	close(release)
	first := <-done
	select {
	case e := <-res:
		t.Logf("first %s second %s", first, e)
		if e.Status == envelope.DefiniteFailure && e.Error.Code != envelope.CodeStoreUnavailable {
			t.Errorf("second: %s", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stuck")
	}
	if m.count() != 1 {
		t.Errorf("%d effects", m.count())
	}
}

// I2 for two calls of one action in one process: the second, made while
// the first holds the key and has applied the action, waits for its
// holder here rather than race it to the store, and answers what the
// action became. Raced, a store that could not serve the second call just
// then — in the multi-replica test, a scope lock held by a paused replica
// until the claim timed out; here, claims and reads that fail until the
// holder records its outcome — answered definite_failure store_unavailable,
// "not run", for an action already applied.
func TestI2_ASecondCallOfAnActionHeldHereAnswersWhatItBecame(t *testing.T) {
	store := &healingStore{faultyStore: faultyStore{Store: memstore.New()}}
	var effects atomic.Int64
	applied, release := make(chan struct{}), make(chan struct{})
	tool, err := agenttool.New("send_email", "Send an email.", func(ctx context.Context, in struct {
		To string `json:"to"`
	}) (string, error) {
		if effects.Add(1) == 1 {
			close(applied)
			<-release // applied; its answer is on its way
		}
		return "sent", nil
	}, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, WaitTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan envelope.Envelope, 1)
	go func() { first <- tool.Invoke(scoped(), `{"to":"ana@example.com"}`) }()
	<-applied
	store.failClaim.Store(true)
	store.failGet.Store(true)
	second := make(chan envelope.Envelope, 1)
	go func() { second <- tool.Invoke(scoped(), `{"to":"ana@example.com"}`) }()
	time.Sleep(100 * time.Millisecond) // raced, the second has answered by now
	close(release)
	a, b := <-first, <-second
	mustStatus(t, a, envelope.Success)
	if b.Status != envelope.Success || !b.Replayed || b.RequestRef != a.RequestRef {
		t.Errorf("the same action called again while its first call, here, had applied it: %s; want its success replayed", b)
	}
	if n := effects.Load(); n != 1 {
		t.Errorf("%d effects; want one", n)
	}
}

// healingStore is a faultyStore that heals when an outcome is recorded.
type healingStore struct{ faultyStore }

func (h *healingStore) Finish(ctx context.Context, r storekit.FinishRequest) error {
	h.heal()
	return h.faultyStore.Finish(ctx, r)
}

// gatedEmailTool is a send_email tool whose first run signals started and
// blocks on gate (a slow SMTP server that ignores its context), then
// delivers; it returns err after delivering.
func gatedEmailTool(t *testing.T, opts agenttool.Options, err error) (tool *agenttool.Tool, effects *atomic.Int64, started, gate chan struct{}) {
	t.Helper()
	effects = new(atomic.Int64)
	started, gate = make(chan struct{}), make(chan struct{})
	var runs atomic.Int64
	tool, e := agenttool.New("send_email", "Send an email.", func(ctx context.Context, in emailInput) (sent, error) {
		if runs.Add(1) == 1 {
			close(started)
			<-gate
		}
		effects.Add(1)
		return sent{MessageID: "<m@mail.test>"}, err
	}, opts)
	if e != nil {
		t.Fatal(e)
	}
	return tool, effects, started, gate
}

// A holder here whose lease renewal lands late (a slow commit, a lock
// wait: slowRenewal) reads as held by a call that stopped answering. A
// second call of the same action is not kept waiting for it: as a claim
// that meets such a record is (docs/envelope.md), it is answered at once,
// in_progress with retry_after. (Waiting first for every holder here, it
// hung for WaitTimeout and then answered a plain in_progress, and the
// model called again at once, for nothing.)
func TestI2_ACallHeldByAStalledHolderHereIsAnsweredAtOnceWithRetryAfter(t *testing.T) {
	clk := newClock()
	store := &slowRenewal{Store: memstore.New(), started: make(chan struct{}), release: make(chan struct{})}
	const lease = 300 * time.Millisecond // renewed every 100 ms of real time; reads as stalled at 160 ms of the record's clock
	const wait = 80 * time.Millisecond   // shorter than what is left of the hold (110 ms)
	tool, effects, started, gate := gatedEmailTool(t, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Lease: lease,
		ClockSkew: 10 * time.Millisecond, WaitTimeout: wait, Now: clk.Now}, nil)
	done := make(chan envelope.Envelope, 1)
	go func() { done <- tool.Invoke(scoped(), lunch) }()
	<-started
	clk.Advance(lease / 3) // the renewal starts on time
	select {
	case <-store.started:
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not renew")
	}
	clk.Advance(lease / 3) // and has not landed: the record reads as stalled
	t0 := time.Now()
	held := tool.Invoke(scoped(), lunch)
	took := time.Since(t0)
	close(store.release)
	close(gate)
	first := <-done
	t.Logf("holder: %s", first)
	t.Logf("the same action again while the holder's record reads stalled (%v): %s", took, held)
	if held.Error == nil || held.Error.Code != envelope.CodeInProgress || held.RetryAfter == 0 {
		t.Errorf("a second call while the holder here has stopped renewing its hold: %s after %v; want in_progress with retry_after, at once (docs/envelope.md)", held, took)
	}
	if n := effects.Load(); n != 1 {
		t.Errorf("%d effects", n)
	}
}

// A call of other input under the same explicit action ID is refused at
// once (key_reused_with_different_input) while the first holds the key;
// a call of the same input under it waits and replays.
func TestI5_AnActionIDHeldHereRefusesOtherInputAtOnce(t *testing.T) {
	tool, effects, started, gate := gatedEmailTool(t, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce,
		WaitTimeout: 5 * time.Second}, nil)
	ctx := agenttool.WithActionID(scoped(), "step-1")
	done := make(chan envelope.Envelope, 1)
	go func() { done <- tool.Invoke(ctx, lunch) }()
	<-started
	t0 := time.Now()
	other := tool.Invoke(ctx, lunchReworded)
	took := time.Since(t0)
	same := make(chan envelope.Envelope, 1)
	go func() { same <- tool.Invoke(ctx, lunch) }()
	time.Sleep(50 * time.Millisecond)
	close(gate)
	a, b := <-done, <-same
	mustStatus(t, a, envelope.Success)
	if other.Error == nil || other.Error.Code != envelope.CodeKeyReused || took > time.Second {
		t.Errorf("other input under the held action id: %s after %v; want key_reused_with_different_input at once", other, took)
	}
	if b.Status != envelope.Success || !b.Replayed {
		t.Errorf("the same input under it: %s; want the success replayed", b)
	}
	if n := effects.Load(); n != 1 {
		t.Errorf("%d effects", n)
	}
}

// A tool that calls itself with the same input: the inner call waits for
// its own outer call, which waits for it. It must give up after one
// WaitTimeout (in_progress), not two, and the outer call succeeds once.
func TestI1_AToolThatCallsItselfWaitsOneWaitTimeout(t *testing.T) {
	const wait = 400 * time.Millisecond
	var tool *agenttool.Tool
	var effects atomic.Int64
	var inner envelope.Envelope
	var innerTook time.Duration
	tool, err := agenttool.New("send_email", "Send an email.", func(ctx context.Context, in emailInput) (sent, error) {
		if inner.Version == 0 {
			t0 := time.Now()
			inner = tool.Invoke(ctx, lunch)
			innerTook = time.Since(t0)
		}
		effects.Add(1)
		return sent{MessageID: "<m@mail.test>"}, nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce, WaitTimeout: wait})
	if err != nil {
		t.Fatal(err)
	}
	outer := tool.Invoke(scoped(), lunch)
	mustStatus(t, outer, envelope.Success)
	if inner.Error == nil || inner.Error.Code != envelope.CodeInProgress {
		t.Errorf("the nested call of the same action: %s; want in_progress", inner)
	}
	if innerTook > wait+wait/2 {
		t.Errorf("the nested call waited %v; WaitTimeout is %v", innerTook, wait)
	}
	if n := effects.Load(); n != 1 {
		t.Errorf("%d effects", n)
	}
}

// WaitTimeout negative: a call does not wait, even for a holder here.
func TestI1_ANegativeWaitTimeoutDoesNotWaitForAHolderHere(t *testing.T) {
	tool, effects, started, gate := gatedEmailTool(t, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce,
		WaitTimeout: -1}, nil)
	done := make(chan envelope.Envelope, 1)
	go func() { done <- tool.Invoke(scoped(), lunch) }()
	<-started
	t0 := time.Now()
	second := tool.Invoke(scoped(), lunch)
	took := time.Since(t0)
	close(gate)
	mustStatus(t, <-done, envelope.Success)
	if second.Error == nil || second.Error.Code != envelope.CodeInProgress || took > 200*time.Millisecond {
		t.Errorf("with WaitTimeout < 0: %s after %v; want in_progress at once", second, took)
	}
	if n := effects.Load(); n != 1 {
		t.Errorf("%d effects", n)
	}
}

// A holder here whose attempt ends unknown: the call that waited for it
// must not run the tool again (at-most-once, no reconciler): it answers
// unknown_outcome. With a reconciler (reconcilable), it asks before it
// runs: "applied" is answered as done, no second email.
func TestI1_ACallThatWaitedForAHolderEndingUnknownRunsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts agenttool.Options
		want envelope.Status
	}{
		{"at-most-once", agenttool.Options{Class: agenttool.AtMostOnce}, envelope.UnknownOutcome},
		{"reconcilable", agenttool.Options{Class: agenttool.Reconcilable}, envelope.Success},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var delivered *atomic.Int64
			opts := tc.opts
			opts.Store, opts.WaitTimeout, opts.ClockSkew, opts.Retry = memstore.New(), 5*time.Second, -1, fastRetry
			if opts.Class == agenttool.Reconcilable {
				// The destination knows: applied once delivered.
				opts.Reconciler = reconcile.Func(func(context.Context, string) reconcile.Answer {
					if delivered.Load() > 0 {
						return reconcile.AppliedWith([]byte(`{"message_id":"<m@mail.test>"}`))
					}
					return reconcile.NotAppliedYet()
				})
			}
			tool, effects, started, gate := gatedEmailTool(t, opts, errLostReply)
			delivered = effects
			done := make(chan envelope.Envelope, 1)
			go func() { done <- tool.Invoke(scoped(), lunch) }()
			<-started
			second := make(chan envelope.Envelope, 1)
			go func() { second <- tool.Invoke(scoped(), lunch) }()
			time.Sleep(50 * time.Millisecond)
			close(gate)
			a := <-done
			t.Logf("holder: %s", a)
			b := <-second
			t.Logf("waiter: %s", b)
			if n := effects.Load(); n != 1 {
				t.Errorf("%d effects; the waiter ran the tool again", n)
			}
			if b.Status != tc.want {
				t.Errorf("the waiter: %s; want %s", b, tc.want)
			}
			if b.Status == envelope.DefiniteFailure {
				t.Errorf("the waiter says definite failure for an action applied: %s", b)
			}
		})
	}
}

// A call whose context ends while it waits for the holder here returns
// promptly, runs nothing, and does not claim the action failed.
func TestI2_ACallCancelledWhileItWaitsForAHolderHereSaysSo(t *testing.T) {
	var gaveUp atomic.Int32
	tool, effects, started, gate := gatedEmailTool(t, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce,
		WaitTimeout: 10 * time.Second, Hooks: agenttool.Hooks{Waited: func(_ context.Context, e agenttool.WaitedEvent) {
			if e.GaveUp {
				gaveUp.Add(1)
			}
		}}}, nil)
	done := make(chan envelope.Envelope, 1)
	go func() { done <- tool.Invoke(scoped(), lunch) }()
	<-started
	ctx, cancel := context.WithTimeout(scoped(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	second := tool.Invoke(ctx, lunch)
	took := time.Since(t0)
	close(gate)
	mustStatus(t, <-done, envelope.Success)
	t.Logf("cancelled waiter after %v: %s", took, second)
	if took > 2*time.Second {
		t.Errorf("a call whose context ended waited %v", took)
	}
	if second.Status == envelope.DefiniteFailure || second.Status == envelope.Success {
		t.Errorf("a cancelled waiter of an action being applied: %s", second)
	}
	if gaveUp.Load() != 1 {
		t.Errorf("Waited hook GaveUp reported %d times; want once", gaveUp.Load())
	}
	if n := effects.Load(); n != 1 {
		t.Errorf("%d effects", n)
	}
}
