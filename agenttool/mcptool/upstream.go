package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// ToolOptions say how a guarded client tool calls its server, beyond what
// its agenttool.Options say. The zero value is [NewTool]'s behaviour.
type ToolOptions struct {
	// Name is the guarded tool's name: its records, envelopes and request
	// references go by it. Default: the listed name.
	Name string
	// ToolErrors says what a result with isError means for the effect
	// (see [ToolErrors]); nil reads every such result as unknown.
	ToolErrors ToolErrors
	// RefArgument names an argument of the tool in which each call sends
	// its request reference (agenttool.RequestRef), filled in by the guard
	// and never taken from the input (input that carries it is refused,
	// definite_failure). It must be a property of the tool's input schema
	// (a string), and is never an identifying field.
	//
	// For class Keyed it is the server's idempotency key (Stripe-style
	// "idempotency_key"): the server applies a key at most once and
	// answers a repeat with the first outcome, which is what makes Keyed
	// right for a server that does not answer with retrysafe envelopes.
	// For Reconcilable and AtMostOnce it is where the server keeps a
	// client reference (a metadata field, a note), so that a check or a
	// person can find the action by it.
	// NewToolWith fails (ErrRefRefused) if the argument's schema refuses
	// the form of reference RefForm says.
	RefArgument string
	// RefForm is the form of the reference in RefArgument: the reference
	// itself (the zero value), or its UUID form (agenttool.RequestUUID),
	// for a server that takes a UUID there; a check or a person then looks
	// for that form (agenttool.RefUUID). [RefFormFor] says what the
	// argument's schema asks for. The argument and its form are part of
	// the tool's definition (agenttool.Options.RefSentAs): change either
	// while actions are unknown and those actions wait for a person,
	// neither resent nor checked the new way.
	RefForm RefForm
	// WholeResult makes a success's result the server's whole tools/call
	// result, as JSON (an mcp.CallToolResult: content, structured content,
	// _meta), for a front that answers its own client with it (see
	// ServerOptions.Listing). By default it is the structured content, or
	// the text.
	WholeResult bool
	// PassMeta sends on, in each call's _meta, what the tools/call that
	// reached a front made with ServerOptions.Listing carried in its own
	// (a progressToken, a traceparent), beside the request reference.
	PassMeta bool
	// RelayInput relays the server's requests for input (a
	// multi-round-trip result, SEP-2322: an elicitation, a sampling or a
	// roots request) to the client of a front made with
	// ServerOptions.Listing, and that client's answers back. A call the
	// server answers with such a request did nothing: its key is given
	// back (agenttool.ErrAwaitsInput), and the front answers its client
	// with the server's requests, where that client can answer them. The
	// client's next round — the same arguments with inputResponses and
	// requestState — meets the same action's key and sends them on. A
	// call with no such front, or whose client cannot answer, fails
	// definitely ([CodeInputRequired]), naming what the server asked.
	// The client is handed the server's requestState sealed to the action
	// (its request reference and input, under a key the tool makes when
	// it is made): a round whose state is sealed to another action, or by
	// another tool value (a process that restarted), is sent as a first
	// round, and the server asks again.
	RelayInput bool
	// LateWindow keeps listening, for up to this long after an attempt's
	// deadline (agenttool.Options.AttemptTimeout) passed, for the server's
	// answer to the call it was sent, rather than cancelling the call at
	// the server then; the
	// attempt itself ends at its deadline, unknown, as before. An answer
	// that comes within the window goes to Late. The tool's
	// agenttool.Options.LateWindow is raised to it: a check's not-applied
	// is trusted only once the request can no longer land. A keyed
	// tool's request is cancelled at its key's deadline
	// (agenttool.CallInfo.KeyDeadline) whatever the window. A call whose caller
	// cancelled it is cancelled at the server at once
	// (notifications/cancelled), whatever the window: the SDK then drops
	// any answer. 0 (or no Late): every call is cancelled at the server
	// when its attempt ends.
	LateWindow time.Duration
	// LateDone, closed, ends every late listening of the tool at once,
	// cancelling its calls at the server: a program that shuts down
	// closes it (nil: never).
	LateDone <-chan struct{}
	// Late hears a late answer (see LateWindow): the call it answers (its
	// request reference, and its attempt: the action's attempt count with
	// it, agenttool.Record.Attempts once recorded), and what the call
	// would have returned — a result, or an error with its class. It runs
	// on a goroutine of its own. [SettleLate] settles the action by it.
	Late func(info agenttool.CallInfo, result string, err error)
	// Sessions, if set, gives the session each call goes on, and hears of
	// a session lost under a call: an application that keeps its own
	// connection to the server (a guard that restarts a server it runs)
	// decides when to connect again. The session given to NewToolWith is
	// then not used.
	Sessions Sessions
	// ValidateArguments checks each call's arguments (its RefArgument
	// filled in) against the tool's input schema as listed, before
	// anything is sent: arguments the schema refuses fail definitely
	// (invalid_input, saying what is wrong), so that a call the server
	// would refuse costs no unknown outcome — for an AtMostOnce tool, a
	// fence held until a person acts. JSON Schema draft 2020-12 and
	// draft-07 are read; NewToolWith fails with ErrSchemaUnreadable for a
	// schema the validator cannot read (another draft, a remote $ref) or
	// cannot walk at a bounded cost ($refs that come back to where they
	// were without reading deeper, or that branch beyond a bound).
	//
	// Only what the server refuses whatever validates it there is refused:
	// what the validator here may decide otherwise than the server's is
	// left to the server — a decimal multipleOf (float64 finds 19.99 no
	// multiple of 0.01), a pattern's \w, \d, \s or \b (ASCII in Go's
	// regular expressions, Unicode in others), arguments with a number
	// float64 does not hold faithfully (more than 15 significant digits,
	// as a 64-bit id; beyond its range) — and so is the RefArgument's own
	// value, which the check can only guess.
	ValidateArguments bool
}

