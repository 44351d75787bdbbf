package agenttool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"fmt"
	"sync/atomic"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// noticeSetup leaves an unknown send_email in conversation-9 of user-7,
// then has the fence find it applied for a reworded resend.
func noticeSetup(t *testing.T, opts agenttool.Options) (*agenttool.Tool, *mailServer, *clock, envelope.Envelope) {
	t.Helper()
	var lost sync.Once
	m := &mailServer{script: func(int) (bool, error) {
		var err error
		lost.Do(func() { err = errLostReply })
		return true, err
	}}
	check := &answers{answer: reconcile.StillPending()}
	clk := &clock{now: time.Now()}
	opts.Store, opts.Class, opts.Reconciler, opts.Now = memstore.New(), agenttool.Reconcilable, check, clk.Now
	tool := newEmailTool(t, m, opts)
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	check.set(reconcile.AppliedWith([]byte(`{"message_id":"<first@mail.test>"}`)))
	told := tool.Invoke(scoped(), lunchReworded)
	if told.Status != envelope.DefiniteFailure || told.Error.Code != envelope.CodeEarlierApplied {
		t.Fatalf("the reworded resend: %s; want earlier_action_applied", told)
	}
	return tool, m, clk, first
}

func otherSession() context.Context {
	return agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10")
}

// The notice covers the fence's scope: the session by default, the
// principal with FencePrincipal; never another principal.
func TestNoticeHoldCoversTheFencesScope(t *testing.T) {
	bob := `{"to":"bob@example.com","subject":"Lunch","body":"Join us?"}`
	t.Run("session", func(t *testing.T) {
		tool, m, _, first := noticeSetup(t, agenttool.Options{})
		// The same turn's identical repeat of the refused call, and a call to
		// someone else: both were made before the model read the answer.
		for _, in := range []string{lunchReworded, bob} {
			env := tool.Invoke(scoped(), in)
			if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeEarlierApplied ||
				env.Earlier.RequestRef != first.RequestRef || string(env.Earlier.Result) != `{"message_id":"<first@mail.test>"}` {
				t.Errorf("%s in the same conversation: %s; want earlier_action_applied for %s", in, env, first.RequestRef)
			}
		}
		mustStatus(t, tool.Invoke(otherSession(), bob), envelope.Success)
		if n := m.count(); n != 2 {
			t.Errorf("%d emails, want the first and the other conversation's", n)
		}
	})
	t.Run("principal", func(t *testing.T) {
		tool, m, _, _ := noticeSetup(t, agenttool.Options{Fence: agenttool.FencePrincipal})
		if env := tool.Invoke(otherSession(), bob); env.Error == nil || env.Error.Code != envelope.CodeEarlierApplied {
			t.Errorf("another conversation of the principal: %s; want earlier_action_applied", env)
		}
		other := agenttool.WithScope(context.Background(), "tenant-42/user-8", "conversation-9")
		mustStatus(t, tool.Invoke(other, bob), envelope.Success)
		if n := m.count(); n != 2 {
			t.Errorf("%d emails, want the first and the other principal's", n)
		}
	})
}

// The hold ends NoticeHold after the fence's answer — a new action runs
// then, and the copy it held back stays answered as it was; a negative
// NoticeHold gives the answer once, and keeps it nowhere.
func TestNoticeHoldEnds(t *testing.T) {
	tool, m, clk, first := noticeSetup(t, agenttool.Options{NoticeHold: time.Minute})
	clk.Advance(59 * time.Second)
	mustBeHeldBack(t, "another copy within NoticeHold", tool.Invoke(scoped(), lunchRephrased), first.RequestRef, false)
	clk.Advance(time.Second)
	mustBeHeldBack(t, "the held-back copy after NoticeHold", tool.Invoke(scoped(), lunchReworded), first.RequestRef, true)
	mustStatus(t, tool.Invoke(scoped(), lunchNextWeek), envelope.Success)
	if n := m.count(); n != 2 {
		t.Errorf("%d emails, want 2", n)
	}

	tool, m, _, _ = noticeSetup(t, agenttool.Options{NoticeHold: -1})
	mustStatus(t, tool.Invoke(scoped(), lunchReworded), envelope.Success)
	if n := m.count(); n != 2 {
		t.Errorf("with NoticeHold -1: %d emails, want 2", n)
	}
}

// A keyed action left unknown and then completed by its own resend (the
// destination replays it) holds the scope's other new writes as the fence
// would: the model may have reworded it in the same turn.
func TestNoticeAfterAKeyedResendCompletesTheAction(t *testing.T) {
	lose := true
	m := &mailServer{dedupe: true, script: func(int) (bool, error) {
		if lose {
			return true, errLostReply
		}
		return true, nil
	}}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	lose = false
	mustStatus(t, tool.Invoke(scoped(), lunch), envelope.Success)
	reworded := tool.Invoke(scoped(), lunchReworded)
	if reworded.Error == nil || reworded.Error.Code != envelope.CodeEarlierApplied || reworded.Earlier.RequestRef != first.RequestRef {
		t.Errorf("a reworded call right after the resend: %s; want earlier_action_applied for %s", reworded, first.RequestRef)
	}
	if n := m.count(); n != 1 {
		t.Errorf("%d emails, want 1", n)
	}
}

// An operator's check that finds the action applied holds the scope's
// other new writes too.
func TestNoticeAfterAnOperatorFindsTheActionApplied(t *testing.T) {
	var lost sync.Once
	m := &mailServer{script: func(int) (bool, error) {
		var err error
		lost.Do(func() { err = errLostReply })
		return true, err
	}}
	check := &answers{answer: reconcile.StillPending()}
	store := memstore.New()
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	check.set(reconcile.AppliedWith([]byte(`{"message_id":"<first@mail.test>"}`)))
	if v, err := op.Reconcile(context.Background(), first.RequestRef, "maria"); err != nil || v != reconcile.Applied {
		t.Fatalf("operator's check: %v, %v", v, err)
	}
	reworded := tool.Invoke(scoped(), lunchReworded)
	if reworded.Error == nil || reworded.Error.Code != envelope.CodeEarlierApplied {
		t.Errorf("a reworded call right after the operator's check: %s; want earlier_action_applied", reworded)
	}
	if n := m.count(); n != 1 {
		t.Errorf("%d emails, want 1", n)
	}
}

// A reworded call that the fence let go on because the earlier action was
// found not applied replaces that action for good: the earlier action's own
// resend is told what was done instead, during the notice and after it;
// the scope's other new writes are held for NoticeHold — each held back
// for good, as it may be the action done, reworded — then new ones run.
func TestNotice_AfterAReplacementTheResendIsToldForGood(t *testing.T) {
	m := &mailServer{script: func(n int) (bool, error) {
		if n == 1 {
			return false, errLostReply // never delivered; the reply is lost
		}
		return true, nil
	}}
	check := &answers{answer: reconcile.StillPending()}
	clk := &clock{now: time.Now()}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: check, Now: clk.Now,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	check.set(reconcile.NotAppliedFenced())
	reworded := tool.Invoke(scoped(), lunchReworded)
	mustStatus(t, reworded, envelope.Success)
	replaced := func(when string) {
		t.Helper()
		resend := tool.Invoke(scoped(), lunch)
		if resend.Status != envelope.DefiniteFailure || resend.Error.Code != envelope.CodeReplaced || resend.Earlier == nil ||
			resend.Earlier.RequestRef != reworded.RequestRef || resend.Earlier.State != envelope.ActionSucceeded {
			t.Errorf("the earlier action's resend %s: %s; want replaced, naming %s, done", when, resend, reworded.RequestRef)
		}
	}
	replaced("right after")
	other := tool.Invoke(scoped(), bobReport)
	if other.Status != envelope.DefiniteFailure || other.Error.Code != envelope.CodeEarlierApplied ||
		other.Earlier.RequestRef != reworded.RequestRef || !strings.Contains(other.Note, "was just done") {
		t.Errorf("another new write during the notice: %s; want earlier_action_applied naming %s", other, reworded.RequestRef)
	}
	if n := m.count(); n != 1 {
		t.Fatalf("%d emails, want 1", n)
	}
	clk.Advance(11 * time.Second)
	replaced("after the notice")
	mustBeHeldBack(t, "the write held back, asked for again after the notice", tool.Invoke(scoped(), bobReport), reworded.RequestRef, true)
	mustStatus(t, tool.Invoke(scoped(), bobReport2), envelope.Success)
	if n := m.count(); n != 2 {
		t.Errorf("%d emails after the notice, want 2 (Ana's, once, and Bob's)", n)
	}
}

