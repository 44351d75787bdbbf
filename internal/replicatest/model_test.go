package replicatest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/retrysafe/retrysafe/envelope"
)

// roundRobin is the client in front of the replicas: each tools/call is one
// HTTP POST to the next replica, as a load balancer in front of stateless
// MCP servers sends it. A replica that refuses the connection (it is
// restarting) is skipped, and so is one the test holds (paused): nothing
// was sent to it.
type roundRobin struct {
	set  *replicaSet
	http *http.Client
	next atomic.Uint64
	id   atomic.Int64
}

// call sends one tools/call with args as principal, as the agent's MCP
// client does: when the connection breaks or the answer is late, it sends
// the same request again, twice at most (a resent call is the same action
// to the server). An error means the model got no envelope. With lose, the
// answer to the first send is lost on its way back.
func (rr *roundRobin) call(principal, args string, lose bool) (env envelope.Envelope, replica string, err error) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"send_email","arguments":%s}}`, rr.id.Add(1), args)
	var via []string
	for try := range 3 {
		var r string
		env, r, err = rr.send(principal, body)
		if try == 0 && lose && err == nil {
			err = errors.New("the answer was lost: the connection broke before it arrived")
		}
		if err != nil {
			r += " (" + err.Error() + ")"
		}
		via = append(via, r)
		var transport *url.Error
		if err == nil || !errors.As(err, &transport) && !(try == 0 && lose) {
			break
		}
	}
	return env, strings.Join(via, ", then "), err
}

// send posts body to the next replica that takes it.
func (rr *roundRobin) send(principal, body string) (env envelope.Envelope, replica string, err error) {
	n := uint64(len(rr.set.names))
	err = errors.New("every replica is held")
	for range 4 * n {
		i := rr.next.Add(1) % n
		replica = rr.set.names[i]
		if rr.set.isHeld(replica) {
			continue
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+rr.set.addrs[i]+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tokenPrefix+principal)
		resp, e := rr.http.Do(req)
		var op *net.OpError
		if errors.As(e, &op) && op.Op == "dial" {
			err = e // nothing was sent: the next replica
			continue
		}
		if e != nil {
			return env, replica, e
		}
		data, e := io.ReadAll(resp.Body)
		resp.Body.Close()
		if e != nil {
			return env, replica, e
		}
		env, err = parseAnswer(resp.StatusCode, data)
		return env, replica, err
	}
	return env, "", err
}

// parseAnswer reads the envelope out of a tools/call answer.
func parseAnswer(status int, data []byte) (envelope.Envelope, error) {
	var rpc struct {
		Result *struct {
			StructuredContent json.RawMessage `json:"structuredContent"`
			IsError           bool            `json:"isError"`
		} `json:"result"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &rpc); err != nil || (rpc.Result == nil && rpc.Error == nil) {
		return envelope.Envelope{}, fmt.Errorf("HTTP %d, not a JSON-RPC answer: %q", status, data)
	}
	if rpc.Error != nil {
		return envelope.Envelope{}, fmt.Errorf("JSON-RPC error %d: %s", rpc.Error.Code, rpc.Error.Message)
	}
	env, err := envelope.Parse(rpc.Result.StructuredContent)
	if err == nil && rpc.Result.IsError != (env.Status != envelope.Success) {
		err = fmt.Errorf("isError %v for a %s envelope", rpc.Result.IsError, env.Status)
	}
	return env, err
}

// style is how the scripted model reads the envelopes.
type style uint8

const (
	// literal follows next: after wait it sends the same call again; after
	// do_not_retry or ask_human it tells the user and waits a turn or two,
	// until the user asks again and the turn is replayed, identical or
	// reworded.
	literal style = iota
	// adversarial trusts nothing but a success or a confirmation that the
	// email went: every turn it sends the email again, several copies at
	// once, identical, reordered, with cosmetic changes, and reworded.
	adversarial
)

func (s style) String() string { return [...]string{"literal", "adversarial"}[s] }