// ErrSchemaUnreadable is wrapped by NewToolWith's error when
// ToolOptions.ValidateArguments is set and the tool's input schema cannot
// be read for validation.
var ErrSchemaUnreadable = errors.New("mcptool: the input schema cannot be read for validation")

// Sessions gives the sessions the calls of a tool go on (see
// ToolOptions.Sessions). Both methods are called concurrently.
type Sessions interface {
	// Session returns the session for the next call. An error fails the
	// call as unsent (transient).
	Session(ctx context.Context) (*mcp.ClientSession, error)
	// Lost tells that s carries nothing more: it was closed, or its server
	// no longer knows it. A call it was given for failed, as unsent or
	// unknown as the call's error says.
	Lost(s *mcp.ClientSession)
}

// NewToolWith is [NewTool] with the calling options to.
func NewToolWith(session *mcp.ClientSession, t *mcp.Tool, opts agenttool.Options, to ToolOptions) (*agenttool.Tool, error) {
	if session == nil && to.Sessions == nil {
		return nil, fmt.Errorf("mcptool: NewToolWith needs a client session (or ToolOptions.Sessions) and a listed tool: %w", agenttool.ErrInvalidOptions)
	}
	return newTool(&link{session: session, sessions: to.Sessions}, t, opts, to)
}

// SettleLate settles the unknown outcome of info's action by a late
// answer of its server (ToolOptions.Late), with op, an operator of the
// action's tool, as a check's answer settles it
// (agenttool.Operator.SettleByAnswer): a result settles it as applied,
// with that result; an error the tool's class reads as definite or
// transient (the server did nothing for that attempt) settles it as not
// applied — so that one more attempt may go — only if no attempt ran
// since, and once no other attempt of the action may still land; an
// unknown error settles nothing. A result settles the action whatever ran
// or was decided since, while its record is unknown (another attempt's
// outcome unknown, a person's finding of not applied approving one more
// attempt that has not run): the action is done. by says who settles, as
// the record keeps it. Nothing is settled if the record is settled, or
// moved on past a refusal: agenttool.ErrNotUnknown or agenttool.ErrStale
// then, which a caller may ignore; agenttool.ErrContradicted for a
// result about an action recorded failed, which a person should see
// (with Applied when the action was replaced, and is settled applied
// aside from the write that went on in its place, which the error
// names: it may be the action reworded). A
// record still held by a call is waited for, up to the tool's
// WaitTimeout. It returns the verdict it settled by: Applied, NotApplied,
// or another when it settled nothing (Pending: a refusal came while an
// earlier attempt may still land).
func SettleLate(ctx context.Context, op *agenttool.Operator, info agenttool.CallInfo, result string, err error, by string) (reconcile.Verdict, error) {
	ans := reconcile.Answer{Verdict: reconcile.Applied, Result: envelope.ResultFromText(result)}
	if err != nil {
		switch envelope.Classify(err) {
		case envelope.Definite, envelope.Transient:
			ans = reconcile.Answer{Verdict: reconcile.NotApplied, Err: err}
		default:
			return reconcile.CantSay, nil
		}
	}
	return op.SettleByAnswer(ctx, info.RequestRef, info.Attempt, ans, by)
}

