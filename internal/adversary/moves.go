package adversary

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/retrysafe/retrysafe/envelope"
)

// call is one tool call the model decided on.
type call struct {
	tool, args string
	move       Move
	action     int // the plan it is about, or -1
}

// mind is what a Model decides with: its repertoire, not yet sent, and
// what it knows of each action from the results it read.
type mind struct {
	rng      *rand.Rand
	perTurn  int
	maxTurns int
	pending  [][]call // the repertoire: groups of calls sent in one message
	acts     []*act
	started  bool

	rewordAtOnce bool
}

// act is what the model knows of one plan's action.
type act struct {
	i         int
	plan      Plan
	refs      []string // request references read, in order
	pasted    map[string]bool
	done      bool   // it read that the action succeeded: it never rewords it again
	unknown   bool   // it read an unknown outcome of the action, and no success since
	reword    int    // messages still to reword and resend the action in
	rewords   int    // times it began rewording
	resend    bool   // resend the plain call (after a refusal of its input, or "wait")
	confirmed bool   // sent its "just to be sure" repeat after done
	last      string // the latest status it read
}

func newMind(plans []Plan, rng *rand.Rand, perTurn, maxTurns int) *mind {
	m := &mind{rng: rng, perTurn: perTurn, maxTurns: maxTurns}
	for i, p := range plans {
		m.acts = append(m.acts, &act{i: i, plan: p, pasted: map[string]bool{}})
		m.pending = append(m.pending, repertoire(i, p)...)
	}
	for i, p := range plans { // two different tools in one message
		other := call{p.Tool + "_v2", p.Base, NoSuchTool, -1}
		if len(plans) > 1 {
			q := plans[(i+1)%len(plans)]
			other = call{q.Tool, q.Base, Same, (i + 1) % len(plans)}
		}
		m.pending = append(m.pending, []call{{p.Tool, p.Base, Same, i}, other})
	}
	rng.Shuffle(len(m.pending), func(a, b int) { m.pending[a], m.pending[b] = m.pending[b], m.pending[a] })
	return m
}

// repertoire is every call the model makes of plan i's action whatever it
// reads: restatements of the action (Plan.Variants), bursts of identical
// calls in one message, input that is not the tool's, and calls of tools
// that do not exist.
func repertoire(i int, p Plan) [][]call {
	one := func(move Move, args string) []call { return []call{{p.Tool, args, move, i}} }
	var out [][]call
	for _, v := range p.Variants() {
		out = append(out, one(Same, v))
	}
	b := p.Base
	out = append(out,
		[]call{{p.Tool, b, Same, i}, {p.Tool, b, Same, i}, {p.Tool, b, Same, i}}, // parallel identical calls
		[]call{{strings.ToUpper(p.Tool), b, Same, i}},                            // a loop may match names in any case
		[]call{{title(p.Tool), b, Same, i}},
		[]call{{p.Tool + " ", b, Same, i}},
		[]call{{"functions." + p.Tool, b, NoSuchTool, -1}},
		[]call{{"multi_tool_use.parallel", `{"tool_uses":[{"recipient_name":"functions.` + p.Tool + `","parameters":` + b + `}]}`, NoSuchTool, -1}},
	)
	for _, bad := range []string{
		b[:len(b)/2], b[:len(b)-1], // truncated
		quote(b), quote(quote(b)), // the object inside a string
		"[" + b + "," + b + "]", b + b, b + "\n" + b,
		`{"arguments":` + quote(b) + `}`, `{"input":` + b + `}`, `{"name":` + quote(p.Tool) + `,"arguments":` + b + `}`,
		`{"__arg1":` + quote(b) + `}`, // what langchaingo unwraps: then it is the action itself
		b[:len(b)-1] + ",}", strings.ReplaceAll(b, `"`, `'`), "```json\n" + b + "\n```",
	} {
		out = append(out, one(Malformed, bad))
	}
	for _, extra := range []string{ // keys of the model's own, nested and disguised
		`"metadata":"{\"idempotency_key\":\"k-7\"}"`, `"headers":{"Idempotency-Key":"k-8"}`,
		`"options":{"retry":{"requestId":"k-9"}}`, `"idempotencyKey":"k-10"`, `"X-Request-ID":"k-11"`,
		`"IDEMPOTENCY_KEY":"k-12"`, `"idempotency-key":null`, `"idempotency_key":""`,
		`"extra":{"items":[{"Idempotency_Key":"k-13"}]}`,
	} {
		out = append(out, one(Malformed, withMember(b, extra, false)), one(Malformed, withMember(b, extra, true)))
	}
	for _, extra := range []string{`"cc":""`, `"cc":[]`, `"cc":{}`, `"reply_to":null`} { // empty members
		out = append(out, one(Same, withMember(b, extra, false)))
	}
	names, values, lits := members(b)
	last := len(names) - 1
	// A member twice, with its value and with another: never read as the
	// first or the last of them.
	out = append(out,
		one(Malformed, withMember(b, quote(names[last])+":"+lits[last], false)),
		one(Malformed, withMember(b, quote(names[last])+":"+quote("someone else"), false)),
		one(Malformed, withMember(b, quote(names[last])+":"+quote("someone else"), true)))
	// A number where the tool takes a string.
	for j := range names {
		if lits[j] == quote(values[j]) {
			out = append(out, one(Malformed, strings.Replace(b, quote(names[j])+":"+lits[j], quote(names[j])+":1234", 1)))
			break
		}
	}
	// Names and values written with JSON escapes: the same text.
	escaped := strings.Replace(b, quote(names[0]), `"\u`+fmt.Sprintf("%04x", names[0][0])+names[0][1:]+`"`, 1)
	out = append(out, one(Same, escaped))
	if v := values[last]; lits[last] == quote(v) && len(v) > 0 {
		out = append(out, one(Same, strings.Replace(b, lits[last], `"`+fmt.Sprintf("\\u%04x", v[0])+strings.TrimPrefix(lits[last][1:], v[:1]), 1)))
	}
	return out
}

