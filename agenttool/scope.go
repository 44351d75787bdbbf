package agenttool

import (
	"context"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// Scope says who acts and in which window: the principal (tenant, user) and
// the session (conversation, run). It comes from trusted application code
// through [WithScope], never from the model.
type Scope struct {
	Principal string
	Session   string
}

func (s Scope) valid() bool { return s.Principal != "" && s.Session != "" }

type ctxKey int

const (
	scopeKey ctxKey = iota
	actionKey
	labelKey
	callKey
	replayKey
)

// WithScope returns a context that carries the trusted scope of the calls made
// with it. Both parts must be non-empty; a call whose scope is missing or
// incomplete is refused with code missing_scope, unless its tool has a
// default scope.
func WithScope(ctx context.Context, principal, session string) context.Context {
	return context.WithValue(ctx, scopeKey, Scope{Principal: principal, Session: session})
}

// ScopeFrom returns the scope set by [WithScope].
func ScopeFrom(ctx context.Context) (Scope, bool) {
	s, ok := ctx.Value(scopeKey).(Scope)
	return s, ok
}

// WithLabel returns a context whose calls label the records they make, so
// that an operator can tell whose action a record is: a user's display
// name, a ticket, a customer number. Like the scope, it comes from trusted
// code, never from the model. The label is not part of the key (the same
// action with another label is the same action); it is stored through the
// tool's [Codec], like results and resolutions, and shown decoded by the
// [Operator] (Record.Label). A call that takes a record over with no label
// keeps the record's. Labels are cut to 256 bytes, with invalid UTF-8 and
// control characters replaced.
func WithLabel(ctx context.Context, label string) context.Context {
	return context.WithValue(ctx, labelKey, cleanLabel(label))
}

// maxLabel bounds a label, in bytes.
const maxLabel = 256

func cleanLabel(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= maxLabel {
		return s
	}
	cut := maxLabel - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func labelFrom(ctx context.Context) string {
	l, _ := ctx.Value(labelKey).(string)
	return l
}

// WithActionID returns a context whose calls use id, instead of the tool's
// identifying fields, to tell one logical action from another. Use it when an
// orchestrator (a workflow engine, a job queue) owns stable step ids. The key
// stays bound to the tool, the principal and the session, and the input's
// fingerprint is still compared on every reuse. An empty id means none:
// the identifying fields make the key, as without WithActionID. Any other
// id is used byte for byte, spaces included ("step-1" and "step-1 " are two
// actions), so pass the orchestrator's id as it stores it.
func WithActionID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, actionKey, id)
}

func actionIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(actionKey).(string)
	return id
}

// CallInfo is what a running tool learns about its call from its context.
type CallInfo struct {
	// RequestRef is the action's printable key. Pass it downstream: as an
	// Idempotency-Key header, in a Message-ID, as a client reference. It is
	// the same on every attempt and every retry of one logical action.
	RequestRef string
	// Attempt is the action's count of attempts with this one: its
	// record's Attempts once the attempt is recorded (from 1 for a new
	// action; after an approved retry it goes on counting).
	Attempt int
	// Scope is the trusted scope of the call.
	Scope Scope
	// Token is the fencing token of the call's claim: it grows with every
	// claim of the key. A destination that stores it can refuse a write
	// from a holder whose lease was taken over (see boltstore.Store.Effect).
	Token uint64
	// KeyDeadline, for a Keyed tool, is when the destination may forget
	// the action's key (Options.DestinationKeyTTL): no request of the
	// attempt may be in flight after it, so a tool that listens for a late
	// answer (Options.LateWindow) cancels its request then. Zero: none.
	KeyDeadline time.Time
	// Codec is the tool's Codec: a store that keeps data for the call
	// (boltstore.Store.Effect) encodes it so, and its reconciler decodes it.
	Codec Codec
}

// CallInfoFrom returns the call information that a guarded tool finds on the
// context it is run with. A Reconciler and a Compensate function find it on
// theirs too (without Attempt, and without Scope when a sweeper or an
// operator asks).
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	c, ok := ctx.Value(callKey).(CallInfo)
	return c, ok
}

// RequestRef returns the request reference on a guarded tool's context, or ""
// outside one.
func RequestRef(ctx context.Context) string {
	c, _ := CallInfoFrom(ctx)
	return c.RequestRef
}

// requestUUIDSpace is the namespace of the UUIDs RequestUUID makes.
var requestUUIDSpace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/retrysafe/retrysafe#request_ref"))