// slowAckStore is a store over a network: a write is visible to every
// other client as soon as the database commits it, and the writer learns
// of the commit one round trip later. It delays the acknowledgement of the
// Finish that records key as succeeded until released.
type slowAckStore struct {
	agenttool.Store
	key       atomic.Value // string
	committed chan struct{}
	release   chan struct{}
	once      sync.Once
}

func (s *slowAckStore) Finish(ctx context.Context, req storekit.FinishRequest) error {
	err := s.Store.Finish(ctx, req)
	if k, _ := s.key.Load().(string); err == nil && req.State == agenttool.Succeeded && req.Key == k {
		s.once.Do(func() {
			close(s.committed)
			select {
			case <-s.release:
			case <-time.After(5 * time.Second):
			}
		})
	}
	return err
}

// The notice of a settlement is put before the settlement is visible: a
// parallel call of the same turn finds one or the other.
//
// The notice (NoticeHold) was put after the fence's settlement of the
// earlier action was written to the store, so a parallel call of the same
// turn that claimed in between found neither an unknown record to fence
// nor a notice, and sent a second email; it is now put before the write. With a store whose commit
// is visible before its acknowledgement reaches the writer (PostgreSQL, any
// store over a network), the window is one round trip.
func TestNotice_PutBeforeTheSettlementIsVisible(t *testing.T) {
	const lunchReworded2 = `{"to":"ana@example.com","subject":"Friday lunch?","body":"Hi Ana, are you free for lunch at noon on Friday?"}`
	var lost sync.Once
	m := &mailServer{script: func(int) (bool, error) {
		var err error
		lost.Do(func() { err = errLostReply })
		return true, err
	}}
	check := &answers{answer: reconcile.StillPending()}
	store := &slowAckStore{Store: memstore.New(), committed: make(chan struct{}), release: make(chan struct{})}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check})

	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	check.set(reconcile.AppliedWith([]byte(`{"message_id":"<first@mail.test>"}`)))
	store.key.Store(first.RequestRef)

	// The model's next turn: two reworded emails, as parallel tool calls.
	var b envelope.Envelope
	done := make(chan struct{})
	go func() {
		defer close(done)
		b = tool.Invoke(scoped(), lunchReworded)
	}()
	select {
	case <-store.committed:
	case <-time.After(5 * time.Second):
		t.Fatal("the fence never settled the first email")
	}
	c := tool.Invoke(scoped(), lunchReworded2) // its claim lands while b's settlement is on the wire back
	close(store.release)
	<-done

	t.Logf("first: %s", first)
	t.Logf("b:     %s", b)
	t.Logf("c:     %s", c)
	if b.Error == nil || b.Error.Code != envelope.CodeEarlierApplied {
		t.Fatalf("b: %s; want earlier_action_applied", b)
	}
	if n := m.count(); n != 1 {
		t.Errorf("one logical action (email Ana about lunch) left %d emails; the parallel call c of the same turn said %s %v, b said earlier_action_applied",
			n, c.Status, c.Error)
	}
}

// Many parallel reworded calls at the moment the fence settles send no
// second email, on every store.
//
// The same without a slow store: many parallel reworded calls at the
// moment the fence settles, on every store. Counts how often a second
// email goes out (before the fix: a third to half of the rounds).
func TestNotice_ParallelRewordsAtTheSettlementSendOne(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) { noticeRace(t, open) })
}

func noticeRace(t *testing.T, open func() agenttool.Store) {
	rounds, dup := 40, 0
	store := open()
	for r := 0; r < rounds; r++ {
		ctx := agenttool.WithScope(context.Background(), "tenant-42/user-7", fmt.Sprintf("conversation-%d", r))
		var lost sync.Once
		m := &mailServer{script: func(int) (bool, error) {
			var err error
			lost.Do(func() { err = errLostReply })
			return true, err
		}}
		check := &answers{answer: reconcile.StillPending()}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check})
		mustStatus(t, tool.Invoke(ctx, lunch), envelope.UnknownOutcome)
		check.set(reconcile.AppliedWith([]byte(`{"message_id":"<first@mail.test>"}`)))
		var wg sync.WaitGroup
		envs := make([]envelope.Envelope, 16)
		start := make(chan struct{})
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				time.Sleep(time.Duration(i*7) * time.Microsecond) // spreads the starts around the settlement; orders nothing
				envs[i] = tool.Invoke(ctx, `{"to":"ana@example.com","subject":"Lunch `+string(rune('A'+i))+`","body":"noon?"}`)
			}(i)
		}
		close(start)
		wg.Wait()
		if m.count() > 1 {
			if dup == 0 {
				for _, e := range envs {
					code := ""
					if e.Error != nil {
						code = e.Error.Code
					}
					t.Logf("round %d: %s %s", r, e.Status, code)
				}
			}
			dup++
		}
	}
	if dup > 0 {
		t.Errorf("%d of %d rounds sent a second email to Ana in one turn of parallel reworded calls", dup, rounds)
	}
}

// A turn of reworded copies after an unknown outcome sends one email even
// when the first copy, which went on in place of the unknown action, sent
// nothing: the copy that finally sends it holds the others, as the
// replacement itself would have.
//
// The lunch email ends unknown (never delivered). The model, told it may
// have been sent, sends three reworded copies in its next turn (run one
// after another, as the scope's slot runs them). The first copy's fence
// finds the lunch email not applied and goes on in its place; its own
// attempt is lost too and found not applied: it gives its key back
// (definite_failure, nothing was done), and the lunch email stays closed
// as replaced by it. The second copy then meets a free slot, runs as a
// new action and is sent, with no notice (it replaces nothing); the third
// copy runs after it: two emails to Ana about one lunch.
func TestNotice_ReplacementThatSendsNothingKeepsTheTurnToOneEmail(t *testing.T) {
	m := &mailServer{script: func(n int) (bool, error) {
		if n <= 2 {
			return false, errLostReply // the lunch email, then the first copy: never delivered, replies lost
		}
		return true, nil
	}}
	ans := &answers{answer: reconcile.StillPending()}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Reconciler: ans,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	first := tool.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	ans.set(reconcile.NotAppliedFenced()) // the mail server proves what it never got
	var envs []envelope.Envelope
	for _, in := range []string{lunchRephrased, lunchRephrased2, lunchReworded} {
		env := tool.Invoke(scoped(), in)
		t.Logf("%s", env)
		envs = append(envs, env)
	}
	if envs[0].Status != envelope.DefiniteFailure {
		t.Fatalf("the first copy, whose attempt was found not applied: %s; want definite_failure", envs[0])
	}
	if n := m.count(); n != 1 {
		t.Errorf("one logical action (email Ana about lunch), one turn of three reworded copies: %d emails (%v)", n, m.effects)
	}
}

