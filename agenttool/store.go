package agenttool

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"
)

// Store keeps keys and outcomes durably. A Store must be safe for concurrent
// use; [Claim] must be atomic with respect to every other method for the same
// key. Implementations apply the transitions of [DecideClaim], [DecideFinish]
// and [DecideRelease] inside one transaction each, so that every store follows
// the same rules; agenttool/storetest checks them.
//
// A Store never holds model input: only digests ([Record.Principal],
// [Record.Fingerprint]) and the encoded outcome.
type Store interface {
	// Claim creates a pending record for req.Key if none exists (or the one
	// there has expired), or reports the existing record. See [DecideClaim].
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)
	// Finish moves the pending record held by req.Token to a final state. It
	// returns [ErrFenced] if the caller no longer holds the record.
	Finish(ctx context.Context, req FinishRequest) error
	// Release deletes the pending record held by token, after an attempt that
	// certainly did not apply the effect. It returns [ErrFenced] if the caller
	// no longer holds the record.
	Release(ctx context.Context, key string, token uint64) error
	// Renew extends the lease of the pending record held by req.Token until
	// req.Until. It returns [ErrFenced] if the caller no longer holds it.
	// See [DecideRenew].
	Renew(ctx context.Context, req RenewRequest) error
	// Get returns the record for key, or [ErrNotFound].
	Get(ctx context.Context, key string) (Record, error)
	// Sweep deletes the records for which [Record.Sweepable] is true at now
	// and returns how many it deleted. Pending records and unresolved unknown
	// records are never swept. A record it cannot read is left in place and
	// reported: the sweep goes on, and its error wraps [ErrCorrupt] naming
	// the record (with the count of those it deleted).
	Sweep(ctx context.Context, now time.Time) (int, error)
	// ListUnknown returns, ordered by key, the records that await
	// reconciliation: unknown records not yet resolved, and pending records
	// whose lease expired at or before req.Now (their holder is presumed
	// dead). See [Record.AwaitsReconciliation]. A request with a Tool and a
	// Principal (the unknown fence asks one for every new action) must be
	// answered from an index of the open records of that tool and
	// principal, at a cost that does not grow with the store. A record it
	// cannot read is skipped and reported: the readable records come back
	// with an error that wraps [ErrCorrupt] and names the others.
	ListUnknown(ctx context.Context, req ListRequest) ([]Record, error)
}

// LocalStore is implemented by stores whose calls never wait on a network
// (memstore, boltstore: their contexts are checked before each call, never
// during one). Outcome writes to them go without the StoreTimeout deadline,
// which could not interrupt them anyway and costs a timer per call.
type LocalStore interface {
	Local() bool
}

// ListRequest selects records for [Store.ListUnknown].
type ListRequest struct {
	// Principal, if not nil, keeps only that principal's records.
	Principal *Digest
	// Tool, if not empty, keeps only that tool's records.
	Tool string
	// Session, if not nil, keeps only the records of that session (see
	// [Record.Session]).
	Session *Digest
	// Held also lists pending records taken over from an unknown outcome
	// and held by a live call or check ([Record.Fences]): what the unknown
	// fence waits for. Requires Tool and Principal.
	Held bool
	// After, if not empty, starts the list after this key (for paging).
	After string
	// Limit bounds the number of records; 0 means 100.
	Limit int
	// Now decides which pending leases have expired.
	Now time.Time
}

// UnknownClaimer is implemented by stores that can hand the records awaiting
// reconciliation to many sweepers at once without contention (pgstore does
// it with FOR UPDATE SKIP LOCKED). The sweeper uses it when the store has it,
// and [Store.ListUnknown] with one takeover per record otherwise.
type UnknownClaimer interface {
	// ClaimUnknown takes over up to req.Limit records that await
	// reconciliation at req.Now and were last updated before
	// req.UpdatedBefore, as [DecideClaim] would with TakeOver: each comes
	// back as a ClaimResult with TookOver and HeldUntil set, its record
	// pending, held by req.Owner under a new token, with its principal,
	// session, fingerprint, outcome and resolution kept, and its attempts
	// counted as DecideClaim counts them.
	ClaimUnknown(ctx context.Context, req ClaimUnknownRequest) ([]ClaimResult, error)
}