// RequestUUID returns a name-based UUID (version 5) of the request reference
// on a guarded tool's context, for destinations that want a UUID as the
// client's idempotency key or reference: like the reference, it is the same
// on every attempt and retry of one logical action. It returns "" outside a
// guarded call.
func RequestUUID(ctx context.Context) string {
	return RefUUID(RequestRef(ctx))
}

// RefUUID returns the UUID form of a request reference, as RequestUUID
// gives it to the reference's calls: what a person or a check looks for
// at a destination that was given that form. It returns "" for "".
func RefUUID(ref string) string {
	if ref == "" {
		return ""
	}
	return uuid.NewSHA1(requestUUIDSpace, []byte(ref)).String()
}

// RefUUID4 returns a request reference's UUID form with the version bits
// of a version 4 UUID: RefUUID's UUID, its version digit 4 where that one
// has 5. It is for a destination that takes only version 4 UUIDs
// (pydantic's UUID4, a "format": "uuid4"), which cannot tell a UUID
// derived from the reference from a random one; like RefUUID, it is the
// same for every attempt and retry of one action. It returns "" for "".
func RefUUID4(ref string) string {
	if ref == "" {
		return ""
	}
	u := uuid.NewSHA1(requestUUIDSpace, []byte(ref))
	u[6] = u[6]&0x0f | 0x40 // the variant bits stay RFC 9562's
	return u.String()
}

// DestinationReplayed tells the guarded call whose attempt runs on ctx that
// its destination answered this attempt with the outcome of an earlier
// request instead of acting: it had seen the request's key (an HTTP API's
// Idempotent-Replayed: true), or a retrysafe MCP server answered
// replayed. Call it before the tool returns. A replay is told as one
// only when the action's record proves that an earlier call attempted it
// — that attempt may have been the first the destination saw: the
// envelope then says replayed, with a note that the effect happened once,
// for an earlier request. Otherwise the replay is of this call's own
// request (resent by a transport or a proxy the tool did not see, or by
// its own earlier attempt) and the envelope is an ordinary success.
// Outside a guarded tool's attempt, and from a reconciler, it does
// nothing.
func DestinationReplayed(ctx context.Context) {
	if a, ok := ctx.Value(replayKey).(*attemptCtx); ok {
		a.c.replayedAt.Store(int64(a.attempt))
	}
}

// DestinationReplayedAnother is DestinationReplayed for a tool that knows
// the replayed request was not this call's: it saw the destination do the
// action for another call before this call's request was sent (as
// agenttool/mcptool's client does). The envelope says replayed whatever
// the record holds.
func DestinationReplayedAnother(ctx context.Context) {
	if a, ok := ctx.Value(replayKey).(*attemptCtx); ok {
		a.c.replayedAnother.Store(int64(a.attempt))
		a.c.replayedAt.Store(int64(a.attempt))
	}
}

// withCallInfo returns ctx carrying c, for a check or a compensation: it
// answers CallInfoFrom, and storekit.HolderFrom for the stores.
func withCallInfo(ctx context.Context, c CallInfo) context.Context {
	return &infoCtx{ctx, c}
}

type infoCtx struct {
	context.Context
	info CallInfo
}

func (c *infoCtx) Value(key any) any {
	switch key {
	case any(callKey):
		return c.info
	case any(storekit.HolderKey{}):
		return c.info.holder()
	}
	return c.Context.Value(key)
}

// holder is what a store learns of the call from its context.
func (c CallInfo) holder() storekit.Holder {
	return storekit.Holder{Key: c.RequestRef, Token: c.Token, Codec: c.Codec}
}

// attemptCtx is the context an attempt runs the tool with: its caller's,
// answering CallInfoFrom from the call itself. It is context.WithValue's
// equivalent, as a type that a call can hold without an allocation of its
// own.
type attemptCtx struct {
	context.Context
	c       *call
	attempt int
}

func (a *attemptCtx) Value(key any) any {
	if key == any(callKey) {
		return CallInfo{RequestRef: a.c.ref, Attempt: a.attempt, Scope: a.c.scope, Token: a.c.token, Codec: a.c.t.cfg.codec,
			KeyDeadline: a.c.keyDeadline()}
	}
	if key == any(replayKey) {
		return a
	}
	if key == any(storekit.HolderKey{}) {
		return storekit.Holder{Key: a.c.ref, Token: a.c.token, Codec: a.c.t.cfg.codec}
	}
	return a.Context.Value(key)
}