// A settlement that tells the model nothing — an operator's, a sweeper's —
// keeps its notice until a call is told of it, however long the model
// takes: the model's next reworded copy is held with
// earlier_action_applied whether it comes at once or a minute later, on
// every store. Being told ends the notice NoticeHold later: the turn's
// other copies are held too, and a new copy after that is a new action
// (one held back, asked for again, is answered as it was).
func TestNotice_AnUntoldSettlementHoldsTheNextRewordWhenever(t *testing.T) {
	for _, settle := range []string{"operator", "sweeper"} {
		for _, turn := range []time.Duration{0, time.Second, 11 * time.Second, time.Minute, 5 * time.Hour} {
			t.Run(fmt.Sprintf("%s, next turn after %v", settle, turn), func(t *testing.T) {
				storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
					m := deliveredLost()
					check := &answers{answer: reconcile.StillPending()}
					clk := newClock()
					store := open()
					tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check, Now: clk.Now,
						Lease: time.Hour, KeyTTL: 48 * time.Hour})
					first := tool.Invoke(scoped(), lunch)
					mustStatus(t, first, envelope.UnknownOutcome)
					op, err := agenttool.NewOperator(store, tool)
					if err != nil {
						t.Fatal(err)
					}
					switch settle {
					case "operator":
						err = op.ResolveApplied(context.Background(), first.RequestRef, first.Attempts, json.RawMessage(`{"message_id":"<m>"}`), "maria", "in the mail log")
					case "sweeper":
						check.set(reconcile.AppliedWith([]byte(`{"message_id":"<m>"}`)))
						_, err = op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
					}
					if err != nil {
						t.Fatal(err)
					}
					clk.Advance(turn)
					held := tool.Invoke(scoped(), lunchReworded)
					if held.Error == nil || held.Error.Code != envelope.CodeEarlierApplied || held.Earlier.RequestRef != first.RequestRef {
						t.Fatalf("the next reworded copy, %v after the %s's settlement: %s; want earlier_action_applied", turn, settle, held)
					}
					// Another copy of the same turn: held as well.
					if again := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch?","body":"Noon?"}`); again.Error == nil || again.Error.Code != envelope.CodeEarlierApplied {
						t.Errorf("another copy of the same turn: %s; want earlier_action_applied", again)
					}
					if n := m.count(); n != 1 {
						t.Fatalf("%d emails; want 1", n)
					}
					// The model was told: past NoticeHold, a new copy is a new
					// action; the copies held back stay answered as they were.
					clk.Advance(11 * time.Second)
					mustBeHeldBack(t, "the held-back copy asked for again", tool.Invoke(scoped(), lunchReworded), first.RequestRef, true)
					mustStatus(t, tool.Invoke(scoped(), lunchNextWeek), envelope.Success)
					if n := m.count(); n != 2 {
						t.Errorf("%d emails after the model was told and asked again; want 2", n)
					}
				})
			})
		}
	}
	// A conversation that never calls again: the notice ends at
	// NoticeBackstop.
	m := deliveredLost()
	check := &answers{answer: reconcile.StillPending()}
	clk := newClock()
	store := memstore.New()
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check, Now: clk.Now, NoticeBackstop: time.Hour})
	first := tool.Invoke(scoped(), lunch)
	op, _ := agenttool.NewOperator(store, tool)
	if err := op.ResolveApplied(context.Background(), first.RequestRef, first.Attempts, json.RawMessage(`{}`), "maria", "seen"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	mustStatus(t, tool.Invoke(scoped(), lunchReworded), envelope.Success)
}

// deliveredLost: attempt 1 delivers and its reply is lost (unknown);
// every later attempt delivers.
func deliveredLost() *mailServer {
	var lost sync.Once
	return &mailServer{script: func(int) (bool, error) {
		var err error
		lost.Do(func() { err = errLostReply })
		return true, err
	}}
}

// A notice that told nobody holds the next reworded copy for as long as
// NoticeBackstop says, whatever the key's lifetime (KeyTTL): the sweeper
// does not take the notice away with the settled record it is kept on.
//
// KeyTTL is 10 minutes (accepted: longer than the retry window plus the
// lease), NoticeBackstop its default, 6 hours. The lunch email is
// delivered and its reply lost; an operator settles it applied. The
// record carries the notice (until +6h), and expires at +10m. The model
// comes back half an hour later with a reworded copy: by then the
// sweeper has deleted the expired record, notice and all, and the copy is
// sent. Without the sweep the same copy is held (earlier_action_applied):
// the same script gives two emails or one depending on when the sweeper
// ran.
func TestNotice_AnUntoldSettlementOutlivesTheKeysLifetime(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		for _, sweep := range []bool{false, true} {
			t.Run(fmt.Sprintf("swept=%v", sweep), func(t *testing.T) {
				clk := newClock()
				store := open()
				m := deliveredLost()
				tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Now: clk.Now,
					Lease: time.Minute, KeyTTL: 10 * time.Minute})
				first := tool.Invoke(scoped(), lunch)
				mustStatus(t, first, envelope.UnknownOutcome)
				op, err := agenttool.NewOperator(store, tool)
				if err != nil {
					t.Fatal(err)
				}
				if err := op.ResolveApplied(context.Background(), first.RequestRef, first.Attempts, json.RawMessage(`{"message_id":"<m>"}`), "maria", "in the mail log"); err != nil {
					t.Fatal(err)
				}
				rec, err := store.Get(context.Background(), first.RequestRef)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("settled: notice until %v, expires %v", rec.NoticeUntil.Sub(clk.Now()), rec.Expires.Sub(clk.Now()))

				clk.Advance(30 * time.Minute) // a slow conversation: well within NoticeBackstop
				if sweep {
					rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("sweep: %+v", rep)
				}
				next := tool.Invoke(scoped(), lunchReworded)
				t.Logf("the model's next reworded copy, 30 minutes later: %s", next)
				if next.Error == nil || next.Error.Code != envelope.CodeEarlierApplied {
					t.Errorf("the model's next reworded copy, never told that %s was done: %s; want earlier_action_applied", first.RequestRef, next.Status)
				}
				if n := m.count(); n != 1 {
					t.Errorf("one logical action (email Ana about lunch) left %d emails", n)
				}
			})
		}
	})
}

// The calls of one turn are made before the model reads any of their
// answers: a reworded copy in the same turn as the resend that completed
// the action is held, when the turn's calls between them take less than
// NoticeHold (10s by default).
//
// A keyed email (the destination dedupes by the reference) ended unknown:
// delivered, reply lost. The model's next turn has three tool calls, run
// one after another as langchaingo's executor runs them: the email again
// (the same input: the destination replays it, success — which starts
// the notice, NoticeHold, as "told"), a lookup of 9 seconds, and a
// reworded copy of the email, made before the model read any answer.
// (A turn whose calls between them outlast NoticeHold lets the copy
// through: the store cannot see turns. Options.NoticeHold says so.)
func TestNotice_ATurnsLaterCopyIsHeldWithinNoticeHold(t *testing.T) {
	for _, between := range []time.Duration{time.Second, 9 * time.Second} {
		t.Run(fmt.Sprintf("lookup of %v", between), func(t *testing.T) {
			clk := newClock()
			lose := true
			m := &mailServer{dedupe: true, script: func(int) (bool, error) {
				if lose {
					return true, errLostReply
				}
				return true, nil
			}}
			tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Now: clk.Now})
			first := tool.Invoke(scoped(), lunch)
			mustStatus(t, first, envelope.UnknownOutcome)
			lose = false

			// The next turn: [send_email(lunch), slow_lookup, send_email(reworded)].
			mustStatus(t, tool.Invoke(scoped(), lunch), envelope.Success)
			clk.Advance(between) // slow_lookup
			copy := tool.Invoke(scoped(), lunchReworded)
			t.Logf("the turn's reworded copy, %v after the resend: %s", between, copy)
			if copy.Error == nil || copy.Error.Code != envelope.CodeEarlierApplied {
				t.Errorf("a reworded copy made in the same turn as the resend, before the model read anything: %s; want earlier_action_applied", copy.Status)
			}
			if n := m.count(); n != 1 {
				t.Errorf("one logical action (email Ana about lunch), one turn: %d emails (%v)", n, m.effects)
			}
		})
	}
}

