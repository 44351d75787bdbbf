package storekit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Store keeps keys and outcomes durably. A Store must be safe for concurrent
// use; [Claim] must be atomic with respect to every other method for the same
// key. Implementations apply the transitions of [DecideClaim], [DecideFinish],
// [DecideRelease] and [DecideMark] inside one transaction each, so that every
// store follows the same rules; agenttool/storetest checks them.
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
	// Mark marks the record of req.Key as an action that went on in place
	// of one proved applied after it went on (Record.NoticeUntil on an
	// open record), whoever holds it: the mark is a fact about the
	// action, not an attempt of it, and every later claim, outcome and
	// takeover keeps it. It returns the record as it stands after, or
	// [ErrNotFound]. See [DecideMark].
	Mark(ctx context.Context, req MarkRequest) (Record, error)
	// Sweep deletes up to req.Limit records for which [Record.Sweepable] is
	// true at req.Now, those that expired first first, in one transaction
	// (or less), and returns how many it deleted: one bounded step, so that
	// calls are not stalled behind a large sweep. Its cost grows with the
	// records it deletes, not with the store: stores find expired records
	// by an index of expiry. [SweepAll] calls it until nothing is left.
	// A store may keep a sweepable record a while longer, and a step it
	// sizes itself (req.Limit 0) may delete more than its usual step when
	// the cost does not grow with the records: boltstore keeps a settled
	// record until its generation's window ends (up to an eighth of its
	// lifetime past its expiry), then drops the generation whole. A store
	// whose steps delete a bounded number one by one, whatever they are
	// asked, says so ([SweepStepBound]).
	// Pending records and unresolved unknown records are never swept. A
	// record it cannot read is left in place and reported: its error wraps
	// [ErrCorrupt] naming the record (with the count of those it deleted).
	Sweep(ctx context.Context, req SweepRequest) (int, error)
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
	// session, fingerprint, outcome, resolution and label kept, and its attempts
	// counted as DecideClaim counts them.
	ClaimUnknown(ctx context.Context, req ClaimUnknownRequest) ([]ClaimResult, error)
}

// Importer is implemented by stores that take records in bulk: to fill a
// new store from another (boltstore's records into pgstore, when an
// application grows to several replicas), or to fill one for a benchmark.
// Every store of this module implements it.
type Importer interface {
	// Import writes recs as they are, with their indexes, in one
	// transaction. A record must be settled (succeeded, failed or
	// unknown: [ValidateImport]) and its key new to the store; otherwise
	// nothing of the call is written and the error says which record.
	// Tokens of imported records are kept; later claims get tokens above
	// them.
	Import(ctx context.Context, recs []Record) error
}

// ValidateImport checks that r can be imported: a key, a tool, a settled
// state.
func ValidateImport(r *Record) error {
	switch {
	case r.Key == "" || r.Tool == "":
		return fmt.Errorf("agenttool: importing a record without a key or a tool: %w", ErrInvalidRequest)
	case r.State != Succeeded && r.State != Failed && r.State != Unknown:
		return fmt.Errorf("agenttool: importing %s in state %v: only settled records can be imported: %w", r.Key, r.State, ErrInvalidRequest)
	case r.State == Unknown && !r.RetryApproved && !r.Expires.IsZero():
		return fmt.Errorf("agenttool: importing %s: an unknown record that is not resolved never expires; its Expires must be zero: %w", r.Key, ErrInvalidRequest)
	}
	return nil
}

// Counter is implemented by stores that count their records by tool and
// state, for operators' statistics (agenttool.Operator.Stats). Every store
// of this module implements it. A count may read every record: it is for
// people, not for calls.
type Counter interface {
	// Count returns, ordered by tool, then state, then RetryApproved, how
	// many records there are of each tool, state and approval (only those
	// of req.Principal, if not nil). Pending records count as pending
	// whether or not their lease has lapsed. Unreadable records are
	// counted apart, under the tool "" and state 0, when no principal is
	// asked for.
	Count(ctx context.Context, req CountRequest) ([]Count, error)
	// CountUnknown returns how many unknown records are not resolved yet
	// (approved records are not counted): what a gauge of outcomes awaiting
	// reconciliation shows. Its cost grows with the open records (pending
	// and unknown), never with the whole store.
	CountUnknown(ctx context.Context) (int, error)
}