// ClaimUnknownRequest selects records for [UnknownClaimer.ClaimUnknown].
type ClaimUnknownRequest struct {
	Principal     *Digest  // only this principal's records, if not nil
	Tools         []string // only records of these tools
	Owner         string
	Now           time.Time
	Lease         time.Duration
	Limit         int
	UpdatedBefore time.Time
}

// Resolution records who settled an unknown outcome, how and why.
type Resolution struct {
	Verdict string    // "applied", "not applied", "compensated"
	By      string    // "reconciler", "approver:NAME", "operator:NAME"
	Why     string    // free text
	At      time.Time //
}

// State is the state of a record.
type State uint8

const (
	// Pending: a call holds the key under a lease and may be running the tool.
	Pending State = iota + 1
	// Succeeded: the effect was applied; the outcome is replayed.
	Succeeded
	// Failed: the effect was not applied and will not be by retrying; the
	// outcome is replayed.
	Failed
	// Unknown: the effect may have been applied. The record stays until a
	// reconciler or an operator resolves it; it never expires.
	Unknown
)

func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Valid reports whether s is one of the four states.
func (s State) Valid() bool { return s >= Pending && s <= Unknown }

// Digest is a SHA-256 digest.
type Digest [32]byte

// Record is what a Store keeps for one key.
type Record struct {
	Key         string    // the request reference, tool-prefixed
	Tool        string    // the tool's name
	State       State     //
	Principal   Digest    // digest of the principal that made the record
	Session     Digest    // digest of the principal and session that made the record (zero in records of older versions)
	Fingerprint Digest    // digest of the canonical input
	Owner       string    // lease owner of a pending record (unique per claim)
	Token       uint64    // fencing token, unique per claim within a store
	LeaseExpiry time.Time // a pending record's lease ends here
	Attempts    int       // attempts made so far
	Outcome     []byte    // the encoded envelope of a final state (see Codec)
	Created     time.Time //
	Updated     time.Time //
	Expires     time.Time // final records may be swept after this; zero for pending and unresolved unknown records
	// RetryApproved is set on an unknown record that a reconciler, an
	// approver or an operator found not applied: exactly one new claim of the
	// key may run the tool again, and consumes the approval.
	RetryApproved bool
	// Resolution is the last settlement of an unknown outcome, kept with the
	// record as its audit trail; nil if there was none.
	Resolution *Resolution
	// TakenOver is set on a pending record whose claim took over an unknown
	// outcome or a lapsed lease: its action may already have applied, and
	// is being checked or retried. The unknown fence counts it as unknown
	// while it is held ([Record.Fences]).
	TakenOver bool
}

// ClaimRequest asks a Store to claim a key.
type ClaimRequest struct {
	Key         string
	Tool        string
	Principal   Digest
	Session     Digest
	Fingerprint Digest
	Owner       string        // unique per claim (a UUID)
	Now         time.Time     // the caller's clock
	Lease       time.Duration // must be positive
	// TakeOver lets the claim replace an unknown record, or a pending one
	// whose lease has expired. It is set only for tools whose destination
	// honours the key (keyed) or that have no effect (read-only).
	TakeOver bool
	// Fence, if not nil, asks the store to report in ClaimResult.Fenced
	// whether another record of Tool and Principal (and Session, if
	// Fence.Session) awaits reconciliation at Now: checked in the claim's
	// own transaction, from an index, when the claim is granted. It lets a
	// call learn that the unknown fence holds without a second round trip.
	Fence *Fence
}

// Fence selects the records a claim's fence check looks at: those of the
// claim's tool and principal, and of its session if Session is set.
type Fence struct {
	Session bool
}

// Conflict says why a claim was refused for a record made by another call.
type Conflict uint8