// A notice is told to the model that made the action: under
// FencePrincipal, a call of another conversation of the principal that is
// held back by it (and answered earlier_action_applied about an email it
// never sent) tells the conversation that sent the email nothing.
//
// The lunch email of conversation 9 was delivered and its reply lost
// (unknown). Conversation 10 of the same user — another model, another
// task — sends Bob the weekly report: held by the principal's fence,
// which finds the lunch email applied (or, in the second case, by the
// notice of an operator's settlement) and answers conversation 10
// earlier_action_applied. That counts as the model being told, and the
// notice ends NoticeHold later. Conversation 9's model, which last read
// unknown_outcome for the lunch email, rewords it a minute later: sent, a
// second lunch email.
func TestNotice_AnotherConversationsAnswerTellsNotTheOneThatActed(t *testing.T) {
	for _, settle := range []string{"fence", "operator"} {
		t.Run(settle, func(t *testing.T) {
			storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
				clk := newClock()
				store := open()
				m := deliveredLost()
				check := &answers{answer: reconcile.StillPending()}
				tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: check,
					Fence: agenttool.FencePrincipal, Now: clk.Now, Lease: time.Hour, KeyTTL: 48 * time.Hour})
				first := tool.Invoke(scoped(), lunch) // conversation 9
				mustStatus(t, first, envelope.UnknownOutcome)
				check.set(reconcile.AppliedWith([]byte(`{"message_id":"<m>"}`)))
				if settle == "operator" {
					op, err := agenttool.NewOperator(store, tool)
					if err != nil {
						t.Fatal(err)
					}
					if err := op.ResolveApplied(context.Background(), first.RequestRef, first.Attempts, json.RawMessage(`{"message_id":"<m>"}`), "maria", "in the mail log"); err != nil {
						t.Fatal(err)
					}
				}

				report := tool.Invoke(otherSession(), bobReport) // conversation 10
				t.Logf("conversation 10, Bob's report: %s", report)
				if report.Error == nil || report.Error.Code != envelope.CodeEarlierApplied {
					t.Fatalf("conversation 10's email while the principal's lunch email was just found done: %s; want earlier_action_applied", report)
				}

				clk.Advance(time.Minute) // conversation 9's next turn
				copy := tool.Invoke(scoped(), lunchReworded)
				t.Logf("conversation 9, the reworded lunch email: %s", copy)
				if copy.Error == nil || copy.Error.Code != envelope.CodeEarlierApplied {
					t.Errorf("conversation 9's model, never told that %s was done, rewords it: %s; want earlier_action_applied", first.RequestRef, copy.Status)
				}
				if n := m.count(); n != 1 {
					t.Errorf("one logical action (email Ana about lunch) left %d emails (%v)", n, m.effects)
				}
			})
		})
	}
}

// foundByRef answers Applied for the refs in applied, NotApplied for any other
// (StillPending for all while pending).
type foundByRef struct {
	mu      sync.Mutex
	applied map[string]bool
	pending bool
	checks  []string
}

func (b *foundByRef) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checks = append(b.checks, req.Ref)
	switch {
	case b.pending:
		return reconcile.StillPending()
	case b.applied[req.Ref]:
		return reconcile.AppliedWith([]byte(`{"message_id":"<first@mail.test>"}`))
	}
	return reconcile.NotAppliedYet()
}

// found makes the destination show ref done.
func (b *foundByRef) found(ref string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending, b.applied[ref] = false, true
}

// lostFirstReply is a mail server script: the first email is delivered
// and its reply lost; every other is delivered.
func lostFirstReply(n int) (bool, error) {
	if n == 1 {
		return true, errLostReply
	}
	return true, nil
}

// firstFoundApplied builds a reconcilable send_email tool with opts (its
// Store set) and sends lunch in ctx: delivered, its reply lost — unknown
// — and the destination then shows it done.
func firstFoundApplied(t *testing.T, ctx context.Context, opts agenttool.Options) (*agenttool.Tool, *mailServer, *clock, envelope.Envelope) {
	t.Helper()
	m := &mailServer{script: lostFirstReply}
	check := &foundByRef{pending: true, applied: map[string]bool{}}
	clk := &clock{now: time.Now()}
	opts.Class, opts.Reconciler, opts.Now = agenttool.Reconcilable, check, clk.Now
	tool := newEmailTool(t, m, opts)
	first := tool.Invoke(ctx, lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	check.found(first.RequestRef)
	return tool, m, clk, first
}

// pausingStore runs onSettle once, right after the settlement (a
// succeeded Finish) of key is written: the process that settled it
// pauses there, before the fence's re-claim.
type pausingStore struct {
	agenttool.Store
	mu       sync.Mutex
	key      string
	onSettle func()
}

func (p *pausingStore) Finish(ctx context.Context, r storekit.FinishRequest) error {
	err := p.Store.Finish(ctx, r)
	p.mu.Lock()
	f := p.onSettle
	if err == nil && r.State == storekit.Succeeded && r.Key == p.key && f != nil {
		p.onSettle = nil
	} else {
		f = nil
	}
	p.mu.Unlock()
	if f != nil {
		f()
	}
	return err
}

// A reworded copy whose own call made the fence find the earlier action
// done never runs, however late its claim after that settlement comes:
// the process pauses past the notice (and the first's own resend told
// the model meanwhile, or the notice's backstop is short), and the copy
// is still held back, and kept so. (Found by a review: the fence's claim
// after the settlement read the notice ended and ran the copy.)
func TestNotice_ACopyWhoseOwnFenceFoundTheActionDoneNeverRunsHoweverLateItsClaim(t *testing.T) {
	for _, variant := range []string{"parallel resend tells, then pause", "short backstop, pause"} {
		t.Run(variant, func(t *testing.T) {
			storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
				ps := &pausingStore{Store: open()}
				opts := agenttool.Options{Store: ps}
				if variant == "short backstop, pause" {
					opts.NoticeBackstop = time.Second
				}
				tool, m, clk, first := firstFoundApplied(t, scoped(), opts)

				var resend envelope.Envelope
				ps.mu.Lock()
				ps.key = first.RequestRef
				ps.onSettle = func() {
					if variant == "parallel resend tells, then pause" {
						// The model's word-for-word resend of the first,
						// another tool call of the same turn, lands now.
						resend = tool.Invoke(scoped(), lunch)
					}
					clk.Advance(11 * time.Second) // the settling process pauses
				}
				ps.mu.Unlock()

				x := tool.Invoke(scoped(), lunchReworded)
				t.Logf("resend: %s", resend)
				t.Logf("reworded copy: %s", x)
				if m.count() != 1 {
					t.Errorf("%d emails went out; want 1 — the reworded copy whose call found the first done ran: %s", m.count(), x)
				}
				mustBeHeldBack(t, "the reworded copy", x, first.RequestRef, false)
				clk.Advance(time.Minute)
				mustBeHeldBack(t, "the reworded copy asked for again", tool.Invoke(scoped(), lunchReworded), first.RequestRef, true)
				if m.count() != 1 {
					t.Errorf("%d emails after the copy was asked for again; want 1", m.count())
				}
			})
		})
	}
}