// CountRequest selects the records a [Counter] counts.
type CountRequest struct {
	Principal *Digest // only this principal's records, if not nil
}

// Count is how many records of a tool are in a state.
type Count struct {
	Tool          string
	State         State
	RetryApproved bool // unknown records approved for one more attempt
	Records       int
}

// SortCounts turns a tally into what [Counter.Count] returns: one line per
// tool, state and approval (the keys of tally, whose Records are zero),
// with its number of records, in order.
func SortCounts(tally map[Count]int) []Count {
	out := make([]Count, 0, len(tally))
	for c, n := range tally {
		c.Records = n
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Count) int {
		if c := strings.Compare(a.Tool, b.Tool); c != 0 {
			return c
		}
		if a.State != b.State {
			return int(a.State) - int(b.State)
		}
		switch {
		case a.RetryApproved == b.RetryApproved:
			return 0
		case b.RetryApproved:
			return -1
		}
		return 1
	})
	return out
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
	By      string    // "reconciler" (a call's check), "sweeper", "fence", "approver:NAME" or "operator:NAME"
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
	// Expires is the end of a final record's lifetime, as its settlement
	// (or an approval, or its closing) gave it; zero for pending and
	// unresolved unknown records. It is swept once that lifetime and its
	// notice or mark have both ended ([Record.SweepAt]).
	Expires time.Time
	// RetryApproved is set on an unknown record that a reconciler, an
	// approver or an operator found not applied: exactly one new claim of the
	// key may run the tool again, and consumes the approval.
	RetryApproved bool
	// Resolution is the last settlement of an unknown outcome, kept with the
	// record as its audit trail; nil if there was none.
	Resolution *Resolution
	// TakenOver is set on a pending record whose claim took over an unknown
	// outcome or a lapsed lease, or used up a retry approved after one: its
	// action may already have applied, and is being checked or retried.
	TakenOver bool
	// Label says, for operators, whose action this is: what trusted code set
	// with agenttool.WithLabel (a display name, a ticket), encoded by the
	// tool's Codec. It is not part of the key. "" if none.
	Label string
	// FenceScope is the scope of the unknown fence the record's action
	// belongs to (the tool's session digest, or its principal digest for a
	// principal-wide fence); zero if the tool's fence is off. At most one
	// record of a tool and fence scope holds the scope's slot at a time
	// ([Record.HoldsSlot]): see [DecideClaim].
	FenceScope Digest
	// Replaces is the key of the action this one goes on in place of: an
	// earlier action of the scope whose outcome was unknown and which was
	// found not applied, or approved for one more attempt, whose attempt
	// this action took. "" if none.
	Replaces string
	// ReplacedBy, on a failed record, is the key of the action that went on
	// in its place (see Replaces): this action was not applied and will not
	// be. "" if none.
	ReplacedBy string
	// Definition is the digest of the definition of the tool the record's
	// action was claimed under: what decides its keys and how it is
	// guarded (agenttool's tool options). A claim that meets an action of
	// its tool made under another definition can say so. Its high 32 bits
	// digest where and in what form the destination is handed the
	// reference, and a takeover is granted only where that is alike
	// ([SentAlike], [DecideClaim]).
	// 0 in records of older versions; one with its lowest bit set was
	// made by a version that digested the definition whole.
	Definition uint64
	// NoticeUntil, on a succeeded record whose action's outcome was unknown
	// before it was found applied (or which went on in place of such an
	// action), is when its notice ends: until then it holds the scope's
	// slot, and the scope's other new writes are told of it instead of
	// running. Zero if none. A record is kept while its notice lasts,
	// whatever its lifetime ([Record.SweepAt]), and so while a mark lasts.
	//
	// On an open record (pending or unknown) it marks an action that went
	// on in place of another which was proved applied after it went on
	// (it may be that action reworded): until then — [UntilTold] until its
	// model is told, NoticeHold after that — it runs again, and anything
	// of its conversation goes on in its place, only for a claim that
	// answers no model ([Record.AwaitsNotice]). The mark stays while the
	// record is open ([Record.StandsInForApplied]), for the people who
	// decide about it, and once it is closed as replaced (asked for
	// again, it would go on in that place); closed, once its model was
	// told and NoticeHold passed, a claim that meets it ends its mark.
	NoticeUntil time.Time
	// StandsFor, on a marked record (NoticeUntil on an open record, or
	// one closed as replaced since), is the key of the action proved
	// applied that it stands in for ([MarkRequest].For; of several, the
	// one its latest mark names): the action its model is told of. It is set with
	// the mark, kept while the mark is, and cleared with it. Empty on every other record, and on records
	// marked by earlier versions.
	//
	// On a failed record with no NoticeUntil, it names the action proved
	// applied whose notice held back the claim that made the record: the
	// claim's own call was answered that the action was done and this one
	// not run, and so is every call of the key for its lifetime
	// ([Record.HeldBack], [DecideClaim]).
	StandsFor string
	// Input is the action's input, as the tool's codec encoded it, kept
	// while the action may be unknown, for a reconciler that must find the
	// action by what it asked (a tool with Options.KeepInput): written by
	// the claim that makes the record, kept through takeovers and unknown
	// outcomes, and cleared when the action settles (succeeded, failed,
	// replaced). nil if none.
	Input []byte
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
	// Label is written to the record the claim makes or takes over; a
	// claim without one keeps the label of the record it takes over.
	Label string
	// Input, if not nil, is kept as the record's Input (see Record.Input)
	// by a claim that makes the record; a takeover keeps the Input the
	// record has, if any.
	Input []byte
	// FenceScope, if not zero, is the scope of the tool's unknown fence:
	// the record the claim makes holds the slot of the tool and this scope,
	// and the claim is granted only if no other record holds it (see
	// [DecideClaim]; ClaimResult.Blocked says which one does).
	FenceScope Digest
	// Replace, if not nil, claims the key in place of the action that holds
	// the slot, which was found not applied: that record is closed as failed
	// (Record.ReplacedBy) in the claim's transaction.
	Replace *Replacement
	// Definition is the digest of the claiming tool's definition, kept
	// with the record the claim makes (see Record.Definition). A claim
	// with one takes over only records whose actions it sends alike
	// ([SentAlike]).
	Definition uint64
	// NoticeHold, on the claim of a call that answers a model, is how long
	// a notice still holds once the model has been told of it (see
	// [DecideClaim]): a claim held back by a notice, or answered with the
	// settled action the notice is of, tells the model, and the notice then
	// ends NoticeHold later at the latest, on the claim's clock (req.Now):
	// agenttool gives Options.NoticeHold plus Options.ClockSkew, so that a
	// replica whose clock is ahead holds it for Options.NoticeHold too. 0
	// on a claim that answers no model (a takeover by the fence, a sweeper
	// or an operator): it tells nothing.
	NoticeHold time.Duration
	// FoundApplied, on the claim of a call that answers a model, is the
	// key of an action that held the claim back and that the call itself
	// then found done and settled applied (agenttool's fence): the claim
	// of a new key is never granted, whatever holds the slot by then — a
	// pause may have outlasted the notice — and its key is kept held back,
	// standing for that action ([DecideClaim], [Record.HeldBack]). "" on
	// every other claim.
	FoundApplied string
	// KeyTTL is the lifetime the claim's tool gives its settled records
	// (agenttool's Options.KeyTTL); 0 if unknown. A version before this
	// one moved a marked record's lifetime (Record.Expires) to its mark's
	// end, [UntilTold] until its model was told, and never back: such a
	// record that the claim tells, or whose mark or notice it ends, is
	// given KeyTTL from then ([DecideClaim]), never a lifetime of 2262.
	KeyTTL time.Duration
	// Unkeyed is set on the claims of a tool whose destination does not
	// dedupe by the key (at-most-once, reconcilable): the claim alone keeps
	// a second attempt from running. A store that a failover could take
	// back in time grants such a claim only once it is durable where a
	// failover can go ([ErrNotDurable] otherwise), and, a short while after
	// it went back, does not trust a missing record to mean a new action
	// ([DecideLost]). A keyed tool's destination dedupes whatever the store
	// lost.
	Unkeyed bool
}