const (
	// NoConflict: the record belongs to this principal and this input.
	NoConflict Conflict = iota
	// OtherPrincipal: the record was made for another principal. Nothing of it
	// may be revealed.
	OtherPrincipal
	// OtherInput: the record was made for this key with a different input
	// fingerprint.
	OtherInput
	// OtherTool: the record was made by another tool. It is never replayed
	// to this one.
	OtherTool
)

// ClaimResult is a Store's answer to a claim.
type ClaimResult struct {
	// Claimed is true if the caller now holds a pending record with
	// Record.Token.
	Claimed bool
	// TookOver is true if the claim replaced an unknown record or an expired
	// lease: an earlier attempt's outcome is not known.
	TookOver bool
	// HeldUntil, when TookOver, is the record's LeaseExpiry before the
	// claim: for a pending record whose lease lapsed (or which boltstore
	// ended at Open), the lease's end; for an unknown record, the time its
	// last attempt may have been sent or still in flight, as recorded with
	// it (FinishRequest.HeldUntil). An earlier attempt may have been in
	// flight until then. Zero if unknown.
	HeldUntil time.Time
	// Since, when TookOver, is when the record taken over last changed: no
	// attempt of it was sent later than this or HeldUntil (what a
	// reconciler is told as reconcile.Request.LastSent).
	Since time.Time
	// Conflict is set when the existing record belongs to another principal
	// or input. Record is then the existing one, unchanged.
	Conflict Conflict
	// Fenced, for a granted claim with ClaimRequest.Fence, reports that
	// another record of the fence's scope awaits reconciliation.
	Fenced bool
	// Record is the record after the claim.
	Record Record
}

// RenewRequest extends a lease. Until and Now come from the holder's clock:
// a store compares leases with the clock of the callers that wrote them,
// never with its own.
type RenewRequest struct {
	Key   string
	Token uint64
	Until time.Time
	Now   time.Time
}

// FinishRequest moves a pending record to a final state.
type FinishRequest struct {
	Key      string
	Token    uint64
	State    State // Succeeded, Failed or Unknown
	Attempts int
	// Outcome is handed to the store, which may keep it: the caller must not
	// modify it afterwards.
	Outcome []byte
	Now     time.Time
	TTL     time.Duration // lifetime of a succeeded, failed or resolved record
	// RetryApproved (with State Unknown) resolves the record as not applied:
	// one later claim may run the tool again.
	RetryApproved bool
	// HeldUntil (with State Unknown) is kept as the record's LeaseExpiry:
	// the latest time an attempt of the action may have been sent or still
	// be in flight — the end of a lapsed lease, or the start of the last
	// attempt (see ClaimResult.HeldUntil) — so that every later takeover
	// applies the same rule, and a reconciler learns when the action was
	// last sent. Zero if unknown.
	HeldUntil time.Time
	// Resolution, if not nil, replaces the record's resolution.
	Resolution *Resolution
}