// Under a principal's fence, conversation B's write, held back by the
// untold notice of conversation A's action found done, is kept held back
// under its own key for KeyTTL — past the notice, past the backstop: it
// may be A's action, asked for in another conversation of the user
// (Options.NoticeHold, docs/life-of-a-call.md "The slot"). The user who
// wants it done asks anew.
func TestNotice_UnderAPrincipalsFenceAnotherConversationsWriteHeldBackIsKeptSo(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		tool, m, clk, first := firstFoundApplied(t, scoped(), agenttool.Options{Store: open(), Fence: agenttool.FencePrincipal})
		b := agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-10")

		const bobReport = `{"to":"bob@example.com","subject":"Quarterly report","body":"Attached."}`
		held := tool.Invoke(b, bobReport)
		t.Logf("B's write: %s", held)
		clk.Advance(7 * time.Hour) // past NoticeHold and NoticeBackstop
		again := tool.Invoke(b, bobReport)
		t.Logf("B's write asked again 7h later: %s", again)
		mustBeHeldBack(t, "B's write", held, first.RequestRef, false)
		mustBeHeldBack(t, "B's write asked again", again, first.RequestRef, true)
		mustStatus(t, tool.Invoke(b, `{"to":"bob@example.com","subject":"Quarterly report, as asked","body":"Attached, as you asked."}`), envelope.Success)
		if m.count() != 2 {
			t.Errorf("%d emails; want A's and B's new one", m.count())
		}
	})
}

// Many copies in parallel, some word for word alike, right as the fence
// finds the first done: one email in all, and every copy is told the
// first was done (or, the first's own resend, its success replayed);
// each copy asked again after the notice is answered the same.
func TestNotice_ParallelCopiesAsTheFenceSettlesSendOneEmail(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		tool, m, clk, first := firstFoundApplied(t, scoped(), agenttool.Options{Store: open(), WaitTimeout: 5 * time.Second})
		inputs := []string{lunchReworded, lunchRephrased, lunchReworded, lunch, lunchRephrased,
			`{"to":"ana@example.com","subject":"Lunch?","body":"Noon on Friday?"}`, lunchReworded, lunch}
		envs := make([]envelope.Envelope, len(inputs))
		var wg sync.WaitGroup
		for i, in := range inputs {
			wg.Add(1)
			go func() { defer wg.Done(); envs[i] = tool.Invoke(scoped(), in) }()
		}
		wg.Wait()
		for i, env := range envs {
			ok := (inputs[i] == lunch && env.Status == envelope.Success) ||
				(env.Error != nil && env.Error.Code == envelope.CodeEarlierApplied && env.Earlier != nil && env.Earlier.RequestRef == first.RequestRef)
			if !ok && env.Status == envelope.UnknownOutcome && env.Error != nil && env.Error.Code == envelope.CodeEarlierUnknown {
				t.Logf("copy %d answered earlier unknown (being verified): %s", i, env)
				continue
			}
			if !ok {
				t.Errorf("copy %d (%s): %s", i, inputs[i], env)
			}
		}
		if m.count() != 1 {
			t.Fatalf("%d emails; want 1", m.count())
		}
		clk.Advance(time.Minute)
		for i, in := range inputs {
			if in == lunch || envs[i].Error == nil || envs[i].Error.Code != envelope.CodeEarlierApplied {
				continue
			}
			env := tool.Invoke(scoped(), in)
			if env.Error == nil || env.Error.Code != envelope.CodeEarlierApplied {
				t.Errorf("copy %d told earlier_action_applied, asked again after the notice: %s", i, env)
			}
		}
		if m.count() != 1 {
			t.Fatalf("%d emails after the copies were asked again; want 1", m.count())
		}
	})
}

// A held-back copy outlives the action it names when the notice that held
// it back came late (an operator's untold settlement, the copy hours
// later). Once that action's key has expired and its input ran anew as a
// new action, the held-back copy's answer still names the action done —
// with its result, or none — never the new action's result. (Found by a
// review: it showed the new email's id as the earlier action's.)
func TestNotice_AHeldBackCopyNeverNamesANewActionAsTheOneDone(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		tool, _, clk, first := firstFoundApplied(t, scoped(), agenttool.Options{Store: store, KeyTTL: 2 * time.Hour})
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		op = op.ForPrincipal("tenant-42/user-7")
		rec, err := op.Show(context.Background(), first.RequestRef)
		if err != nil {
			t.Fatal(err)
		}
		if err := op.ResolveApplied(context.Background(), first.RequestRef, rec.Attempts, []byte(`{"message_id":"<first@mail.test>"}`), "ops", "seen in the outbox"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(110 * time.Minute)
		held := tool.Invoke(scoped(), lunchReworded)
		if held.Error == nil || held.Error.Code != envelope.CodeEarlierApplied {
			t.Fatalf("reworded copy: %s", held)
		}
		clk.Advance(15 * time.Minute) // the first action's key has expired
		again := tool.Invoke(scoped(), lunch)
		t.Logf("the first input, past its key's lifetime: %s", again)
		replay := tool.Invoke(scoped(), lunchReworded)
		t.Logf("held-back copy again: %s", replay)
		if replay.Earlier == nil || replay.Earlier.RequestRef != first.RequestRef ||
			(len(replay.Earlier.Result) > 0 && string(replay.Earlier.Result) != `{"message_id":"<first@mail.test>"}`) {
			t.Errorf("held-back copy names as the action confirmed done after an unknown outcome: %+v; want %s, with its own result or none", replay.Earlier, first.RequestRef)
		}
	})
}

// lunchRewordedCased is lunchReworded with only the case of its subject
// changed: the same key (identifying values are case-folded), another
// fingerprint.
const lunchRewordedCased = `{"to":"ana@example.com","subject":"lunch on friday","body":"Shall we meet at noon?"}`

// heldBackCopy leaves lunch unknown, then has a reworded copy's
// fence find it applied: the copy is held back and kept so.
func heldBackCopy(t *testing.T, store agenttool.Store, opts agenttool.Options) (*agenttool.Tool, *mailServer, *clock, envelope.Envelope, envelope.Envelope) {
	t.Helper()
	opts.Store = store
	tool, m, clk, first := firstFoundApplied(t, scoped(), opts)
	held := tool.Invoke(scoped(), lunchReworded)
	mustBeHeldBack(t, "the reworded copy", held, first.RequestRef, false)
	return tool, m, clk, first, held
}

// A copy of the held-back call that the tool cannot tell apart from it but
// by its fingerprint (the case of a value) meets the held-back key: it is
// refused as any variant is (key_reused_with_different_input), and told
// of the action done — never that the earlier request for the same action
// "was not done", which would invite a rewording. (Found by a review.)
func TestNotice_AVariantOfAHeldBackCopyIsToldOfTheActionDone(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		tool, m, clk, first, held := heldBackCopy(t, open(), agenttool.Options{})
		// Within the notice, same turn: a case-only variant of the held-back copy.
		v := tool.Invoke(scoped(), lunchRewordedCased)
		t.Logf("case-only variant within the notice: %s", v)
		if v.RequestRef != held.RequestRef {
			t.Fatalf("variant has ref %s, held-back copy %s: not the same key", v.RequestRef, held.RequestRef)
		}
		// Any other wording within the notice gets earlier_action_applied:
		other := tool.Invoke(scoped(), lunchRephrased)
		mustBeHeldBack(t, "another wording within the notice", other, first.RequestRef, false)
		toldDone := func(what string, v envelope.Envelope) {
			t.Helper()
			if v.Error == nil || v.Error.Code != envelope.CodeKeyReused || v.Earlier == nil || v.Earlier.RequestRef != first.RequestRef ||
				v.Earlier.State != envelope.ActionSucceeded || !strings.Contains(v.Note, "was done") || strings.Contains(v.Note, "was not done") {
				t.Errorf("%s: %s; want key_reused_with_different_input, naming %s as done", what, v, first.RequestRef)
			}
		}
		toldDone("a case-only variant of the held-back copy within the notice", v)
		clk.Advance(time.Minute)
		toldDone("a case-only variant of the held-back copy after the notice", tool.Invoke(scoped(), lunchRewordedCased))
		if m.count() != 1 {
			t.Errorf("%d emails; want 1", m.count())
		}
	})
}

