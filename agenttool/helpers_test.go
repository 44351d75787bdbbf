package agenttool_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// emailInput is the input of the test send_email tool.
type emailInput struct {
	To      string `json:"to" desc:"recipient address"`
	Subject string `json:"subject"`
	Body    string `json:"body,omitempty"`
}

type sent struct {
	MessageID string `json:"message_id"`
}

// mailServer is a fake destination that records effects by request
// reference. Its behaviour per attempt is scripted.
type mailServer struct {
	mu      sync.Mutex
	effects []string // request refs of delivered messages, in order
	runs    atomic.Int64
	// script returns, for the n-th run (from 1), whether to deliver and the
	// error to return afterwards (or before, if deliver is false).
	script func(n int) (deliver bool, err error)
	// dedupe makes the server honour the request reference as an
	// idempotency key, as a keyed destination does.
	dedupe bool
	delay  time.Duration
}

func (m *mailServer) send(ctx context.Context, in emailInput) (sent, error) {
	n := int(m.runs.Add(1))
	ref := agenttool.RequestRef(ctx)
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	deliver, err := true, error(nil)
	if m.script != nil {
		deliver, err = m.script(n)
	}
	if deliver {
		m.mu.Lock()
		dup := false
		if m.dedupe {
			for _, e := range m.effects {
				dup = dup || e == ref
			}
		}
		if !dup {
			m.effects = append(m.effects, ref)
		}
		m.mu.Unlock()
	}
	if err != nil {
		return sent{}, err
	}
	return sent{MessageID: "<" + ref + "@mail.test>"}, nil
}

func (m *mailServer) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.effects)
}

var errLostReply = errors.New("read tcp 127.0.0.1:25: connection reset by peer")

// fastRetry keeps tests quick.
var fastRetry = agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond}

func newEmailTool(t testing.TB, m *mailServer, opts agenttool.Options) *agenttool.Tool {
	t.Helper()
	if opts.Retry == (agenttool.RetryPolicy{}) {
		opts.Retry = fastRetry
	}
	if opts.Class == agenttool.Reconcilable && opts.Reconciler == nil {
		// These tests settle such tools' unknown outcomes themselves.
		opts.SettledByOperators = true
	}
	tool, err := agenttool.New("send_email", "Send an email.", m.send, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func scoped() context.Context {
	return agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9")
}

const emailToAna = `{"to":"ana@example.com","subject":"Lunch","body":"See you at noon."}`

// storeKinds runs a test against each store.
func storeKinds(t *testing.T, fn func(t *testing.T, open func() agenttool.Store)) {
	t.Run("memstore", func(t *testing.T) {
		fn(t, func() agenttool.Store { return memstore.New() })
	})
	t.Run("boltstore", func(t *testing.T) {
		fn(t, func() agenttool.Store { return openBolt(t, filepath.Join(t.TempDir(), "keys.db")) })
	})
	t.Run("pgstore", func(t *testing.T) {
		fn(t, func() agenttool.Store { return pgtest.Open(t) })
	})
}

func openBolt(t testing.TB, path string) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustStatus(t *testing.T, env envelope.Envelope, want envelope.Status) {
	t.Helper()
	if env.Status != want {
		t.Fatalf("status = %s, want %s; envelope %s", env.Status, want, env)
	}
}

// faultyStore fails chosen operations, as a store that goes away would.
type faultyStore struct {
	agenttool.Store
	failClaim, failFinish, failRelease, failRenew atomic.Bool
}

func (f *faultyStore) Renew(ctx context.Context, r storekit.RenewRequest) error {
	if f.failRenew.Load() {
		return errStoreDown
	}
	return f.Store.Renew(ctx, r)
}

var errStoreDown = errors.New("connection to store refused")

func (f *faultyStore) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if f.failClaim.Load() {
		return storekit.ClaimResult{}, errStoreDown
	}
	return f.Store.Claim(ctx, r)
}

func (f *faultyStore) Finish(ctx context.Context, r storekit.FinishRequest) error {
	if f.failFinish.Load() {
		return errStoreDown
	}
	return f.Store.Finish(ctx, r)
}

func (f *faultyStore) Release(ctx context.Context, key string, token uint64) error {
	if f.failRelease.Load() {
		return errStoreDown
	}
	return f.Store.Release(ctx, key, token)
}

// clock is a manual clock for lease and expiry tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