// Replacement names the action a claim goes on in place of, as the caller
// found it, and what that action's record becomes.
type Replacement struct {
	Key string
	// Token is the fencing token under which the caller holds the action's
	// record (it took it over, and found it not applied); 0 if the record is
	// unknown and approved for one more attempt, with Attempts attempts.
	Token    uint64
	Attempts int
	// Outcome is the replaced record's new outcome (encoded), Resolution
	// its resolution (nil keeps the one it has), TTL its lifetime.
	Outcome    []byte
	Resolution *Resolution
	TTL        time.Duration
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
	// Blocked, when the claim was not granted because another action of
	// the tool holds the slot of ClaimRequest.FenceScope, is that action's
	// record (Record is then zero, or the key's record made held back:
	// [Record.HeldBack]) — or the key's record made held back by
	// ClaimRequest.FoundApplied, when no notice holds it back (Record is
	// then the same) — or, when the key's own record stands
	// in for an action proved applied that its model has not heard of
	// ([Record.AwaitsNotice]), that record (Record is then the same).
	Blocked *Record
	// Approved is set on a claim that consumed an approval for one more
	// attempt: an unknown record approved for a retry, claimed afresh
	// ([ClaimResult.TookApproval]).
	Approved bool
	// Expired is set on a claim granted over the key's settled record,
	// kept past its lifetime: an earlier call did the key's action, which
	// a destination that keeps keys longer may replay.
	Expired bool
	// Lost is set when the store had no record of the key but may have
	// lost it: it went back in time a short while before (a failover to a
	// standby that had not received the primary's last writes), and the
	// claim is Unkeyed. The claim was decided as if the key's record were
	// pending under a holder that died when the store went back
	// ([DecideLost]): taken over (TookOver, with HeldUntil that time), or,
	// for a claim that may not take over, recorded unknown.
	Lost bool
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

// MarkRequest marks an action that went on in place of another, which
// was proved applied after it went on: it may be that action reworded.
// See [DecideMark].
type MarkRequest struct {
	Key string
	// Session is the conversation of the action proved applied: only a
	// record of that conversation is marked (another conversation's
	// write that took its place never saw it).
	Session Digest
	// Until is when the mark ends: [UntilTold], until the record's model
	// is told.
	Until time.Time
	// For is the key of the action proved applied, which the record
	// stands in for (Record.StandsFor). Required.
	For string
	Now time.Time
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
	// NoticeUntil (with State Succeeded) is kept as the record's
	// NoticeUntil: the action's outcome had been unknown, and the scope's
	// other new writes are told of it until then. Zero with any other
	// state: an unknown outcome keeps the record's mark, which only
	// [Store.Mark] sets.
	NoticeUntil time.Time
}

// SentAlike reports whether tools of definitions a and b hand the
// destination an action's reference alike (Record.Definition): in the
// same place and form, so that one may resend or check what the other
// sent. A definition that says nothing of it (0, or one of a version that
// digested the definition whole) is taken as alike, as those versions
// took every definition.
func SentAlike(a, b uint64) bool {
	if a == 0 || b == 0 || a&1 == 1 || b&1 == 1 {
		return true
	}
	return a>>32 == b>>32
}