// DecideClaim applies the claim rules to the existing record for req.Key (nil
// if there is none) and returns the result and whether res.Record must be
// written. nextToken is called only when a new claim is made. It is the
// single source of the rules; a Store calls it inside its transaction:
//
//   - no record, or a succeeded/failed record past its expiry: claim;
//   - another principal: OtherPrincipal, nothing changes;
//   - another tool: OtherTool, nothing changes (never replayed across tools);
//   - another fingerprint: OtherInput, nothing changes (checked before
//     anything is written, on every path);
//   - succeeded or failed: returned for replay;
//   - pending with a live lease: returned (the caller waits);
//   - pending with an expired lease: the holder is presumed dead and the
//     outcome is unknown: taken over if req.TakeOver, else turned into an
//     unknown record (fencing out the old holder);
//   - unknown and resolved as not applied (RetryApproved): claimed afresh,
//     which consumes the approval;
//   - unknown: taken over if req.TakeOver, else returned.
func DecideClaim(existing *Record, req ClaimRequest, nextToken func() (uint64, error)) (res ClaimResult, write bool, err error) {
	if req.Lease <= 0 {
		return ClaimResult{}, false, fmt.Errorf("agenttool: claim of %s with lease %v: %w", req.Key, req.Lease, ErrInvalidRequest)
	}
	claim := func(tookOver bool, attempts int, created time.Time) (ClaimResult, bool, error) {
		var heldUntil, since time.Time
		if tookOver {
			heldUntil, since = existing.LeaseExpiry, existing.Updated
		}
		tok, err := nextToken()
		if err != nil {
			return ClaimResult{}, false, err
		}
		if created.IsZero() {
			created = req.Now
		}
		rec := Record{
			Key: req.Key, Tool: req.Tool, State: Pending,
			Principal: req.Principal, Session: req.Session, Fingerprint: req.Fingerprint,
			Owner: req.Owner, Token: tok, LeaseExpiry: req.Now.Add(req.Lease),
			Attempts: attempts, Created: created, Updated: req.Now, TakenOver: tookOver,
		}
		if existing != nil && !existing.expired(req.Now) {
			// A takeover keeps the audit trail and the last outcome seen.
			rec.Resolution, rec.Outcome = existing.Resolution, existing.Outcome
		}
		return ClaimResult{Claimed: true, TookOver: tookOver, HeldUntil: heldUntil, Since: since, Record: rec}, true, nil
	}
	if existing == nil || existing.expired(req.Now) {
		return claim(false, 0, time.Time{})
	}
	if !existing.State.Valid() {
		return ClaimResult{}, false, fmt.Errorf("agenttool: record %s has state %d: %w", req.Key, existing.State, ErrCorrupt)
	}
	if existing.Principal != req.Principal {
		return ClaimResult{Conflict: OtherPrincipal, Record: *existing}, false, nil
	}
	if existing.Tool != req.Tool {
		return ClaimResult{Conflict: OtherTool, Record: *existing}, false, nil
	}
	if existing.Fingerprint != req.Fingerprint {
		return ClaimResult{Conflict: OtherInput, Record: *existing}, false, nil
	}
	switch existing.State {
	case Pending:
		if req.Now.Before(existing.LeaseExpiry) {
			return ClaimResult{Record: *existing}, false, nil
		}
		// The dead holder claimed in order to attempt: count its attempt,
		// whose outcome nobody knows.
		if req.TakeOver {
			return claim(true, existing.Attempts+1, existing.Created)
		}
		tok, err := nextToken()
		if err != nil {
			return ClaimResult{}, false, err
		}
		// The lapsed lease stays on the record: whoever takes it over learns
		// until when the dead holder's attempt may have been in flight.
		rec := *existing
		rec.State, rec.Token, rec.Owner, rec.Updated = Unknown, tok, "", req.Now
		rec.Attempts++
		return ClaimResult{Record: rec}, true, nil
	case Unknown:
		if existing.RetryApproved {
			return claim(false, existing.Attempts, existing.Created)
		}
		if req.TakeOver {
			return claim(true, existing.Attempts, existing.Created)
		}
	}
	return ClaimResult{Record: *existing}, false, nil
}

// DecideFinish checks that req.Token still holds the pending record and
// returns the final record to write.
func DecideFinish(existing *Record, req FinishRequest) (Record, error) {
	if req.State != Succeeded && req.State != Failed && req.State != Unknown {
		return Record{}, fmt.Errorf("agenttool: finish %s in state %v: %w", req.Key, req.State, ErrInvalidRequest)
	}
	if err := holds(existing, req.Key, req.Token); err != nil {
		return Record{}, err
	}
	if req.RetryApproved && req.State != Unknown {
		return Record{}, fmt.Errorf("agenttool: finish %s: only an unknown record can be approved for retry: %w", req.Key, ErrInvalidRequest)
	}
	rec := *existing
	rec.State, rec.Owner, rec.LeaseExpiry, rec.TakenOver = req.State, "", time.Time{}, false
	if req.State == Unknown {
		rec.LeaseExpiry = req.HeldUntil
	}
	rec.Attempts, rec.Outcome, rec.Updated = req.Attempts, req.Outcome, req.Now
	rec.RetryApproved = req.RetryApproved
	if req.Resolution != nil {
		rec.Resolution = req.Resolution
	}
	rec.Expires = time.Time{}
	if req.State != Unknown || req.RetryApproved {
		rec.Expires = req.Now.Add(req.TTL)
	}
	return rec, nil
}

