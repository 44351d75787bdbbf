package agenttool_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// truthfulMail delivers by request ref and knows what it delivered; its
// reconciler tells the truth (and, the server being synchronous, that
// nothing can land later).
type truthfulMail struct {
	mu    sync.Mutex
	count map[string]int
	lose  func(in emailInput) (deliver bool, lost bool)
	runs  int
}

func (m *truthfulMail) send(ctx context.Context, in emailInput) (sent, error) {
	ref := agenttool.RequestRef(ctx)
	deliver, lost := true, false
	if m.lose != nil {
		deliver, lost = m.lose(in)
	}
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
	m.mu.Lock()
	m.runs++
	if deliver {
		m.count[ref]++
	}
	m.mu.Unlock()
	if lost {
		return sent{}, errLostReply
	}
	return sent{MessageID: "<" + ref + "@mail.test>"}, nil
}

func (m *truthfulMail) Check(_ context.Context, req reconcile.Request) reconcile.Answer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.count[req.Ref] > 0 {
		return reconcile.AppliedWith([]byte(`{"message_id":"<` + req.Ref + `@mail.test>"}`))
	}
	return reconcile.NotAppliedFenced()
}

func (m *truthfulMail) delivered(ref string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count[ref]
}

// Three earlier unknown actions in one scope, then 40 goroutines at once:
// the model's copies of them (identical and reworded) and an
// orchestrator's distinct new actions, some of whose replies are lost
// too. Then, after the scope is quiet and NoticeHold has passed, every
// action is called again one at a time: the scope must recover without a
// person (the reconciler tells the truth), every key must have at most one
// effect, and no success may be without its effect.
func TestReview13_ManyCallsAfterThreeUnknownsRecover(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &truthfulMail{count: map[string]int{}}
		var phase1 sync.Mutex
		lostFirst := map[string]bool{}
		m.lose = func(in emailInput) (bool, bool) {
			phase1.Lock()
			defer phase1.Unlock()
			if in.Subject == "seed" && !lostFirst[in.To] {
				lostFirst[in.To] = true
				return in.To != "a2@example.com", true // a1, a3 delivered; a2 not; replies lost
			}
			if in.Subject == "flaky" {
				d := rand.IntN(2) == 0
				return d, !d || rand.IntN(2) == 0
			}
			return true, false
		}
		tool, err := agenttool.New("send_email", "Send an email.", m.send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
			Reconciler: m, Retry: agenttool.RetryPolicy{MaxAttempts: 1}, NoticeHold: 150 * time.Millisecond,
			WaitTimeout: 300 * time.Millisecond, Lease: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// The reconciler says "pending" while the seeds are made, so that
		// they stay unknown.
		var seeds []string
		for _, to := range []string{"a1", "a2", "a3"} {
			in := fmt.Sprintf(`{"to":"%s@example.com","subject":"seed","body":"x"}`, to)
			seeds = append(seeds, in)
		}
		pend := &answers{answer: reconcile.StillPending()}
		seedTool, err := agenttool.New("send_email", "Send an email.", m.send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
			Reconciler: pend, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		var seedRef string
		for _, in := range seeds {
			env := seedTool.Invoke(scoped(), in)
			if env.Status != envelope.UnknownOutcome {
				t.Fatalf("seed %s: %s", in, env)
			}
			seedRef = env.RequestRef
		}
		pool := append([]string{}, seeds...)
		for _, to := range []string{"a1", "a2", "a3"} {
			pool = append(pool, fmt.Sprintf(`{"to":"%s@example.com","subject":"seed again","body":"x, reworded"}`, to))
		}
		for i := 0; i < 6; i++ {
			pool = append(pool, fmt.Sprintf(`{"to":"n%d@example.com","subject":"new","body":"y"}`, i))
		}
		for i := 0; i < 3; i++ {
			pool = append(pool, fmt.Sprintf(`{"to":"f%d@example.com","subject":"flaky","body":"z"}`, i))
		}
		type result struct {
			in  string
			env envelope.Envelope
		}
		var mu sync.Mutex
		var results []result
		var wg sync.WaitGroup
		for g := 0; g < 40; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 3; k++ {
					in := pool[rand.IntN(len(pool))]
					env := tool.Invoke(scoped(), in)
					mu.Lock()
					results = append(results, result{in, env})
					mu.Unlock()
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("the calls did not end within a minute")
		}
		codes := map[string]int{}
		for _, r := range results {
			c := string(r.env.Status)
			if r.env.Error != nil {
				c += "/" + r.env.Error.Code
			}
			codes[c]++
			if r.env.Status == envelope.Success && m.delivered(r.env.RequestRef) == 0 {
				t.Errorf("success without an effect: %s", r.env)
			}
		}
		t.Logf("burst: %v", codes)

		// Converge: call every action again, one at a time, until nothing
		// answers earlier_action_* / in_progress, with NoticeHold between rounds.
		var last map[string]envelope.Envelope
		for round := 0; round < 15; round++ {
			time.Sleep(200 * time.Millisecond)
			last = map[string]envelope.Envelope{}
			stuck := 0
			for _, in := range pool {
				env := tool.Invoke(scoped(), in)
				last[in] = env
				if env.Status == envelope.UnknownOutcome || (env.Error != nil && (env.Error.Code == envelope.CodeEarlierApplied)) {
					stuck++
				}
			}
			if stuck == 0 {
				break
			}
		}
		for in, env := range last {
			if env.Status == envelope.UnknownOutcome {
				t.Errorf("after the scope was quiet and every action was asked about 15 times: %s → %s", in, env)
			}
		}
		m.mu.Lock()
		for ref, n := range m.count {
			if n > 1 {
				t.Errorf("%s delivered %d times", ref, n)
			}
		}
		m.mu.Unlock()
		seedRec, err := store.Get(context.Background(), seedRef)
		if err != nil {
			t.Fatal(err)
		}
		held, err := store.ListUnknown(context.Background(), storekit.ListRequest{Tool: "send_email", Principal: &seedRec.Principal, Held: true, Now: time.Now(), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range held {
			t.Errorf("still held/unknown at the end: %s %v owner=%q", r.Key, r.State, r.Owner)
		}
	})
}