// listenLate waits for the answer of a call whose attempt ended at its
// deadline, until until (the tool's LateWindow later, or the key's
// deadline if sooner), and hands it to Late; then, or once nothing can
// come, it cancels the call at the server.
func (r *remote) listenLate(info agenttool.CallInfo, answered <-chan callAnswer, cancel context.CancelFunc, sent, until time.Time) {
	defer cancel()
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case a := <-answered:
		if a.err != nil {
			return // no answer came: the session failed under it
		}
		out, err := r.readResult(context.Background(), a.res, sent)
		r.late(info, out, err)
	case <-t.C:
	case <-r.lateDone:
	}
}

// callAnswer is what a tools/call returned.
type callAnswer struct {
	res *mcp.CallToolResult
	err error
}

// arguments returns the call's arguments: input, the canonical JSON
// object agenttool digested, with the request reference in the tool's
// RefArgument, if it has one.
func (r *remote) arguments(ctx context.Context, input string) (json.RawMessage, error) {
	if r.refArg == "" {
		return json.RawMessage(input), nil
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal([]byte(input), &args); err != nil {
		return nil, envelope.MarkDefinite(fmt.Errorf("the input is not a JSON object: %w", err), envelope.CodeInvalidInput)
	}
	if _, ok := args[r.refArg]; ok {
		return nil, envelope.MarkDefinite(fmt.Errorf("the input carries %q, which the guard fills in with each action's request reference; "+
			"send the call without it", r.refArg), envelope.CodeInvalidInput)
	}
	ref := agenttool.RequestRef(ctx)
	if ref == "" {
		return nil, envelope.MarkDefinite(fmt.Errorf("the call has no request reference to send as %q", r.refArg), "")
	}
	if args == nil {
		args = map[string]json.RawMessage{}
	}
	b, _ := json.Marshal(r.refForm.Of(ref))
	args[r.refArg] = b
	out, err := json.Marshal(args)
	if err != nil {
		return nil, envelope.MarkDefinite(err, envelope.CodeInvalidInput)
	}
	return out, nil
}

// wholeResult returns res as the text of a success, for WholeResult.
func wholeResult(res *mcp.CallToolResult) (string, error) {
	b, err := json.Marshal(res)
	if err != nil {
		// The call succeeded; what cannot be carried whole goes as text.
		return joinedText(res), nil
	}
	return string(b), nil
}

// passedMetaKey carries the _meta of the tools/call a front received
// (ServerOptions.Listing) to the call a tool makes of its server
// (ToolOptions.PassMeta).
type passedMetaKey struct{}

// withPassedMeta returns ctx carrying m for PassMeta.
func withPassedMeta(ctx context.Context, m mcp.Meta) context.Context {
	if len(m) == 0 {
		return ctx
	}
	return context.WithValue(ctx, passedMetaKey{}, m)
}

// PassableMeta returns what a proxy passes on of a request's _meta: all
// but the keys the protocol reserves for one connection
// ("io.modelcontextprotocol/…": a protocol version, client information,
// capabilities — the proxy's own connection carries its own; a stateful
// server refuses a request that carries a protocol version it did not
// negotiate) and retrysafe's own (a request reference, an envelope).
// nil if nothing is left.
func PassableMeta(m mcp.Meta) mcp.Meta {
	var out mcp.Meta
	for k, v := range m {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") || k == MetaRequestRef || k == MetaEnvelope {
			continue
		}
		if out == nil {
			out = make(mcp.Meta, len(m))
		}
		out[k] = v
	}
	return out
}

// meta returns the _meta of a call: what the front received, if the tool
// passes it on (PassableMeta), and the request reference.
func (r *remote) meta(ctx context.Context) mcp.Meta {
	var m mcp.Meta
	if passed, ok := ctx.Value(passedMetaKey{}).(mcp.Meta); ok && r.passMeta {
		m = PassableMeta(passed)
	}
	if ref := agenttool.RequestRef(ctx); ref != "" {
		if m == nil {
			m = mcp.Meta{}
		}
		m[MetaRequestRef] = ref
	}
	return m
}