// stepCtx scopes a call as dbostool/temporaltool ByStep do: the action is
// its own session, and its explicit action id.
func stepCtx(action string) context.Context {
	return agenttool.WithActionID(agenttool.WithScope(context.Background(), "tenant-42/user-7", action), action)
}

// Explicit action ids (a durable engine's steps, ByStep) with a tool
// fenced by principal: a step of another workflow whose fence finds the
// first workflow's step done is held back, and keeps that answer — the
// same step called again, however late, answers the same, as any step
// answers with its action's outcome — and the workflow that still wants
// the write runs it as a new step (temporaltool, dbostool docs).
func TestNotice_UnderExplicitActionIDsAStepHeldBackAnswersTheSameAndANewStepRuns(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		tool, m, clk, w1 := firstFoundApplied(t, stepCtx("wf-invoice-ana/step-1"), agenttool.Options{Store: open(), Fence: agenttool.FencePrincipal})
		const bobReport = `{"to":"bob@example.com","subject":"Quarterly report","body":"Attached."}`
		w2 := tool.Invoke(stepCtx("wf-report-bob/step-1"), bobReport)
		t.Logf("another workflow's step: %s", w2)
		clk.Advance(7 * time.Hour) // past NoticeHold and NoticeBackstop: the engine retries the step later
		again := tool.Invoke(stepCtx("wf-report-bob/step-1"), bobReport)
		t.Logf("its retry 7h later: %s", again)
		mustBeHeldBack(t, "another workflow's step", w2, w1.RequestRef, false)
		mustBeHeldBack(t, "the same step called again", again, w1.RequestRef, true)
		if step2 := tool.Invoke(stepCtx("wf-report-bob/step-2"), bobReport); step2.Status != envelope.Success || m.sent(step2.RequestRef) != 1 {
			t.Errorf("the workflow's new step: %s; want it run once", step2)
		}
	})
}

// Two pgstore replicas on one schema: the fence of a reworded copy on A
// settles the unknown first action (its check is slow) while, on B, the
// same turn's copies land — the held-back copy word for word, the first's
// own resend, another wording. One email in all; every copy told the first
// was done, on either replica, then and after the notice.
func TestNotice_TwoReplicasOnOnePostgreSQLHoldBackEveryCopyOfTheTurn(t *testing.T) {
	open := pgReplicas(t)
	m := &mailServer{script: func(n int) (bool, error) {
		if n == 1 {
			return true, errLostReply
		}
		return true, nil
	}}
	g := &gate{answer: reconcile.StillPending()}
	clk := &jumpClock{}
	mk := func() *agenttool.Tool {
		return newEmailTool(t, m, agenttool.Options{Store: open(), Class: agenttool.Reconcilable, Reconciler: g, Now: clk.Now,
			WaitTimeout: 3 * time.Second})
	}
	a, b := mk(), mk()
	first := a.Invoke(scoped(), lunch)
	mustStatus(t, first, envelope.UnknownOutcome)
	g.set(reconcile.AppliedWith([]byte(`{"message_id":"<first@mail.test>"}`)), true)
	var wg sync.WaitGroup
	var fenced envelope.Envelope
	wg.Add(1)
	go func() { defer wg.Done(); fenced = a.Invoke(scoped(), lunchReworded) }()
	<-g.entered
	inputs := []string{lunchReworded, lunch, lunchRephrased, lunchReworded}
	envs := make([]envelope.Envelope, len(inputs))
	for i, in := range inputs {
		wg.Add(1)
		go func() { defer wg.Done(); envs[i] = b.Invoke(scoped(), in) }()
	}
	time.Sleep(300 * time.Millisecond)
	close(g.open)
	wg.Wait()
	t.Logf("A's fenced copy: %s", fenced)
	mustBeHeldBack(t, "A's fenced copy", fenced, first.RequestRef, fenced.Replayed)
	for i, env := range envs {
		t.Logf("B copy %d (%s): %s", i, inputs[i], env)
		if inputs[i] == lunch {
			if env.Status != envelope.Success {
				t.Errorf("the first's resend on B: %s", env)
			}
			continue
		}
		if env.Error == nil || env.Error.Code != envelope.CodeEarlierApplied {
			t.Errorf("B copy %d: %s; want earlier_action_applied", i, env)
		}
	}
	clk.Advance(time.Minute)
	for i, in := range []string{lunchReworded, lunchRephrased} {
		for j, tool := range []*agenttool.Tool{a, b} {
			env := tool.Invoke(scoped(), in)
			if env.Error == nil || env.Error.Code != envelope.CodeEarlierApplied {
				t.Errorf("copy %d asked again on replica %d after the notice: %s", i, j, env)
			}
		}
	}
	if m.count() != 1 {
		t.Errorf("%d emails; want 1", m.count())
	}
}

// failFoundApplied fails, once, the claim that carries the fence's
// finding (the store briefly unreachable), before anything is written.
type failFoundApplied struct {
	agenttool.Store
	failed atomic.Bool
}

func (f *failFoundApplied) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if r.FoundApplied != "" && f.failed.CompareAndSwap(false, true) {
		return storekit.ClaimResult{}, errors.New("connection refused")
	}
	return f.Store.Claim(ctx, r)
}

// The fence of a reworded copy finds the first action done and settles
// it, and the store cannot keep the copy held back (it blinks): the copy
// answers store_unavailable, and the first's notice stays untold — so the
// copy retried word for word, however much later within NoticeBackstop,
// is held back (and kept so), and never runs. (Found by a review: the
// notice was told as the settlement was written, and the retried copy ran
// once NoticeHold had passed.)
func TestNotice_AStoreThatCannotKeepACopyHeldBackLeavesTheNoticeUntold(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		fs := &failFoundApplied{Store: open()}
		tool, m, clk, first := firstFoundApplied(t, scoped(), agenttool.Options{Store: fs})
		x := tool.Invoke(scoped(), lunchReworded)
		if x.Error == nil || x.Error.Code != envelope.CodeStoreUnavailable {
			t.Errorf("the copy, the store failing to keep it held back: %s; want store_unavailable", x)
		}
		if rec, err := fs.Store.Get(context.Background(), first.RequestRef); err != nil || rec.State != agenttool.Succeeded || rec.NoticeUntil.Before(clk.Now().Add(time.Hour)) {
			t.Errorf("the first action after the store failed to keep the copy: %v until %v, %v; want settled applied, its notice untold", rec.State, rec.NoticeUntil, err)
		}
		clk.Advance(5 * time.Minute) // well past NoticeHold
		mustBeHeldBack(t, "the copy retried word for word", tool.Invoke(scoped(), lunchReworded), first.RequestRef, false)
		clk.Advance(time.Minute)
		mustBeHeldBack(t, "the copy asked for again after that", tool.Invoke(scoped(), lunchReworded), first.RequestRef, true)
		if m.count() != 1 {
			t.Errorf("%d emails; want 1 — the copy whose own fence found the first done ran on its retry", m.count())
		}
	})
}