// withMember adds a member to a JSON object, first or last.
func withMember(obj, member string, first bool) string {
	obj = strings.TrimSpace(obj)
	if first {
		return "{" + member + "," + obj[1:]
	}
	return obj[:len(obj)-1] + "," + member + "}"
}

// next decides the next message from the results read since the last
// one: its calls, or, with none, the final answer.
func (m *mind) next(turn int, read []Exchange) ([]call, string) {
	for _, x := range read {
		if x.Action >= 0 && x.Envelope != nil {
			m.acts[x.Action].learn(*x.Envelope)
		}
	}
	var calls []call
	if !m.started {
		m.started = true
		for _, a := range m.acts {
			calls = append(calls, call{a.plan.Tool, a.plan.Base, Same, a.i})
			if m.rewordAtOnce && a.plan.Reworded != "" {
				calls = append(calls, call{a.plan.Tool, a.plan.Reworded, Reworded, a.i})
			}
		}
		return calls, ""
	}
	if turn > m.maxTurns {
		return nil, m.answer()
	}
	for _, a := range m.acts {
		calls = append(calls, a.react(m.rng)...)
	}
	for n := m.perTurn/2 + m.rng.IntN(m.perTurn+1); n > 0 && len(m.pending) > 0; {
		g := m.pending[0]
		m.pending = m.pending[1:]
		calls = append(calls, g...)
		n -= len(g)
	}
	if len(calls) == 0 {
		return nil, m.answer()
	}
	m.rng.Shuffle(len(calls), func(a, b int) { calls[a], calls[b] = calls[b], calls[a] })
	return calls, ""
}

// learn reads one envelope about the action.
func (a *act) learn(e envelope.Envelope) {
	a.last = string(e.Status)
	if e.Error != nil {
		a.last += ", " + e.Error.Code
	}
	for _, ref := range []string{e.RequestRef, earlierRef(e)} {
		if ref != "" && !contains(a.refs, ref) {
			a.refs = append(a.refs, ref)
		}
	}
	switch {
	case e.Status == envelope.Success, e.Earlier != nil && e.Earlier.State == envelope.ActionSucceeded:
		a.done, a.unknown, a.reword = true, false, 0
	case e.Status == envelope.UnknownOutcome && !a.done:
		if !a.unknown && a.rewords < 3 {
			a.reword = 2 // in this message and the next
			a.rewords++
		}
		a.unknown = true
	case e.Next == envelope.Wait, e.Next == envelope.FixInput:
		a.resend = true
	}
}

// react returns the calls the action gets in answer to what was read.
func (a *act) react(rng *rand.Rand) []call {
	p := a.plan
	c := func(move Move, args string) call { return call{p.Tool, args, move, a.i} }
	var out []call
	if a.reword > 0 && !a.done && p.Reworded != "" {
		a.reword--
		out = append(out, c(Same, p.Base), c(Reworded, p.Reworded))
		if a.reword == 1 { // the first message after the unknown outcome: another wording too
			out = append(out, c(Reworded, keyInText(p.Base, a.rewords)))
		}
	} else if a.resend {
		out = append(out, c(Same, p.Base))
	}
	a.resend = false
	if a.done && !a.confirmed { // "just to be sure"
		a.confirmed = true
		out = append(out, c(Same, p.Base), c(Same, p.Variants()[2+rng.IntN(4)]))
	}
	for _, ref := range a.refs { // paste back each reference it read, the first few
		if a.pasted[ref] || len(a.pasted) >= 4 {
			continue
		}
		a.pasted[ref] = true
		forms := pastes(p, ref)
		rng.Shuffle(len(forms), func(i, j int) { forms[i], forms[j] = forms[j], forms[i] })
		for _, f := range forms[:3] {
			out = append(out, c(Pasted, f))
		}
	}
	return out
}

// pastes are the ways a model pastes a reference it read into a call.
func pastes(p Plan, ref string) []string {
	b, q := p.Base, quote(ref)
	return []string{
		withMember(b, `"request_ref":`+q, false), withMember(b, `"idempotency_key":`+q, true),
		withMember(b, `"meta":{"Idempotency-Key":`+q+`}`, false), withMember(b, `"reference":`+q, false),
		q, ref, `{"request_ref":` + q + `}`,
	}
}

// keyInText is the action with an idempotency key written into its last
// member's text: another wording, as far as the tool can tell.
func keyInText(base string, n int) string {
	names, values, lits := members(base)
	last := len(names) - 1
	if lits[last] == quote(values[last]) {
		lits[last] = quote(values[last] + fmt.Sprintf(" [Idempotency-Key: retry-%d]", n))
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%s", quote(n), lits[i])
	}
	b.WriteByte('}')
	return b.String()
}

// answer is the model's final answer: what it learnt of each action.
func (m *mind) answer() string {
	var parts []string
	for _, a := range m.acts {
		switch {
		case a.done:
			parts = append(parts, a.plan.Tool+": done")
		case a.unknown:
			parts = append(parts, a.plan.Tool+": it may have happened; it is being verified")
		default:
			parts = append(parts, fmt.Sprintf("%s: not done (%s)", a.plan.Tool, a.last))
		}
	}
	return strings.Join(parts, "; ") + "."
}

func earlierRef(e envelope.Envelope) string {
	if e.Earlier == nil {
		return ""
	}
	return e.Earlier.RequestRef
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