// intent is one email the user wants sent: one intended action.
type intent struct {
	to    string
	words []email // its wordings; the model starts with the first
	cur   int     // the wording the model used last
	fault fault
	done  bool
	hold  int // turns the model waits before it sends again
	calls []*call
}

// call is one tools/call the model made.
type call struct {
	intent  *intent
	turn    int
	kind    string // identical, reordered, cosmetic, reworded
	args    string
	lose    bool
	replica string
	env     envelope.Envelope
	err     error
}

// topics are the emails the model writes, each in a few wordings.
var topics = [][][2]string{
	{{"Lunch on Friday", "Shall we have lunch on Friday at noon?"}, {"Friday lunch", "Lunch this Friday, 12:00?"}, {"Lunch, Friday?", "Are you free for lunch on Friday?"}},
	{{"Invoice 1182", "Please find invoice 1182 attached."}, {"Your invoice (1182)", "Attached is invoice no. 1182."}, {"Invoice #1182", "Here is invoice 1182."}},
	{{"Meeting moved", "Tomorrow's meeting moves to 3pm."}, {"New time for tomorrow", "We meet at 15:00 tomorrow instead."}, {"Meeting at 3pm", "The meeting tomorrow is now at 3pm."}},
}

// newIntent makes the i-th email of a run.
func newIntent(rng *rand.Rand, seed uint64, i int, f fault) *intent {
	in := &intent{to: fmt.Sprintf("r%d-%d@example.com", seed, i), fault: f}
	for _, w := range topics[rng.IntN(len(topics))] {
		in.words = append(in.words, email{To: in.to, Subject: w[0], Body: w[1]})
	}
	return in
}

// args writes the intent's current wording as the model would, in one of
// a few forms of the same call.
func (in *intent) args(rng *rand.Rand, kind string) string {
	w := in.words[in.cur]
	switch kind {
	case "reordered": // the same call, its members in another order
		return fmt.Sprintf(`{"body":%q,"subject":%q,"to":%q}`, w.Body, w.Subject, w.To)
	case "cosmetic": // the same action, told apart by nothing the tool reads: another fingerprint
		w.To = strings.ToUpper(w.To[:1]) + w.To[1:]
		w.Subject = strings.Replace(w.Subject, " ", "  ", 1)
	case "reworded": // another email to the same person: another action to the tool
		in.cur = (in.cur + 1 + rng.IntN(len(in.words)-1)) % len(in.words)
		w = in.words[in.cur]
	}
	b, _ := json.Marshal(w)
	return string(b)
}

// plan returns the calls the model makes for the intent this turn.
//
// The model words the email anew when the tool told it that its own
// earlier call may be running or may have gone (unknown_outcome about one
// of its own actions): a reworded resend then waits for the earlier action
// and hears what became of it. It writes it anew too when the tool told it
// that its action was not done and will not be (replaced, or the first
// request of its key was not done). Otherwise another wording beside the
// first would be another email by any rule, so it sends copies of one
// call.
func (in *intent) plan(rng *rand.Rand, s style, turn int) []*call {
	if in.done {
		return nil
	}
	if in.hold > 0 {
		in.hold--
		return nil
	}
	unsure := in.unsure()
	kinds := []string{"identical"}
	switch {
	case in.refused():
		kinds[0] = "reworded" // the user asked again
	case s == literal && unsure && !asksToWait(in.lastAnswers()) && rng.IntN(2) == 0:
		kinds[0] = "reworded" // the user asked again; the turn is replayed and worded anew
	}
	// More copies in the same turn, spread over the replicas: a duplicated
	// tool call, or whatever the adversarial model adds. After it was told
	// its action was not done and will not be, the user's new request is
	// one request: its copies, not a second wording (with nothing unknown,
	// two wordings are two emails by any rule).
	switch {
	case s == literal && turn == 0 && rng.IntN(3) == 0:
		kinds = append(kinds, "reordered")
	case s == adversarial && unsure && !in.refused():
		kinds = append(kinds, "reworded")
		copies := []string{"identical", "reordered", "cosmetic", "reworded"}
		for range rng.IntN(2) {
			kinds = append(kinds, copies[rng.IntN(len(copies))])
		}
	case s == adversarial:
		copies := []string{"identical", "reordered", "cosmetic"}
		for range rng.IntN(3) {
			kinds = append(kinds, copies[rng.IntN(len(copies))])
		}
	}
	out := make([]*call, len(kinds))
	for i, k := range kinds {
		out[i] = &call{intent: in, turn: turn, kind: k, args: in.args(rng, k)}
	}
	return out
}