// failSettleOnce fails, once, the Finish that settles key as succeeded
// (the store blinks as the fence settles the action it found done).
type failSettleOnce struct {
	agenttool.Store
	mu     sync.Mutex
	key    string
	failed atomic.Bool
}

func (f *failSettleOnce) Finish(ctx context.Context, r storekit.FinishRequest) error {
	f.mu.Lock()
	k := f.key
	f.mu.Unlock()
	if r.Key == k && r.State == storekit.Succeeded && f.failed.CompareAndSwap(false, true) {
		return errors.New("connection refused")
	}
	return f.Store.Finish(ctx, r)
}

// settleFailsOnce: lunch goes out, its reply is lost (unknown); the checker
// then finds it applied; the reworded copy's fence settles it, and the
// settlement fails once: nothing is kept, the copy answers
// store_unavailable.
func settleFailsOnce(t *testing.T, store agenttool.Store, compensated *[]string) (*agenttool.Tool, *failSettleOnce, *mailServer, *clock, envelope.Envelope, envelope.Envelope) {
	t.Helper()
	fs := &failSettleOnce{Store: store}
	var mu sync.Mutex
	tool, m, clk, first := firstFoundApplied(t, scoped(), agenttool.Options{Store: fs,
		Compensate: func(ctx context.Context, info agenttool.CallInfo) error {
			mu.Lock()
			defer mu.Unlock()
			*compensated = append(*compensated, info.RequestRef)
			return nil
		}})
	fs.mu.Lock()
	fs.key = first.RequestRef
	fs.mu.Unlock()
	held := tool.Invoke(scoped(), lunchReworded)
	if held.Error == nil || held.Error.Code != envelope.CodeStoreUnavailable {
		t.Errorf("the reworded copy, the settlement failing: %s; want store_unavailable", held)
	}
	if !fs.failed.Load() {
		t.Fatalf("the settlement never failed")
	}
	return tool, fs, m, clk, first, held
}

// A call is kept held back only by an action the store has settled
// applied, which stays so: the fence's settlement of X fails, X is
// unknown again, and a person compensates it (undoes the email); K asked
// again never says X was done. (Found by a review, when the fence kept K
// before it settled X: K then said X was done for good.)
func TestNotice_ACopyIsKeptHeldBackOnlyByAnActionTheStoreSettledApplied(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		var compensated []string
		store := open()
		tool, fs, m, clk, first, _ := settleFailsOnce(t, store, &compensated)
		clk.Advance(2 * time.Minute) // the fence's hold on X lapses
		op, err := agenttool.NewOperator(fs, tool)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := op.Show(context.Background(), first.RequestRef)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("X after the failed settlement: state %v attempts %d", rec.State, rec.Attempts)
		if err := op.Compensate(context.Background(), first.RequestRef, rec.Attempts, "ops", "recalled the email"); err != nil {
			t.Fatalf("compensate: %v", err)
		}
		rec, _ = op.Show(context.Background(), first.RequestRef)
		t.Logf("X after compensation: state %v; compensated %v", rec.State, compensated)
		again := tool.Invoke(scoped(), lunchReworded)
		t.Logf("K asked again: %s", again)
		xAgain := tool.Invoke(scoped(), lunch)
		t.Logf("X asked again: %s", xAgain)
		if k, err := fs.Store.Get(context.Background(), again.RequestRef); err == nil && k.HeldBack() {
			t.Errorf("K is kept held back by %s, which the store never settled applied: %+v", first.RequestRef, k)
		}
		if again.Error != nil && again.Error.Code == envelope.CodeEarlierApplied && rec.State == agenttool.Failed {
			t.Errorf("K answers earlier_action_applied (%s applied, do not resend) while %s is recorded compensated (undone): the envelope lies, and the action is refused for KeyTTL; %d emails, %d recalled",
				first.RequestRef, first.RequestRef, m.count(), len(compensated))
		}
	})
}

// After the fence's failed settlement a sweeper settles X applied (its
// notice untold); K, asked again, is held back, kept so, and tells the
// model; a new request after NoticeHold runs. (Found by a review, when a
// K kept before the settlement told nothing and the new request was held
// back for good.)
func TestNotice_AfterASweeperSettledTheActionTheCopyTellsAndANewRequestRuns(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		var compensated []string
		store := open()
		tool, fs, m, clk, first, _ := settleFailsOnce(t, store, &compensated)
		clk.Advance(2 * time.Minute)
		op, err := agenttool.NewOperator(fs, tool)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{})
		t.Logf("sweep: %+v %v", rep, err)
		mustBeHeldBack(t, "K asked again", tool.Invoke(scoped(), lunchReworded), first.RequestRef, false)
		clk.Advance(30 * time.Second) // past NoticeHold
		n := tool.Invoke(scoped(), lunchNextWeek)
		t.Logf("a new email after being told: %s", n)
		if n.Status != envelope.Success {
			t.Errorf("new write after the model was told (by K's replay) that %s was done, past NoticeHold: %s; want it run", first.RequestRef, n.Status)
			clk.Advance(7 * time.Hour)
			n2 := tool.Invoke(scoped(), lunchNextWeek)
			t.Logf("the same new email 7h later: %s", n2)
		}
		if m.count() != 2 {
			t.Errorf("%d emails; want the first and the new one", m.count())
		}
	})
}

// scopedDestination delivers every send and loses the reply of each "Lunch" subject
// (the X actions); its status search answers pending until ready, then by
// what it delivered.
type scopedDestination struct {
	mu        sync.Mutex
	delivered map[string]int
	ready     atomic.Bool
}

func (d *scopedDestination) send(ctx context.Context, in emailInput) (sent, error) {
	ref := agenttool.RequestRef(ctx)
	d.mu.Lock()
	if d.delivered == nil {
		d.delivered = map[string]int{}
	}
	d.delivered[ref]++
	d.mu.Unlock()
	if in.Subject == "Lunch" {
		return sent{}, errLostReply
	}
	return sent{MessageID: "<" + ref + ">"}, nil
}

func (d *scopedDestination) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	if !d.ready.Load() {
		return reconcile.StillPending()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.delivered[req.Ref] > 0 {
		return reconcile.AppliedWith([]byte(`{"message_id":"<` + req.Ref + `>"}`))
	}
	return reconcile.NotAppliedYet()
}

func (d *scopedDestination) total() (n int, dup []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ref, c := range d.delivered {
		n += c
		if c > 1 {
			dup = append(dup, ref)
		}
	}
	return n, dup
}

