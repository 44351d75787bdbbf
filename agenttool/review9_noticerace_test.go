package agenttool_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

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

// The notice (NoticeHold) was put after the fence's settlement of the
// earlier action was written to the store, so a parallel call of the same
// turn that claimed in between found neither an unknown record to fence
// nor a notice, and sent a second email; it is now put before the write. With a store whose commit
// is visible before its acknowledgement reaches the writer (PostgreSQL, any
// store over a network), the window is one round trip.
func TestReview9_NoticeIsPutAfterTheSettlementIsVisible(t *testing.T) {
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

// The same without a slow store: many parallel reworded calls at the
// moment the fence settles, on every store. Counts how often a second
// email goes out (before the fix: a third to half of the rounds).
func TestReview9_NoticeRaceStress(t *testing.T) {
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
				time.Sleep(time.Duration(i*7) * time.Microsecond)
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