// DecideRelease checks that token still holds the pending record, which may
// then be deleted.
func DecideRelease(existing *Record, key string, token uint64) error {
	return holds(existing, key, token)
}

// DecideRenew checks that req.Token still holds the pending record and
// returns it with its lease extended until req.Until.
func DecideRenew(existing *Record, req RenewRequest) (Record, error) {
	if err := holds(existing, req.Key, req.Token); err != nil {
		return Record{}, err
	}
	rec := *existing
	rec.LeaseExpiry, rec.Updated = req.Until, req.Now
	return rec, nil
}

// Sweepable reports whether a Sweep at now may delete r.
func (r *Record) Sweepable(now time.Time) bool { return r.expired(now) }

func (r *Record) expired(now time.Time) bool {
	final := r.State == Succeeded || r.State == Failed || (r.State == Unknown && r.RetryApproved)
	return final && !r.Expires.IsZero() && !now.Before(r.Expires)
}

// AwaitsReconciliation reports whether r is listed by [Store.ListUnknown] at
// now: an unknown record not resolved yet, or a pending one whose lease has
// expired.
func (r *Record) AwaitsReconciliation(now time.Time) bool {
	return (r.State == Unknown && !r.RetryApproved) || (r.State == Pending && !now.Before(r.LeaseExpiry))
}

// Open reports whether r may come to await reconciliation: pending, or
// unknown and not resolved. Stores index the open records, so that listing
// what awaits reconciliation reads only them.
func (r *Record) Open() bool {
	return r.State == Pending || (r.State == Unknown && !r.RetryApproved)
}

// Fences reports whether r holds the unknown fence at now: it awaits
// reconciliation, or it is held by a call or a check that took it over
// from an unknown outcome (its action may have applied while it is
// checked).
func (r *Record) Fences(now time.Time) bool {
	return r.AwaitsReconciliation(now) || (r.State == Pending && r.TakenOver)
}

// Fences reports whether r, another record than req's, holds req's fence at
// req.Now ([Record.Fences]), and belongs to req's tool, principal and (if
// the fence is per session) session.
func (req *ClaimRequest) Fences(r *Record) bool {
	return req.Fence != nil && r.Key != req.Key && r.Tool == req.Tool && r.Principal == req.Principal &&
		(!req.Fence.Session || r.Session == req.Session) && r.Fences(req.Now)
}

// Lists reports whether r is listed by req at req.Now: it matches req's
// filters, and awaits reconciliation (or, with req.Held, holds the fence).
func (req *ListRequest) Lists(r *Record) bool {
	if req.Held {
		return req.Matches(r) && r.Fences(req.Now)
	}
	return req.Matches(r) && r.AwaitsReconciliation(req.Now)
}

// Matches reports whether r is selected by the filters of req (principal,
// tool, session), whatever its state.
func (req *ListRequest) Matches(r *Record) bool {
	return (req.Principal == nil || *req.Principal == r.Principal) &&
		(req.Tool == "" || req.Tool == r.Tool) &&
		(req.Session == nil || *req.Session == r.Session)
}

func holds(existing *Record, key string, token uint64) error {
	if existing == nil {
		return fmt.Errorf("agenttool: %s has no record: %w", key, ErrFenced)
	}
	if existing.State != Pending || existing.Token != token {
		return fmt.Errorf("agenttool: %s is %v with token %d, not pending with token %d: %w",
			key, existing.State, existing.Token, token, ErrFenced)
	}
	return nil
}

// String returns the digest in hex.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// MarshalText writes the digest in hex.
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a digest written by MarshalText.
func (d *Digest) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(d) {
		return fmt.Errorf("agenttool: digest of %d hex digits, want %d", len(b), 2*len(d))
	}
	_, err := hex.Decode(d[:], b)
	return err
}