// Many principals, sessions and tools on one store, all at once: each
// reworded copy is held back by its own scope's and tool's action, never
// another's, and no action is sent twice.
func TestNotice_ManyScopesAtOnceEachCopyHeldBackByItsOwnScopesAction(t *testing.T) {
	for _, fence := range []agenttool.FenceScope{agenttool.FenceSession, agenttool.FencePrincipal} {
		for _, kind := range []string{"memstore", "pgstore"} {
			t.Run(fence.String()+"/"+kind, func(t *testing.T) {
				var store agenttool.Store
				if kind == "memstore" {
					store = memstore.New()
				} else {
					store = pgtest.Open(t)
				}
				d := &scopedDestination{}
				var tools []*agenttool.Tool
				for _, name := range []string{"send_email", "send_note"} {
					tool, err := agenttool.New(name, "Send.", d.send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
						Reconciler: d, Fence: fence, Retry: fastRetry, ClockSkew: -1})
					if err != nil {
						t.Fatal(err)
					}
					tools = append(tools, tool)
				}
				type scope struct{ p, s string }
				var scopes []scope
				for p := 0; p < 3; p++ {
					for s := 0; s < 2; s++ {
						scopes = append(scopes, scope{fmt.Sprintf("tenant/p%d", p), fmt.Sprintf("conv-%d", s)})
					}
				}
				ctxOf := func(sc scope) context.Context {
					return agenttool.WithScope(context.Background(), sc.p, sc.s)
				}
				// X: one per tool and fence scope.
				xref := map[string]string{} // tool|fence-scope → X's ref
				slotOf := func(tool string, sc scope) string {
					if fence == agenttool.FencePrincipal {
						return tool + "|" + sc.p
					}
					return tool + "|" + sc.p + "|" + sc.s
				}
				for _, tool := range tools {
					for _, sc := range scopes {
						if _, ok := xref[slotOf(tool.Name(), sc)]; ok {
							continue
						}
						env := tool.Invoke(ctxOf(sc), lunch)
						if env.Status != envelope.UnknownOutcome {
							t.Fatalf("X %s %v: %s", tool.Name(), sc, env)
						}
						xref[slotOf(tool.Name(), sc)] = env.RequestRef
					}
				}
				d.ready.Store(true)
				var wg sync.WaitGroup
				var mu sync.Mutex
				type got struct {
					tool string
					sc   scope
					in   string
					env  envelope.Envelope
				}
				var all []got
				for rep := 0; rep < 2; rep++ {
					for _, tool := range tools {
						for _, sc := range scopes {
							for _, in := range []string{lunchReworded, lunchRephrased} {
								wg.Add(1)
								go func() {
									defer wg.Done()
									env := tool.Invoke(ctxOf(sc), in)
									mu.Lock()
									all = append(all, got{tool.Name(), sc, in, env})
									mu.Unlock()
								}()
							}
						}
					}
				}
				wg.Wait()
				for _, g := range all {
					want := xref[slotOf(g.tool, g.sc)]
					env := g.env
					switch {
					case env.Status == envelope.Success:
						t.Errorf("%s %v %s ran: %s", g.tool, g.sc, g.in, env)
					case env.Error != nil && env.Error.Code == envelope.CodeEarlierApplied:
						if env.Earlier == nil || env.Earlier.RequestRef != want {
							t.Errorf("%s %v: held back naming %v, want %s: %s", g.tool, g.sc, env.Earlier, want, env)
						}
						if !strings.HasPrefix(env.RequestRef, g.tool+"/") {
							t.Errorf("answer of another tool: %s", env)
						}
					case env.Error != nil && (env.Error.Code == envelope.CodeInProgress || env.Error.Code == envelope.CodeEarlierUnknown):
						// a copy that met the check under way
					default:
						t.Errorf("%s %v %s: %s", g.tool, g.sc, g.in, env)
					}
				}
				// Asked again, each copy names its own action; X answers success.
				for _, tool := range tools {
					for _, sc := range scopes {
						want := xref[slotOf(tool.Name(), sc)]
						for _, in := range []string{lunchReworded, lunchRephrased} {
							env := tool.Invoke(ctxOf(sc), in)
							if env.Error == nil || env.Error.Code != envelope.CodeEarlierApplied || env.Earlier == nil || env.Earlier.RequestRef != want {
								t.Errorf("again %s %v %s: %s; want earlier_action_applied naming %s", tool.Name(), sc, in, env, want)
							}
						}
						if fence == agenttool.FenceSession || sc.s == "conv-0" {
							if env := tool.Invoke(ctxOf(sc), lunch); env.Status != envelope.Success || env.RequestRef != want {
								t.Errorf("X again %s %v: %s", tool.Name(), sc, env)
							}
						}
					}
				}
				n, dup := d.total()
				if n != len(xref) || len(dup) > 0 {
					t.Errorf("%d deliveries (dups %v), want %d", n, dup, len(xref))
				}
			})
		}
	}
}

// The sweeper settles X while copies' fences hold it, on two replicas of
// one store (or one memstore): one delivery; a copy answered
// earlier_action_applied stays so; a later new action runs.
func TestNotice_ASweeperRacingTheFenceLetsNoCopyRun(t *testing.T) {
	kinds := map[string]func(t *testing.T) (agenttool.Store, agenttool.Store){
		"memstore": func(t *testing.T) (agenttool.Store, agenttool.Store) { s := memstore.New(); return s, s },
		"pgstore": func(t *testing.T) (agenttool.Store, agenttool.Store) {
			open := pgReplicas(t)
			return open(), open()
		},
	}
	for kind, open := range kinds {
		t.Run(kind, func(t *testing.T) {
			for round := 0; round < 6; round++ {
				a, b := open(t)
				d := &scopedDestination{}
				clk := newClock()
				mk := func(s agenttool.Store) *agenttool.Tool {
					tool, err := agenttool.New("send_email", "Send.", d.send, agenttool.Options{Store: s, Class: agenttool.Reconcilable,
						Reconciler: d, Retry: fastRetry, ClockSkew: -1, Now: clk.Now})
					if err != nil {
						t.Fatal(err)
					}
					return tool
				}
				ta, tb := mk(a), mk(b)
				op, err := agenttool.NewOperator(b, tb)
				if err != nil {
					t.Fatal(err)
				}
				x := ta.Invoke(scoped(), lunch)
				if x.Status != envelope.UnknownOutcome {
					t.Fatalf("X: %s", x)
				}
				d.ready.Store(true)
				ins := []struct {
					tool *agenttool.Tool
					in   string
				}{{ta, lunchReworded}, {tb, lunchRephrased}, {tb, lunchReworded}, {ta, lunch}}
				envs := make([]envelope.Envelope, len(ins))
				var wg sync.WaitGroup
				wg.Add(len(ins) + 1)
				go func() {
					defer wg.Done()
					if _, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{}); err != nil {
						t.Errorf("sweep: %v", err)
					}
				}()
				for i, c := range ins {
					go func() { defer wg.Done(); envs[i] = c.tool.Invoke(scoped(), c.in) }()
				}
				wg.Wait()
				for i, env := range envs[:3] {
					if env.Status == envelope.Success {
						t.Errorf("round %d copy %d ran: %s", round, i, env)
					}
				}
				t.Logf("round %d: %s %s %s / X %s", round, codeOf(envs[0]), codeOf(envs[1]), codeOf(envs[2]), codeOf(envs[3]))
				clk.Advance(2 * 60 * 60 * 1e9)
				for i, c := range ins[:3] {
					env := c.tool.Invoke(scoped(), c.in)
					if codeOf(envs[i]) == envelope.CodeEarlierApplied && codeOf(env) != envelope.CodeEarlierApplied {
						t.Errorf("round %d copy %d, held back, two hours later: %s", round, i, env)
					}
					if env.Status == envelope.Success {
						t.Logf("round %d copy %d (first %s) ran two hours later", round, i, codeOf(envs[i]))
					}
				}
				if env := ta.Invoke(scoped(), lunch); env.Status != envelope.Success || env.RequestRef != x.RequestRef {
					t.Errorf("X later: %s", env)
				}
				if env := tb.Invoke(scoped(), lunchNextWeek); env.Status != envelope.Success {
					t.Errorf("round %d: a new action two hours later: %s", round, env)
				}
				d.mu.Lock()
				if n := d.delivered[x.RequestRef]; n != 1 {
					t.Errorf("round %d: X delivered %d times", round, n)
				}
				d.mu.Unlock()
			}
		})
	}
}

func codeOf(env envelope.Envelope) string {
	if env.Error == nil {
		return string(env.Status)
	}
	return env.Error.Code
}
