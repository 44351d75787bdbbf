package agenttool

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
)

// Errors of settling an unknown outcome.
var (
	// ErrNotUnknown: the record's outcome is not unknown (it is settled, or
	// approved for a retry), so there is nothing to resolve.
	ErrNotUnknown = errors.New("record is not awaiting reconciliation")
	// ErrBusy: a live call holds the record; try again after it ends.
	ErrBusy = errors.New("record is held by a live call")
	// ErrStale: the record has moved on since the decision was made about
	// it (another attempt ran): nothing was settled; look at it again.
	ErrStale = errors.New("the record has changed since it was read")
)

// holding is an unknown record taken over to be settled. Its lease is kept
// while it is held, and its work (a check, a compensation) runs on a
// context that ends if the lease cannot be kept: at most one reconciler or
// compensation runs per key at a time.
type holding struct {
	t         *Tool
	rec       Record // as it was before the takeover
	token     uint64
	heldUntil time.Time // the latest time an earlier attempt may have been sent or in flight (inFlightUntil)
	work      context.Context
	stopWork  context.CancelCauseFunc
	keep      keeper
}

// hold starts keeping a taken-over record's lease. The attempt count is the
// claim's: a takeover of a lapsed lease counts the dead holder's attempt,
// and every settlement keeps it.
func (t *Tool) hold(ctx context.Context, rec Record, res storekit.ClaimResult) *holding {
	rec.Attempts = res.Record.Attempts
	h := &holding{t: t, rec: rec, token: res.Record.Token, heldUntil: inFlightUntil(res)}
	h.work, h.stopWork = context.WithCancelCause(ctx)
	h.keep.start(t, ctx, rec.Key, h.token, res.Record.LeaseExpiry, h.stopWork)
	return h
}

// takeOver claims a record that awaits reconciliation, so that its outcome can
// be settled by one party at a time. The claim is made with the record's own
// principal and fingerprint: it settles exactly that key and input.
func (t *Tool) takeOver(ctx context.Context, key string) (*holding, error) {
	return t.takeOverAs(ctx, key, newOwner())
}

// takeOverAs is takeOver with the lease owner the record is held under.
func (t *Tool) takeOverAs(ctx context.Context, key, owner string) (*holding, error) {
	cfg := t.cfg
	rec, err := cfg.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	now := cfg.Now()
	if !rec.AwaitsReconciliation(now) {
		if rec.State == Pending {
			return nil, fmt.Errorf("agenttool: %s: %w", key, ErrBusy)
		}
		return nil, fmt.Errorf("agenttool: %s is %v: %w", key, rec.State, ErrNotUnknown)
	}
	res, err := cfg.Store.Claim(ctx, storekit.ClaimRequest{
		Key: key, Tool: rec.Tool, Principal: rec.Principal, Session: rec.Session, Fingerprint: rec.Fingerprint,
		Owner: owner, Now: now, Lease: cfg.Lease, TakeOver: true,
	})
	switch {
	case err != nil:
		return nil, err
	case res.Claimed && res.TookOver:
		return t.hold(ctx, rec, res), nil
	case res.Claimed:
		// Between the read and the claim the record was approved for a retry,
		// and this claim consumed the approval: give it back.
		h := t.hold(ctx, res.Record, res)
		if err := h.finish(ctx, Unknown, nil, nil, true); err != nil { // nil keeps the record's resolution
			return nil, err
		}
		return nil, fmt.Errorf("agenttool: %s was just approved for a retry: %w", key, ErrNotUnknown)
	case res.Record.State == Pending:
		return nil, fmt.Errorf("agenttool: %s: %w", key, ErrBusy)
	}
	return nil, fmt.Errorf("agenttool: %s is %v: %w", key, res.Record.State, ErrNotUnknown)
}

// applied records the effect as done, with the destination's result.
func (h *holding) applied(ctx context.Context, result json.RawMessage, res *Resolution) (envelope.Envelope, error) {
	h.t.announce(h.rec.Principal, h.rec.Session, notice{earlier: h.rec.Key, result: result})
	env := envelope.Envelope{
		Version: envelope.Version, Status: envelope.Success, Tool: h.t.name, RequestRef: h.rec.Key,
		Attempts: h.rec.Attempts, Reconciled: true, Result: result, Next: envelope.Continue,
		Note: "Confirmed done after an unknown outcome; it was not repeated.",
	}
	return env, h.finish(ctx, Succeeded, &env, res, false)
}