// unsure reports whether, in the intent's last turn, the tool answered
// unknown_outcome about one of the intent's own actions: the same action
// in progress, or its outcome unknown.
func (in *intent) unsure() bool {
	own := map[string]bool{}
	for _, c := range in.calls {
		if c.err == nil {
			own[c.env.RequestRef] = true
		}
	}
	for _, c := range in.lastAnswers() {
		if c.err != nil || c.env.Status != envelope.UnknownOutcome {
			continue
		}
		about := c.env.RequestRef
		if c.env.Earlier != nil {
			about = c.env.Earlier.RequestRef
		}
		if own[about] {
			return true
		}
	}
	return false
}

// refused reports whether, in the intent's last turn, the tool said that
// the intent's own action was not done and will not be: it was replaced
// by another, or the first request of its key was not done.
func (in *intent) refused() bool {
	for _, c := range in.lastAnswers() {
		if c.err != nil || c.env.Error == nil {
			continue
		}
		switch code := c.env.Error.Code; {
		case code == envelope.CodeReplaced:
			return true
		case code == envelope.CodeKeyReused && c.env.Earlier != nil && c.env.Earlier.State == envelope.ActionFailed:
			return true
		}
	}
	return false
}

// lastAnswers returns the calls of the intent's last turn.
func (in *intent) lastAnswers() []*call {
	if len(in.calls) == 0 {
		return nil
	}
	last := in.calls[len(in.calls)-1].turn
	var out []*call
	for _, c := range in.calls {
		if c.turn == last {
			out = append(out, c)
		}
	}
	return out
}

// asksToWait reports whether any answer of a turn asks the model to wait
// and call again, or gave it no envelope at all.
func asksToWait(calls []*call) bool {
	for _, c := range calls {
		if c.err != nil || c.env.Next == envelope.Wait {
			return true
		}
	}
	return false
}

// read updates what the model believes after a turn: which emails went,
// and, for the literal model, how long it waits before the next try.
func (r *run) read(turnCalls []*call) {
	for _, c := range turnCalls {
		if c.err != nil {
			continue
		}
		if c.env.Status == envelope.Success {
			r.doneTo(c.env.Result)
		}
		if e := c.env.Earlier; e != nil && e.State == envelope.ActionSucceeded {
			r.doneTo(e.Result) // "an earlier email was confirmed sent": the model reads which
		}
	}
	if r.style != literal {
		return
	}
	for _, in := range r.intents {
		if last := in.lastAnswers(); !in.done && len(last) > 0 && last[0].turn == r.turn && !asksToWait(last) {
			in.hold = 1 + r.rng.IntN(2) // it told the user; the user asks again later
		}
	}
}

// doneTo marks the email whose result names its recipient as sent.
func (r *run) doneTo(result json.RawMessage) {
	var s sent
	if json.Unmarshal(result, &s) != nil {
		return
	}
	for _, in := range r.intents {
		if recipient(in.to) == recipient(s.To) {
			in.done = true
		}
	}
}

// playTurn plays one turn: every planned call at once, spread by the
// round-robin client, the answers read when all are back.
func (r *run) playTurn(rr *roundRobin) {
	var calls []*call
	for _, in := range r.intents {
		for _, c := range in.plan(r.rng, r.style, r.turn) {
			c.lose = in.fault == lostAnswer && len(in.calls) == 0
			in.calls = append(in.calls, c)
			calls = append(calls, c)
		}
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() { c.env, c.replica, c.err = rr.call(r.principal, c.args, c.lose) })
	}
	wg.Wait()
	r.calls = append(r.calls, calls...)
	r.read(calls)
}
