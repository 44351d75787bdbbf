package agenttool

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/internal/canonjson"
	"github.com/retrysafe/retrysafe/reconcile"
)

// Class is a tool's side-effect class, declared when it is wrapped. It decides
// what retrysafe may do after an attempt whose outcome is unknown.
type Class uint8

const (
	// ReadOnly tools have no effect: they are retried freely and their results
	// are neither stored nor replayed. They need no Store.
	ReadOnly Class = iota + 1
	// Keyed tools call a destination that honours the request reference as an
	// idempotency key (Stripe-style): a retry with the same key is safe, also
	// after an unknown outcome — for as long as the destination keeps the key
	// (Options.DestinationKeyTTL). Past that, an unknown action is not
	// retried blindly: it is reconciled if the tool has a Reconciler, and
	// otherwise waits for an operator.
	Keyed
	// Reconcilable tools call a destination that can be asked for the status
	// of a request reference. After an unknown outcome the destination is
	// asked first (Options.Reconciler), and the tool runs again for that key
	// only if it says not applied; until then the record waits for
	// reconciliation.
	Reconcilable
	// AtMostOnce tools can neither dedupe nor be asked. After an unknown
	// outcome nothing runs again for that key without a person's approval.
	AtMostOnce
)

func (c Class) String() string {
	switch c {
	case ReadOnly:
		return "read-only"
	case Keyed:
		return "keyed"
	case Reconcilable:
		return "reconcilable"
	case AtMostOnce:
		return "at-most-once"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// ModelKeyPolicy says what to do with model input that carries its own
// idempotency key or request id.
type ModelKeyPolicy uint8

const (
	// RefuseModelKeys refuses the call (definite_failure, model_supplied_key)
	// and tells the model to drop the field. The default.
	RefuseModelKeys ModelKeyPolicy = iota
	// StripModelKeys removes the field and goes on; the tool never sees it and
	// it never reaches the key or the fingerprint.
	StripModelKeys
)

// DefaultKeyLikeFields are the input fields taken as a model's attempt to
// supply its own key, at any depth of the input. Names are compared by their
// skeletons: Unicode NFKD without combining marks, letters that imitate
// Latin ones (dotless ı, Cyrillic and Greek lookalikes) mapped to them, case
// folded, and everything but letters and digits removed. So
// "idempotencyKey", "Idempotency-Key", "idempotency key ", full-width
// letters and names with zero-width spaces all match "idempotency_key".
// With the default list, any name whose skeleton contains "idempot" or
// "dedup" is key-like too ([KeyLikeStems]).
var DefaultKeyLikeFields = []string{
	"idempotency_key", "idempotence_key", "idempotency_token", "idem_key", "request_id", "request_key",
	"request_token", "request_uuid", "dedup_key", "dedupe_key", "deduplication_id", "deduplication_key",
	"client_request_id", "client_token", "x_request_id", "request_ref", "request_reference",
}

// KeyLikeStems are the parts of a name that make it key-like wherever they
// appear in its skeleton, when Options.KeyLikeFields is nil.
var KeyLikeStems = []string{"idempot", "dedup"}

// FenceScope says which earlier actions a call of a tool waits for when their
// outcome is unknown (the unknown fence): none of the tool's writes runs
// under a new key while an earlier action of the tool in the fence's scope
// is unknown, until that action is settled.
//
// An action holds the scope its tool's fence named when it was claimed,
// and an action outside the scope a call asks for still holds it back: a
// FenceSession call waits for its session's actions claimed under
// FenceOff or FencePrincipal (the store looks in the claim), a
// FencePrincipal call for its principal's actions claimed under FenceOff
// or settled applied aside from their scope (the store looks in the
// claim) and for its unknown actions claimed under FenceSession (one
// read per new action). So the setting can change
// while actions are unknown, but not on replicas that run the old and the
// new setting at once (see the promises' caveats in the README).
type FenceScope uint8

const (
	// FenceSession fences the actions of one principal in one session (one
	// conversation, one run). The default.
	FenceSession FenceScope = iota
	// FencePrincipal fences all of a principal's actions, across sessions:
	// safer when one user drives several conversations at once, at the cost
	// of one unsettled action holding up the user's other conversations.
	FencePrincipal
	// FenceOff turns the fence off: an unknown action holds up only retries
	// of itself. A reworded request is then a new action and may run while
	// the earlier one is unknown.
	FenceOff
)

func (f FenceScope) String() string {
	switch f {
	case FenceSession:
		return "session"
	case FencePrincipal:
		return "principal"
	case FenceOff:
		return "off"
	}
	return fmt.Sprintf("FenceScope(%d)", uint8(f))
}

// RetryPolicy bounds the retries inside one call. Retries use exponential
// backoff with jitter and the same key. A zero field takes the default in its
// comment.
type RetryPolicy struct {
	MaxAttempts         int           // attempts per call, including the first; 0 means 3, 1 disables retries
	InitialInterval     time.Duration // first wait; 0 means 100ms
	MaxInterval         time.Duration // longest wait; 0 means 2s
	Multiplier          float64       // growth of the wait; 0 means 2
	RandomizationFactor float64       // jitter, ±fraction of the wait; 0 means 0.5, negative means none
	MaxElapsed          time.Duration // the retry window: no attempt starts after it; 0 means 15s
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 3
	}
	if p.InitialInterval == 0 {
		p.InitialInterval = 100 * time.Millisecond
	}
	if p.MaxInterval == 0 {
		p.MaxInterval = 2 * time.Second
	}
	if p.Multiplier == 0 {
		p.Multiplier = 2
	}
	if p.RandomizationFactor == 0 {
		p.RandomizationFactor = 0.5
	} else if p.RandomizationFactor < 0 {
		p.RandomizationFactor = 0
	}
	if p.MaxElapsed == 0 {
		p.MaxElapsed = 15 * time.Second
	}
	return p
}

// Options configure a guarded tool. Store and Class are required (Store may be
// nil for a ReadOnly tool); every other zero value takes the default in its
// comment.
type Options struct {
	// Store keeps keys and outcomes: boltstore for one process, pgstore for
	// many replicas, memstore for tests. There is no default, on purpose: a
	// silent in-memory store would break the durability promise unseen.
	Store Store
	// Class is the tool's side-effect class. Required.
	Class Class
	// KeyPrefix starts every request reference and separates this tool's keys
	// from others'. Default: the tool's name.
	KeyPrefix string
	// RefSentAs says, in words, where and in what form the tool hands its
	// destination the request reference: "Idempotency-Key header",
	// "argument idempotency_key, its UUID form". An action whose outcome
	// is unknown is resent or checked only by a tool that hands the
	// reference over as the action did: a destination handed it another
	// way finds no earlier request, and does it again. Set it on a tool
	// whose destination takes the reference (Keyed, or Reconcilable with
	// a Reconciler that asks by it); after a change, an action left
	// unknown the old way waits for a person (docs/stores.md). "" says
	// nothing, and is alike only to "". mcptool sets it from
	// ToolOptions.RefArgument and RefForm.
	RefSentAs string
	// IdentifyingFields are the top-level input fields that tell one logical
	// action from another; other fields (wording, formatting hints) may change
	// between retries without making a new action, but are still
	// fingerprinted: a change is reported as key_reused_with_different_input.
	// Their values are compared in a loose form (Unicode NFKC, case folded,
	// white space trimmed and collapsed) unless listed in ExactFields; none
	// may be empty. For a tool built with [New] they must be required fields
	// of its input type, by their JSON names. Default: all fields.
	IdentifyingFields []string
	// ExactFields are identifying fields whose case and spacing matter (a
	// case-sensitive code, a password reset token): their values are
	// compared exactly. A struct field tag retrysafe:"exact" does the same.
	ExactFields []string
	// TextInput declares that a wrapped tool takes plain text rather than a
	// JSON object. The text, trimmed, is the action: compared loosely for
	// the key and exactly for the fingerprint. Without it a wrapped tool's
	// input must be one JSON object.
	TextInput bool
	// Fence scopes the unknown fence: while an earlier action of this tool
	// in the scope has an unknown outcome, a call under another key first
	// settles it through the Reconciler, and does not run while it stays
	// unknown; and one write of the tool runs at a time in the scope.
	// Default: FenceSession.
	Fence FenceScope
	// NoticeHold is how long, after the model was told that an action of
	// this tool whose outcome was unknown has been done, the tool's other
	// new writes in the fence's scope still get earlier_action_applied
	// instead of running: the model reads an answer only after all the
	// tool calls of its turn have run, and a reworded copy it sent in the
	// same turn must not send a second email. The model is told by the
	// answer of a call: the unknown fence's earlier_action_applied, the
	// success of a call of the action itself (a resend, an approved
	// retry), or of a call that went on in place of such an action found
	// not applied. A settlement that tells no call — a sweeper's, an
	// operator's, an approver's — keeps the notice until a call is told of
	// it, whenever that comes, at most NoticeBackstop; so does the success
	// of a holder whose record read as stopped (a call held by it meanwhile
	// may have been told so, and its own caller may have gone on). Only a
	// call of the action's own conversation tells its model: another
	// conversation's call held back by it (FencePrincipal) does not. The
	// notice is kept with the record in the store (it holds the scope's
	// slot), seen by every replica, and kept ClockSkew longer than
	// NoticeHold, so that a replica whose clock is ahead holds it for
	// NoticeHold too. Default: 10s; negative: no notice at all.
	//
	// A call the notice held back is kept so under its own key, closed as
	// failed, for KeyTTL: asked for again word for word — however much
	// later — it gets the same earlier_action_applied, and never runs (it
	// may be the action done, reworded, and its model was told it did
	// not run); what the user asks for anew is a new request. With a
	// negative NoticeHold the fence's answer is kept nowhere, and within
	// pgstore's failover window neither is a call's held back there (its
	// key may have run before the failover: docs/stores.md).
	//
	// The store sees calls, not turns: set NoticeHold longer than the tool
	// calls of one turn take, one after another, in your agent loop — a
	// reworded copy made in the same turn later than NoticeHold after the
	// answer that told is taken for a new action. And "told" means
	// answered: an answer lost after the store recorded it (a connection
	// that dropped after COMMIT, an agent process that died before the
	// model read it) still counts as told.
	NoticeHold time.Duration
	// NoticeBackstop bounds how long a notice that no call was told of yet
	// is kept: for a conversation that never calls the tool again.
	// Default: 6h.
	NoticeBackstop time.Duration
	// KeepInput keeps each action's input with its record while the
	// action may be unknown — through the tool's Codec, and cleared when
	// the action settles — and gives it to the Reconciler
	// (reconcile.Request.Input), also after a restart: for a destination
	// that never saw the request reference, which a check can only ask by
	// what the action asked for (a third-party MCP server behind
	// `retrysafe guard`). This relaxes I8 for the tool: the store keeps
	// inputs, as the Codec encodes them, until their actions settle; with
	// the default Codec they are readable there, and a store may keep the
	// bytes of a cleared field until its pages are reused (bbolt) or
	// vacuumed (PostgreSQL). Give such a tool an InputCodec that encrypts
	// (NewSealingCodec).
	KeepInput bool
	// InputCodec encodes the inputs a tool with KeepInput keeps. Default:
	// Codec.
	InputCodec Codec
	// ModelKeys says what to do with key-like fields in the model's input.
	// Default: RefuseModelKeys.
	ModelKeys ModelKeyPolicy
	// KeyLikeFields replaces DefaultKeyLikeFields (and KeyLikeStems).
	KeyLikeFields []string
	// MaxInput bounds a call's input, in bytes: a larger one is refused
	// (invalid_input) before it is read, and nothing is stored. 0 means
	// 1 MiB; at most 256 MiB.
	MaxInput int
	// MaxIdentifyingValue bounds each identifying value (each member, when
	// all fields identify the action), in bytes of its strings, member
	// names and numbers at every depth; for a TextInput tool, the text; and
	// the member names of the input with characters beyond ASCII, in all.
	// A larger one is refused (invalid_input), and nothing is stored. The
	// loose form values and names are compared in costs, for some
	// characters, a hundred times more per byte than for ASCII: this bound
	// keeps what one call may cost small. 0 means
	// 64 KiB; at most MaxInput.
	MaxIdentifyingValue int
	// DefaultScope, if set, is used when the context carries no scope. Leave
	// it nil unless the tool really acts for one fixed principal.
	DefaultScope *Scope
	// Retry bounds retries inside one call.
	Retry RetryPolicy
	// AttemptTimeout bounds one attempt; 0 means only the caller's context
	// does. A timeout is an unknown outcome, not a failure.
	AttemptTimeout time.Duration
	// LateWindow is how long past AttemptTimeout a tool keeps an attempt's
	// request open at the destination, to hear a late answer, rather than
	// cancelling it at the deadline (mcptool.ToolOptions.LateWindow sets
	// it): the attempt ends, unknown, at its deadline, but its request may
	// still land until AttemptTimeout plus LateWindow after it was sent,
	// and the rules that wait for an attempt to stop landing count it (a
	// not-applied answer is trusted only after that, plus ClockSkew). 0:
	// the tool cancels its request when the attempt's context ends.
	LateWindow time.Duration
	// Lease is how long a claim is held before another call may presume its
	// holder dead; the holder renews it every third of a lease for as long as
	// it holds the key (while the tool or a check runs, and between
	// attempts). 0 means 1m.
	Lease time.Duration
	// DestinationKeyTTL, for a Keyed tool, is how long the destination keeps
	// an idempotency key (Stripe keeps one about 24 hours). A retry of an
	// action whose first attempt is older could meet a destination that has
	// forgotten the key and act twice, so such an action, if its outcome is
	// unknown, is asked about through the Reconciler, or else left for an
	// operator (unknown_outcome, next ask_human). Every attempt of the
	// action is stopped (its context ends) when the key may be forgotten:
	// DestinationKeyTTL after the action was first claimed, less ClockSkew.
	// 0 means 24h; negative means the destination keeps keys forever.
	DestinationKeyTTL time.Duration
	// ClockSkew is how far apart the clocks of the processes sharing a store
	// may be. A call that takes over a key whose holder's lease lapsed
	// trusts a not-applied answer only after that lease's end plus
	// AttemptTimeout (and LateWindow) plus ClockSkew; before then the holder's attempt may
	// still be in flight, and the answer counts as pending. 0 means 1s;
	// negative means none (one process, one clock).
	ClockSkew time.Duration
	// KeyTTL is how long succeeded and failed outcomes are kept for replay. It
	// must cover the retry window plus the lease (invariant I7), and the
	// time an attempt may still land (AttemptTimeout, LateWindow and
	// ClockSkew: a late answer is about the key's action of its time, and
	// must not meet the next one). 0 means 24h.
	// A Keyed tool keeps them at least DestinationKeyTTL plus ClockSkew: the
	// same input later has the same reference, and while the destination
	// may still replay it, the record tells that call it replays an earlier
	// action rather than a new one. Unknown records never expire, and a record settled with a notice
	// (NoticeHold) is kept until the notice ends, if that is later.
	KeyTTL time.Duration
	// WaitTimeout is how long a call waits for another call that holds the
	// same key before answering in_progress. 0 means 10s; negative means do
	// not wait.
	WaitTimeout time.Duration
	// StoreTimeout bounds each store write: a claim (one that takes
	// longer answers store_unavailable, and nothing runs) and each write
	// that records an outcome. Outcomes are recorded on a context that
	// survives the caller's cancellation. 0 means 10s.
	StoreTimeout time.Duration
	// Reconciler asks the destination what became of a request reference
	// whose outcome is unknown. A Reconcilable tool uses it after an
	// ambiguous attempt and before running again for a key whose record is
	// unknown; without one, unknown records wait for an operator (see
	// [Operator]). Wrap it in reconcile.Poll to wait out a pending answer.
	Reconciler reconcile.Reconciler
	// CheckTimeout bounds one Reconciler.Check, polling included. A check
	// holds its record (renewing the lease) while it runs, and the unknown
	// fence holds the scope; one that has not answered in time counts as
	// "can't say" and lets go of the record, even if it ignores its
	// context. 0 means 30s.
	CheckTimeout time.Duration
	// SettledByOperators says that people settle this Reconcilable tool's
	// unknown outcomes (Operator.ResolveApplied, ResolveNotApplied), for a
	// destination nothing can ask. Without it, a Reconcilable tool needs a
	// Reconciler: an unknown outcome would otherwise wait for someone who
	// was never told to look.
	SettledByOperators bool
	// Approver decides, for an AtMostOnce tool, what to do about a key whose
	// outcome is unknown: allow exactly one more attempt, compensate, or not
	// yet. Without one, the model is told to ask a human.
	Approver Approver
	// Compensate undoes the effect of the action with the given reference,
	// if it happened. It runs when an approver or an operator chooses
	// compensation; it must be safe to run when the effect did not happen.
	Compensate func(ctx context.Context, info CallInfo) error
	// Codec encodes what the store keeps that came from an outcome, an error
	// or a person: outcomes (results and error texts), operators' and
	// approvers' names and notes, and results of boltstore.Store.Effect. Use
	// it to redact or encrypt them. Default: as they are (readable in a copy
	// of the store).
	Codec Codec
	// DigestKey, if set (32 random bytes or more, kept secret), keys the
	// request reference (key version 3) and the digests records keep of
	// principals, sessions and inputs: HMAC-SHA-256 instead of SHA-256, so
	// that neither a copy of the store nor a reference in a log or at a
	// destination can be checked against a guessed principal or input.
	// Without it, they can. Set one in production. Every tool sharing a
	// store must use the same key. Changing it (or setting it on tools that
	// ran without) gives every action a new reference: records made before
	// are still listed, settled and swept by their reference, but a call
	// never meets them, so a repeat of an action done before is a new
	// action. Change it when no call is in flight and nothing is unknown;
	// see docs/promises.md.
	DigestKey []byte
	// Logger receives warnings (an outcome that could not be recorded). nil
	// means discard.
	Logger *slog.Logger
	// Hooks observe calls. Every hook is optional.
	Hooks Hooks
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

// The input bounds a tool has unless its Options say otherwise.
const (
	defaultMaxInput            = 1 << 20  // Options.MaxInput
	defaultMaxIdentifyingValue = 64 << 10 // Options.MaxIdentifyingValue
)

// Codec transforms outcomes on their way into and out of the store: to
// redact personal data or to encrypt. See storekit.Codec.
type Codec = storekit.Codec

// config is Options after defaults and validation.
type config struct {
	Options
	digestKey     []byte
	keyLike       map[string]bool // skeletons of key-like names
	keyStems      []string
	identify      map[string]bool
	identifyOrder []string // IdentifyingFields, sorted
	exact         map[string]bool
	logger        *slog.Logger
	codec         Codec
	inputCodec    Codec // of kept inputs: InputCodec, else codec
	// localStore is set when the store never waits on a network.
	localStore bool
	// definition is the digest of what decides the tool's keys and guard
	// (definition.go), definitionText the same in words.
	definition     uint64
	definitionText string
	// legacyDefinition is the digest an earlier version made of the
	// definition (definition.go).
	legacyDefinition uint64
}

func newConfig(name string, o Options) (*config, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("agenttool: tool %q: %s: %w", name, fmt.Sprintf(format, args...), ErrInvalidOptions)
	}
	if !validName(name, false) {
		return nil, bad("a tool's name must be 1 to 64 letters, digits, '_' or '-', as function-calling APIs require")
	}
	switch o.Class {
	case ReadOnly, Keyed, Reconcilable, AtMostOnce:
	case 0:
		return nil, bad("Class is required: declare ReadOnly, Keyed, Reconcilable or AtMostOnce")
	default:
		return nil, bad("unknown Class %d", o.Class)
	}
	if o.Store == nil && o.Class != ReadOnly {
		return nil, bad("Store is required for a %v tool (boltstore for one process, pgstore for many)", o.Class)
	}
	if o.DefaultScope != nil {
		if !o.DefaultScope.valid() {
			return nil, bad("DefaultScope needs both a principal and a session")
		}
		// A copy: a caller changing its Scope later must not change keys.
		scope := *o.DefaultScope
		o.DefaultScope = &scope
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = name
	}
	if !validName(o.KeyPrefix, true) {
		return nil, bad("KeyPrefix %q must be 1 to 64 letters, digits, '_', '-' or '.': it starts every request reference, which travels in HTTP headers and Message-IDs", o.KeyPrefix)
	}
	if o.Fence > FenceOff {
		return nil, bad("unknown Fence %d", o.Fence)
	}
	o.Retry = o.Retry.withDefaults()
	if o.Retry.MaxAttempts < 1 || o.Retry.InitialInterval < 0 || o.Retry.MaxInterval < 0 || o.Retry.MaxElapsed < 0 || o.Retry.Multiplier < 1 {
		return nil, bad("Retry has a negative duration, fewer than 1 attempt or a multiplier below 1")
	}
	if o.AttemptTimeout < 0 {
		return nil, bad("AttemptTimeout %v is negative", o.AttemptTimeout)
	}
	if o.LateWindow < 0 {
		return nil, bad("LateWindow %v is negative", o.LateWindow)
	}
	if o.Lease == 0 {
		o.Lease = time.Minute
	}
	if o.Lease < 0 {
		return nil, bad("Lease %v is not positive: a pending record needs a finite, live lease", o.Lease)
	}
	if o.Lease < 3*time.Millisecond {
		return nil, bad("Lease %v is too short to be renewed while the tool runs", o.Lease)
	}
	if o.Class == Reconcilable && o.Reconciler == nil && !o.SettledByOperators {
		return nil, bad("a Reconcilable tool needs a Reconciler that asks the destination what became of a request; " +
			"if people settle its unknown outcomes instead (Operator.ResolveApplied, ResolveNotApplied), set SettledByOperators")
	}
	if o.SettledByOperators && o.Class != Reconcilable {
		return nil, bad("SettledByOperators is for Reconcilable tools, not %v ones", o.Class)
	}
	if o.Reconciler != nil && o.Class != Reconcilable && o.Class != Keyed {
		return nil, bad("a Reconciler is only used by Reconcilable and Keyed tools, not %v ones", o.Class)
	}
	if o.Approver != nil && o.Class != AtMostOnce {
		return nil, bad("an Approver is only used by AtMostOnce tools, not %v ones", o.Class)
	}
	if o.KeyTTL == 0 {
		o.KeyTTL = 24 * time.Hour
	}
	if window := o.Retry.MaxElapsed + o.Lease; o.KeyTTL < window {
		return nil, bad("key lifetime %v is shorter than retry window %v plus lease %v (%v): a retry could find its key gone and run again",
			o.KeyTTL, o.Retry.MaxElapsed, o.Lease, window)
	}
	if o.DestinationKeyTTL == 0 {
		o.DestinationKeyTTL = 24 * time.Hour
	}
	if o.DestinationKeyTTL > 0 && o.Class == Keyed && o.DestinationKeyTTL < o.Retry.MaxElapsed+o.Lease {
		return nil, bad("DestinationKeyTTL %v is shorter than retry window %v plus lease %v: a call's own retries would outlive the destination's key",
			o.DestinationKeyTTL, o.Retry.MaxElapsed, o.Lease)
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = time.Second
	} else if o.ClockSkew < 0 {
		o.ClockSkew = 0
	}
	if inFlight := o.AttemptTimeout + o.LateWindow + o.ClockSkew; o.KeyTTL < inFlight {
		// An attempt's late answer is about the record's life it was
		// sent in: once the record expired, the key's next life counts
		// its attempts afresh, and the answer would settle that one.
		return nil, bad("key lifetime %v is shorter than an attempt may still land (AttemptTimeout %v, LateWindow %v and ClockSkew %v: %v): "+
			"a late answer could settle the key's next action", o.KeyTTL, o.AttemptTimeout, o.LateWindow, o.ClockSkew, inFlight)
	}
	if keep := o.DestinationKeyTTL + o.ClockSkew; o.Class == Keyed && o.DestinationKeyTTL > 0 && o.KeyTTL < keep {
		// A new action of the same input has the same reference: while
		// the destination keeps it, it would replay the old effect, and
		// only the record can say so.
		o.KeyTTL = keep
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = 10 * time.Second
	}
	if o.CheckTimeout < 0 {
		return nil, bad("CheckTimeout %v is negative", o.CheckTimeout)
	}
	if o.NoticeHold == 0 {
		o.NoticeHold = 10 * time.Second
	}
	if o.NoticeBackstop == 0 {
		o.NoticeBackstop = 6 * time.Hour
	}
	if o.NoticeBackstop < 0 {
		return nil, bad("NoticeBackstop %v is negative", o.NoticeBackstop)
	}
	if o.CheckTimeout == 0 {
		o.CheckTimeout = 30 * time.Second
	}
	if o.StoreTimeout == 0 {
		o.StoreTimeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxInput == 0 {
		o.MaxInput = defaultMaxInput
	}
	if o.MaxInput < 0 || o.MaxInput > canonjson.MaxInput {
		return nil, bad("MaxInput %d is not between 1 and %d bytes", o.MaxInput, canonjson.MaxInput)
	}
	if o.MaxIdentifyingValue == 0 {
		o.MaxIdentifyingValue = min(defaultMaxIdentifyingValue, o.MaxInput)
	}
	if o.MaxIdentifyingValue < 0 || o.MaxIdentifyingValue > o.MaxInput {
		return nil, bad("MaxIdentifyingValue %d is not between 1 and MaxInput (%d) bytes", o.MaxIdentifyingValue, o.MaxInput)
	}
	if o.DigestKey != nil && len(o.DigestKey) < 32 {
		return nil, bad("DigestKey has %d bytes; use 32 random bytes or more", len(o.DigestKey))
	}
	c := &config{Options: o, codec: o.Codec, inputCodec: o.InputCodec, logger: o.Logger, digestKey: bytes.Clone(o.DigestKey)}
	if l, ok := o.Store.(storekit.LocalStore); ok && l.Local() {
		c.localStore = true
	}
	if c.codec == nil {
		c.codec = plainCodec{}
	}
	if c.inputCodec == nil {
		c.inputCodec = c.codec
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	fields := o.KeyLikeFields
	if fields == nil {
		fields = DefaultKeyLikeFields
		c.keyStems = KeyLikeStems
	}
	c.keyLike = make(map[string]bool, len(fields))
	for _, f := range fields {
		c.keyLike[skeleton(f)] = true
	}
	if len(o.IdentifyingFields) > 0 {
		if o.TextInput {
			return nil, bad("IdentifyingFields name fields of a JSON object, but the tool takes plain text (TextInput)")
		}
		c.identify = make(map[string]bool, len(o.IdentifyingFields))
		for _, f := range o.IdentifyingFields {
			if c.isKeyLike(f) {
				return nil, bad("identifying field %q looks like a key the model would supply; keys come from trusted code", f)
			}
			if c.identify[f] {
				return nil, bad("identifying field %q is listed twice", f)
			}
			c.identify[f] = true
		}
		c.identifyOrder = slices.Sorted(maps.Keys(c.identify))
	}
	c.exact = make(map[string]bool, len(o.ExactFields))
	for _, f := range o.ExactFields {
		if c.identify != nil && !c.identify[f] {
			return nil, bad("ExactFields names %q, which is not one of the IdentifyingFields", f)
		}
		c.exact[f] = true
	}
	return c, nil
}

// validName reports whether s is 1 to 64 ASCII letters, digits, '_' or '-'
// (and '.' if dot).
func validName(s string, dot bool) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || (dot && c == '.')) {
			return false
		}
	}
	return true
}
