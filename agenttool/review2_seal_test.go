package agenttool_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// xorCodec "encrypts" by flipping bits, with a marker to check.
type xorCodec struct{}

func (xorCodec) Encode(_ string, b []byte) ([]byte, error) {
	out := append([]byte("X:"), b...)
	for i := 2; i < len(out); i++ {
		out[i] ^= 0x5a
	}
	return out, nil
}

func (xorCodec) Decode(_ string, b []byte) ([]byte, error) {
	if !bytes.HasPrefix(b, []byte("X:")) {
		return nil, errors.New("not sealed by this codec")
	}
	out := bytes.Clone(b[2:])
	for i := range out {
		out[i] ^= 0x5a
	}
	return out, nil
}

// interposer runs `between` once, just before the first takeover claim of
// key, as another replica's operator would act between the sweeper's read
// and its claim.
type interposer struct {
	agenttool.Store
	key     string
	once    sync.Once
	between func()
}

func (i *interposer) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if r.TakeOver && r.Key == i.key {
		i.once.Do(i.between)
	}
	return i.Store.Claim(ctx, r)
}

// takeOver finds the record approved between its read and its claim and
// gives it back with the resolution it read: sealed already, it is sealed
// again (an operator sees "sealed:…" as who settled it), and the
// operator's own settlement (who, why) is overwritten by the older one.
func TestResolutionIsSealedOnceAndNeverReplacedByAGiveBack(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		inner := open()
		m := &mailServer{script: func(n int) (bool, error) { return false, errLostReply }}
		ip := &interposer{Store: inner}
		opts := agenttool.Options{Store: ip, Class: agenttool.Reconcilable, Reconciler: &answers{answer: reconcile.StillPending()},
			Codec: xorCodec{}, Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
		tool := newEmailTool(t, m, opts)
		opts.Store = inner
		replica := newEmailTool(t, m, opts) // another replica's tool, on the same data
		op, _ := agenttool.NewOperator(ip, tool)
		op2, _ := agenttool.NewOperator(inner, replica)
		ctx := context.Background()

		a := tool.Invoke(scoped(), lunch)
		mustStatus(t, a, envelope.UnknownOutcome)
		if err := op.ResolveNotApplied(ctx, a.RequestRef, 1, "maria", "bounced"); err != nil {
			t.Fatal(err)
		}
		mustStatus(t, tool.Invoke(scoped(), lunch), envelope.UnknownOutcome) // the approved retry is lost too
		ip.key = a.RequestRef
		ip.between = func() {
			if err := op2.ResolveNotApplied(ctx, a.RequestRef, 2, "sam", "not in the provider's log"); err != nil {
				t.Error(err)
			}
		}
		rep, err := op.SweepOnce(ctx, agenttool.SweeperOptions{})
		t.Logf("sweep: %+v %v", rep, err)
		rec, err := op.Show(ctx, a.RequestRef)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("record: %v approved=%v resolution %+v", rec.State, rec.RetryApproved, *rec.Resolution)
		if rec.Resolution == nil || rec.Resolution.By != "operator:sam" {
			t.Fatalf("after sam settled it, the record says it was settled by %q (%q)", rec.Resolution.By, rec.Resolution.Why)
		}
	})
}