// notApplied records that the effect did not happen: one more attempt of the
// key may run.
func (h *holding) notApplied(ctx context.Context, res *Resolution) error {
	return h.finish(ctx, Unknown, nil, res, true)
}

// stillUnknown gives the record back as it was: unknown, unresolved.
func (h *holding) stillUnknown(ctx context.Context) error {
	return h.finish(ctx, Unknown, nil, nil, false)
}

// compensated records that the effect, if it happened, was undone.
func (h *holding) compensated(ctx context.Context, res *Resolution) (envelope.Envelope, error) {
	env := envelope.Envelope{
		Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: h.t.name, RequestRef: h.rec.Key,
		Attempts: h.rec.Attempts, Next: envelope.AskHuman,
		Error: &envelope.Error{Code: envelope.CodeCompensated, Message: "the action's effect, if it happened, was undone by its compensating action"},
		Note:  "This action was cancelled and undone. Ask the user whether to do it again.",
	}
	return env, h.finish(ctx, Failed, &env, res, false)
}

// end lets the record go without settling it, if nothing settled it: its
// lease is no longer renewed (it lapses, and the record can be taken over
// again) and its work is cancelled. Deferred by every holder, so that a
// check or a compensation that panics does not hold the record for as long
// as the process lives. It may be called more than once.
func (h *holding) end() {
	h.keep.stop()
	h.stopWork(nil)
}

// finish writes the settled state and lets the record go. A nil env keeps
// the record's outcome. The resolution's who and why pass through the
// tool's codec (I8).
func (h *holding) finish(ctx context.Context, state State, env *envelope.Envelope, res *Resolution, approve bool) error {
	h.keep.stop()
	defer h.stopWork(nil)
	if res != nil {
		if res.At.IsZero() {
			res.At = h.t.cfg.Now()
		}
		sealed, err := h.t.sealResolution(h.rec.Key, res)
		if err != nil {
			return err
		}
		res = sealed
	}
	req := storekit.FinishRequest{
		Key: h.rec.Key, Token: h.token, State: state, Attempts: h.rec.Attempts, Outcome: h.rec.Outcome,
		RetryApproved: approve, Resolution: res,
	}
	if state == Unknown && !approve {
		req.HeldUntil = h.heldUntil
	}
	return h.t.writeOutcome(ctx, req, env)
}

// sealPrefix starts a resolution's who or why as the tool's codec encoded
// it, in base64.
const sealPrefix = "sealed:"

// seal returns s encoded by the tool's codec, in base64 after sealPrefix.
// The default codec keeps s as it is, unless s itself starts with the
// prefix.
func (t *Tool) seal(key, s string) (string, error) {
	if _, plain := t.cfg.codec.(plainCodec); s == "" || (plain && !strings.HasPrefix(s, sealPrefix)) {
		return s, nil
	}
	b, err := t.cfg.codec.Encode(key, []byte(s))
	if err != nil {
		return "", err
	}
	return sealPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// unseal returns what seal encoded, decoded by the tool's codec; a string
// it cannot decode comes back as it is.
func (t *Tool) unseal(key, s string) string {
	if !strings.HasPrefix(s, sealPrefix) {
		return s
	}
	b, err := base64.StdEncoding.DecodeString(s[len(sealPrefix):])
	if err == nil {
		b, err = t.cfg.codec.Decode(key, b)
	}
	if err != nil {
		return s
	}
	return string(b)
}

// sealResolution returns res with By and Why encoded by the tool's codec,
// unless the codec is the default one, which keeps them as they are.
func (t *Tool) sealResolution(key string, res *Resolution) (*Resolution, error) {
	out := *res
	for _, f := range []*string{&out.By, &out.Why} {
		sealed, err := t.seal(key, *f)
		if err != nil {
			return nil, fmt.Errorf("encoding the resolution: %w", err)
		}
		*f = sealed
	}
	return &out, nil
}

// openResolution returns res with By and Why decoded by the tool's codec,
// as far as it can.
func (t *Tool) openResolution(key string, res *Resolution) *Resolution {
	if res == nil {
		return nil
	}
	out := *res
	out.By, out.Why = t.unseal(key, out.By), t.unseal(key, out.Why)
	return &out
}
