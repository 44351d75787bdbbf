package boltstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// effectsBucket holds, for each key whose effect was applied through
// [Store.Effect], the effect's result.
var effectsBucket = []byte("retrysafe/effects")

// Effect applies a local effect atomically with the key: fn runs inside one
// bbolt write transaction that also records, under the calling guarded
// tool's request reference, that the effect is applied and what it returned.
// Either both commit or neither does, so there is no crash window between the
// effect and its record, and [Store.Reconciler] answers exactly.
//
// Call it from a guarded tool, with the context the tool was given. It
// refuses (and fn does not run) when the call no longer holds its key, and
// returns the recorded result without running fn again when an earlier
// attempt of the same action already applied it. fn must not keep tx.
//
// fn may run twice: writes are group-committed, and when another write in
// the same batch fails, the batch is rolled back and each write, this one
// included, runs again alone. Its writes to tx commit once. So fn must have
// no effect outside tx, and should be quick: it runs inside a write
// transaction that other calls' writes may be waiting to share.
//
// An error returned by fn rolls the effect back: it is reported as definite
// unless fn classified it otherwise. A panic in fn rolls back this write
// only and is reported as a definite error (code effect_panicked) to this
// caller; the other writes of its batch commit. A failed commit leaves the
// outcome unknown. A commit handler that fn registers (tx.OnCommit) runs
// after the commit, and one that panics does not stop the store: each
// write of that transaction, durable, is answered with an error wrapping
// ErrCommitHandlerPanicked, and this call's action is settled through the
// reconciler, as after any failed commit.
//
// Once the effect has committed, the key cannot be released nor recorded as
// failed, whatever the tool reports afterwards: the store answers
// storekit.ErrEffectApplied, and the call settles the action through its
// reconciler (or records it as unknown), never as not applied.
func (s *Store) Effect(ctx context.Context, fn func(tx *bolt.Tx) (json.RawMessage, error)) (json.RawMessage, error) {
	info, ok := storekit.HolderFrom(ctx)
	if !ok || info.Key == "" {
		return nil, envelope.MarkDefinite(errors.New("boltstore: Effect is called from a guarded tool, with its context"), "not_guarded")
	}
	key := []byte(info.Key)
	var result json.RawMessage
	var fnErr error
	err := s.update(ctx, func(b *bolt.Bucket) error {
		rec, err := load(b, info.Key)
		if err != nil {
			return err
		}
		if rec == nil || rec.State != storekit.Pending || rec.Token != info.Token {
			return fmt.Errorf("boltstore: %s is no longer held by this call: %w", info.Key, storekit.ErrFenced)
		}
		effects := b.Tx().Bucket(effectsBucket)
		if prev := effects.Get(key); prev != nil {
			// Applied by an earlier attempt: never twice.
			var err error
			result, err = openResult(info.Codec, info.Key, prev)
			return err
		}
		if result, fnErr = fn(b.Tx()); fnErr != nil {
			return fnErr
		}
		if len(result) == 0 {
			result = json.RawMessage("null")
		}
		sealed, err := sealResult(info.Codec, info.Key, result)
		if err != nil {
			return err
		}
		return effects.Put(key, sealed)
	})
	switch {
	case errors.Is(err, ErrPanicked):
		return nil, envelope.MarkDefinite(err, "effect_panicked") // rolled back: nothing committed
	case fnErr != nil:
		if envelope.Classify(fnErr) == envelope.Unknown {
			return nil, envelope.MarkDefinite(fnErr, "")
		}
		return nil, fnErr
	case errors.Is(err, storekit.ErrFenced), errors.Is(err, storekit.ErrCorrupt), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, envelope.MarkTransient(err) // nothing was written
	case err != nil:
		return nil, envelope.MarkUnknown(fmt.Errorf("boltstore: committing the effect: %w", err))
	}
	return result, nil
}

// Reconciler answers for effects applied through [Store.Effect]: Applied with
// the recorded result when the key's effect committed, NotApplied otherwise.
// The answer is exact because the effect and its record commit together and
// a holder that lost its lease cannot apply it. The result is decoded with
// the codec of the tool that asks (storekit.Holder on the check's
// context).
func (s *Store) Reconciler() reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		var result []byte
		err := s.view(ctx, func(b *bolt.Bucket) error {
			stored := b.Tx().Bucket(effectsBucket).Get([]byte(ref))
			if stored == nil {
				return nil
			}
			info, _ := storekit.HolderFrom(ctx)
			var err error
			result, err = openResult(info.Codec, ref, stored)
			return err
		})
		switch {
		case err != nil:
			return reconcile.CantSayBecause(err)
		case result != nil:
			return reconcile.AppliedWith(result)
		}
		// Exact, and for good: a holder that lost its lease cannot apply
		// the effect (Effect checks its token in the same transaction).
		return reconcile.NotAppliedFenced()
	})
}

// sealResult encodes an effect's result with the calling tool's codec: the
// effects bucket keeps nothing a tool's codec would not let it keep (I8).
func sealResult(codec storekit.Codec, ref string, result []byte) ([]byte, error) {
	if codec == nil {
		return result, nil
	}
	b, err := codec.Encode(ref, result)
	if err != nil {
		return nil, fmt.Errorf("boltstore: encoding the effect's result: %w", err)
	}
	return b, nil
}

// openResult decodes what sealResult stored; the bytes returned are the
// caller's.
func openResult(codec storekit.Codec, ref string, stored []byte) ([]byte, error) {
	if codec == nil {
		return bytes.Clone(stored), nil
	}
	b, err := codec.Decode(ref, bytes.Clone(stored))
	if err != nil {
		return nil, fmt.Errorf("boltstore: decoding the effect's result: %w", err)
	}
	return b, nil
}
