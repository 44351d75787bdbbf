package mcptool

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/envelope"
)

// A front made with ServerOptions.Listing relays a multi-round-trip round
// (SEP-2322) between its client and the server of a tool made with
// ToolOptions.RelayInput: the client's answers go to the server in the
// call, and a request for input the server answers the call with comes
// back to the front, which answers its client with it. The relay carries
// one tools/call's round and nothing else: the action is told by its
// arguments, as for any call, so a later round meets the same key.

// relayKey carries a front's *relay on a call's context.
type relayKey struct{}

// relay is one tools/call's round.
type relay struct {
	// tool is the name of the tool the client called: only its calls
	// carry the round (not a check, or another tool, run on the call's
	// context), and only its question is the round's.
	tool      string
	responses mcp.InputResponseMap // the client's answers, if this is a later round
	state     string               // the requestState the client echoed
	// input is the call's input as the tool sends it, set by each
	// attempt before it sends: what a question's state is sealed to.
	input string
	// asked is the server's answer when it asked for input, its
	// requestState sealed to the action (seal): set by the call's
	// attempt, read by the front once the call is over.
	asked atomic.Pointer[mcp.CallToolResult]
}

// The requestState a front hands its client is the server's, sealed to
// the action it was given for: the action's request reference and its
// input, under a key of the tool's. The server sees one caller, the
// guard, for every user behind it, and cannot bind its state to any of
// them; the guard can. A later round whose state is not sealed to its own
// action — another user's state, another action's, or one sealed before
// the guard restarted — is sent as a first round (neither the answers
// nor the state): the server asks again, and the client answers its own
// question.

// sealPrefix starts a sealed requestState.
const sealPrefix = "rs1."

// seal returns the server's state sealed to the action of ref and input.
func (r *remote) seal(ref, input, state string) string {
	return sealPrefix + r.sealMAC(ref, input, state) + "." + state
}

// unseal returns the server's state in sealed, if sealed is sealed to the
// action of ref and input.
func (r *remote) unseal(ref, input, sealed string) (string, bool) {
	rest, ok := strings.CutPrefix(sealed, sealPrefix)
	if !ok {
		return "", false
	}
	mac, state, ok := strings.Cut(rest, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(r.sealMAC(ref, input, state))) {
		return "", false
	}
	return state, true
}

func (r *remote) sealMAC(ref, input, state string) string {
	h := hmac.New(sha256.New, r.relayKey)
	for _, part := range []string{"retrysafe/relay/v1", ref, input, state} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
}

func withRelay(ctx context.Context, rl *relay) context.Context {
	return context.WithValue(ctx, relayKey{}, rl)
}

// relayFor returns the round ctx carries, if r relays input and the round
// is of the tool r is.
func (r *remote) relayFor(ctx context.Context) *relay {
	rl, _ := ctx.Value(relayKey{}).(*relay)
	if rl == nil || !r.relay || rl.tool != r.name {
		return nil
	}
	return rl
}

// mrtrVersion is the protocol revision from which a client answers a
// request for input itself (resultType "input_required"); the SDK answers
// the requests of an older client's round for it, by asking that client,
// and runs the handler once more with the answers.
const mrtrVersion = "2026-07-28"

// relayed returns the answer a front gives its client when the call's
// server asked for input and the call ended so (env: definite_failure,
// CodeInputRequired, its key given back): the server's requests, for the
// client to answer in a later round. nil when there is nothing to relay,
// or the client could not answer: the envelope then says what the server
// asked.
func (rl *relay) relayed(env envelope.Envelope, req *mcp.CallToolRequest) *mcp.CallToolResult {
	asked := rl.asked.Load()
	if asked == nil || env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != CodeInputRequired {
		return nil
	}
	if !canAnswer(req, asked.InputRequests) {
		return nil
	}
	return &mcp.CallToolResult{InputRequests: asked.InputRequests, RequestState: asked.RequestState, Meta: PassableMeta(asked.Meta)}
}

// canAnswer reports whether the client of req can answer every one of
// requests: each is a question to the user (an elicitation; sampling and
// roots, deprecated since the 2026-07-28 revision, are not relayed) of a
// mode the client declared, and either it speaks a revision that
// answers such requests itself or this is its first round (the SDK
// answers an older client's round for it, once; asked again, such a
// client would read the bare requests as an empty success).
//
// The revision is the session's where the session is of an earlier one,
// whatever the request's _meta claims: the SDK decides by the session's
// whether it marks the result input_required or answers the round itself,
// and asks the client only what the session declared.
func canAnswer(req *mcp.CallToolRequest, requests mcp.InputRequestMap) bool {
	caps, version := req.ClientCapabilities(), req.ProtocolVersion()
	if req.Session != nil {
		if p := req.Session.InitializeParams(); p != nil && p.ProtocolVersion < mrtrVersion {
			caps, version = p.Capabilities, p.ProtocolVersion
		}
	}
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	if version < mrtrVersion && req.Params.InputResponses != nil {
		return false
	}
	for _, ir := range requests {
		e, ok := ir.(*mcp.ElicitParams)
		if !ok || !takes(caps.Elicitation, e) {
			return false
		}
	}
	return true
}

// takes reports whether a client that declared caps takes the
// elicitation e: a URL to open only if it declared url, a form unless it
// declared url alone (the SDK's rule, by which it refuses to ask an older
// client what it did not declare).
func takes(caps *mcp.ElicitationCapabilities, e *mcp.ElicitParams) bool {
	if e.Mode == "url" || (e.Mode == "" && (e.URL != "" || e.ElicitationID != "")) {
		return caps.URL != nil
	}
	return caps.Form != nil || caps.URL == nil
}
