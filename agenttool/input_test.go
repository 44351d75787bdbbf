package agenttool_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"sync"

	"math/big"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// seatBooking is a typed input with a pointer field and an optional one.
type seatBooking struct {
	Flight    string  `json:"flight"`
	Date      string  `json:"date"`
	Passenger string  `json:"passenger"`
	Seat      *string `json:"seat"`           // may be null
	Note      string  `json:"note,omitempty"` // optional
}

type bookingDesk struct {
	runs atomic.Int64
	seen atomic.Value // the last seatBooking the tool received
}

func (d *bookingDesk) book(_ context.Context, b seatBooking) (string, error) {
	d.runs.Add(1)
	d.seen.Store(b)
	return "BK-1", nil
}

func newBookingTool(t *testing.T, d *bookingDesk, store agenttool.Store, opts agenttool.Options) *agenttool.Tool {
	t.Helper()
	opts.Store, opts.Class = store, agenttool.Keyed
	tool, err := agenttool.New("book_flight", "Book a seat.", d.book, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func wantCode(t *testing.T, env envelope.Envelope, code string, mention string) {
	t.Helper()
	if env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != code || !strings.Contains(env.Error.Message, mention) {
		t.Errorf("envelope %s; want definite_failure %s mentioning %q", env, code, mention)
	}
}

// A typed tool reads member names exactly: encoding/json would match "To"
// and "ſubject" to To and Subject, and let a later member overwrite an
// earlier one, so that input the key saw one way would reach the tool
// another way.
func TestTypedInputIsReadStrictly(t *testing.T) {
	d := &bookingDesk{}
	store := memstore.New()
	tool := newBookingTool(t, d, store, agenttool.Options{})
	tests := []struct{ name, in, msg string }{
		{"upper-case name", `{"Flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`, `unknown field "Flight": the field is called "flight", exactly`},
		{"long s folds to s", `{"flight":"TP1234","date":"2026-12-12","paſſenger":"Ana Lima"}`, `the field is called "passenger"`},
		{"two names, one field", `{"flight":"TP1234","date":"2026-12-12","passenger":"x","Passenger":"Ana Lima"}`, `differ only in case`},
		{"null member added", `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima","PASSENGER":null}`, `differ only in case`},
		{"null for a string", `{"flight":"TP1234","date":"2026-12-12","passenger":null}`, `field "passenger" is null`},
		{"null for an optional string", `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima","note":null}`, `field "note" is null; leave it out`},
		{"missing required field", `{"flight":"TP1234","date":"2026-12-12"}`, `missing required field "passenger"`},
		{"empty required field", `{"flight":"TP1234","date":"2026-12-12","passenger":""}`, `required field "passenger" is empty`},
		{"white space only", `{"flight":"TP1234","date":"2026-12-12","passenger":" \u00a0\t"}`, `required field "passenger" is empty`},
		{"empty object", `{}`, `missing required field "flight"`},
		{"null", `null`, `not null`},
		{"unknown field", `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima","class":"business"}`, `unknown field "class": the fields are "flight", "date", "passenger", "seat", "note"`},
		{"wrong type", `{"flight":1234,"date":"2026-12-12","passenger":"Ana Lima"}`, `field "flight" must be a string, not a number`},
	}
	for _, tt := range tests {
		env := tool.Invoke(scoped(), tt.in)
		if env.Next != envelope.FixInput {
			t.Errorf("%s: next %s, want fix_input", tt.name, env.Next)
		}
		if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeInvalidInput || !strings.Contains(env.Error.Message, tt.msg) {
			t.Errorf("%s: %s; want invalid_input mentioning %q", tt.name, env, tt.msg)
		}
	}
	if d.runs.Load() != 0 || store.Len() != 0 {
		t.Fatalf("refused input ran the tool %d times and left %d records", d.runs.Load(), store.Len())
	}
}

// checkedSender is a wrapped tool that knows its own input's rules
// (agenttool.InputChecker): "to" must be a channel.
type checkedSender struct{ runs atomic.Int64 }

func (*checkedSender) Name() string        { return "send_message" }
func (*checkedSender) Description() string { return "Send a message." }
func (s *checkedSender) Call(context.Context, string) (string, error) {
	s.runs.Add(1)
	return `{"sent":true}`, nil
}
func (*checkedSender) CheckInput(input string) error {
	var in struct{ To string }
	if json.Unmarshal([]byte(input), &in) != nil || !strings.HasPrefix(in.To, "#") {
		return errors.New(`"to" must be a channel, such as "#team"`)
	}
	return nil
}

// A wrapped tool's own check of its input (an InputChecker: an MCP
// server's input schema) refuses before anything is claimed, as a typed
// tool's strict reading does: nothing recorded, nothing run, and the
// model's corrected call — the same identifying values, other details —
// is a new request, not one held back by the refused input's record.
func TestAWrappedToolsInputCheckRefusesBeforeAnyClaim(t *testing.T) {
	s := &checkedSender{}
	store := memstore.New()
	tool, err := agenttool.Wrap(s, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, IdentifyingFields: []string{"text"}})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), `{"to":"team","text":"Lunch at one?"}`)
	if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeInvalidInput || env.Next != envelope.FixInput ||
		!strings.Contains(env.Error.Message, "must be a channel") || env.RequestRef != "" {
		t.Errorf("an input the tool's check refuses: %s; want invalid_input, fix_input, its message, no request reference", env)
	}
	if s.runs.Load() != 0 || store.Len() != 0 {
		t.Fatalf("a refused input ran the tool %d times and left %d records", s.runs.Load(), store.Len())
	}
	if env := tool.Invoke(scoped(), `{"to":"#team","text":"Lunch at one?"}`); env.Status != envelope.Success {
		t.Errorf("the corrected call: %s, want success", env)
	}
	if s.runs.Load() != 1 {
		t.Errorf("%d runs, want 1", s.runs.Load())
	}
}

// checkedCommand is a wrapped tool that takes plain text and knows its
// own input's rules (agenttool.InputChecker): a command must start with
// "/".
type checkedCommand struct{ runs atomic.Int64 }

func (*checkedCommand) Name() string        { return "run_command" }
func (*checkedCommand) Description() string { return "Run a chat command." }
func (c *checkedCommand) Call(context.Context, string) (string, error) {
	c.runs.Add(1)
	return "done", nil
}
func (*checkedCommand) CheckInput(input string) error {
	if !strings.HasPrefix(input, "/") {
		return errors.New(`a command starts with "/", such as "/lunch one"`)
	}
	return nil
}

// A wrapped tool that takes plain text (Options.TextInput) is asked its
// check too, with the text it would receive: what it refuses is refused
// before any key is claimed, nothing recorded, nothing run.
func TestAWrappedTextToolsInputCheckRefusesBeforeAnyClaim(t *testing.T) {
	c := &checkedCommand{}
	store := memstore.New()
	tool, err := agenttool.Wrap(c, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, TextInput: true})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), "  lunch one  ")
	if env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != envelope.CodeInvalidInput ||
		!strings.Contains(env.Error.Message, "starts with") || env.RequestRef != "" {
		t.Errorf("a text the tool's check refuses: %s; want invalid_input, its message, no request reference", env)
	}
	if c.runs.Load() != 0 || store.Len() != 0 {
		t.Fatalf("a refused text ran the tool %d times and left %d records", c.runs.Load(), store.Len())
	}
	if env := tool.Invoke(scoped(), " /lunch one "); env.Status != envelope.Success || c.runs.Load() != 1 {
		t.Errorf("the corrected text: %s, %d runs; want success, one run", env, c.runs.Load())
	}
}

// A model calls in parallel: the first calls of a new tool, all with a
// misspelled field, are read strictly and alike by every one of them (the
// race detector checks the tool holds no state a call writes).
func TestTypedInputIsReadStrictlyInParallel(t *testing.T) {
	d := &bookingDesk{}
	tool := newBookingTool(t, d, memstore.New(), agenttool.Options{})
	var wg sync.WaitGroup
	envs := make([]envelope.Envelope, 16)
	for i := range envs {
		wg.Go(func() {
			envs[i] = tool.Invoke(scoped(), `{"Flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`)
		})
	}
	wg.Wait()
	for _, env := range envs {
		wantCode(t, env, envelope.CodeInvalidInput, `the field is called "flight", exactly`)
	}
	if d.runs.Load() != 0 {
		t.Fatalf("refused input ran the tool %d times", d.runs.Load())
	}
}

// The key and fingerprint follow the decoded value: inputs the tool cannot
// tell apart are one action, replayed, never run twice.
func TestKeyFollowsTheDecodedValue(t *testing.T) {
	d := &bookingDesk{}
	tool := newBookingTool(t, d, memstore.New(), agenttool.Options{})
	first := tool.Invoke(scoped(), `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`)
	mustStatus(t, first, envelope.Success)
	for _, in := range []string{
		`{"passenger":"Ana Lima","flight":"TP1234","date":"2026-12-12"}`,              // order
		` {"flight": "TP1234", "date": "2026-12-12", "passenger": "Ana Lima"}` + "\n", // spacing
		`{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima","seat":null}`,  // null pointer = absent
		`{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima","note":""}`,    // empty optional = absent
		`{"flight":"TP\u0031234","date":"2026-12-12","passenger":"Ana Lima"}`,         // an escape
	} {
		env := tool.Invoke(scoped(), in)
		if env.Status != envelope.Success || !env.Replayed || env.RequestRef != first.RequestRef {
			t.Errorf("%s: %s; want the first seatBooking replayed", in, env)
		}
	}
	if d.runs.Load() != 1 {
		t.Fatalf("one action ran %d times", d.runs.Load())
	}
}

// A cosmetic variant of an identifying value (case, spacing, a non-breaking
// space, full-width letters) meets the earlier action's key: refused as
// other input, never a second effect.
func TestCosmeticVariantsMeetOneKey(t *testing.T) {
	d := &bookingDesk{}
	tool := newBookingTool(t, d, memstore.New(), agenttool.Options{IdentifyingFields: []string{"flight", "date", "passenger"}})
	first := tool.Invoke(scoped(), `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`)
	mustStatus(t, first, envelope.Success)
	for _, passenger := range []string{"Ana Lima ", "Ana  Lima", "Ana\u00a0Lima", "ANA LIMA", "ana lima", "Ana Lima\\n", "\u200bAna Lima", "Ａｎａ Ｌｉｍａ"} {
		env := tool.Invoke(scoped(), `{"flight":"TP1234","date":"2026-12-12","passenger":"`+passenger+`"}`)
		if env.RequestRef != first.RequestRef {
			t.Errorf("%q got reference %s, want %s", passenger, env.RequestRef, first.RequestRef)
		}
		wantCode(t, env, envelope.CodeKeyReused, "different input")
		if env.Earlier == nil || env.Earlier.State != envelope.ActionSucceeded || env.Earlier.RequestRef != first.RequestRef {
			t.Errorf("%q: the refusal does not say the earlier seatBooking succeeded: %s", passenger, env)
		}
	}
	// Another passenger is another action.
	mustStatus(t, tool.Invoke(scoped(), `{"flight":"TP1234","date":"2026-12-12","passenger":"Rui Lima"}`), envelope.Success)
	if d.runs.Load() != 2 {
		t.Fatalf("the tool ran %d times, want 2", d.runs.Load())
	}
}

// A field whose case matters opts out of the loose form: by option or by tag.
func TestExactFieldsCompareExactly(t *testing.T) {
	type reset struct {
		Code string `json:"code" retrysafe:"exact"`
		User string `json:"user"`
	}
	runs := 0
	fn := func(context.Context, reset) (string, error) { runs++; return "ok", nil }
	tagged, err := agenttool.New("reset", "", fn, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	if err != nil {
		t.Fatal(err)
	}
	byOption, err := agenttool.New("reset", "", fn, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed,
		IdentifyingFields: []string{"code", "user"}, ExactFields: []string{"code"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []*agenttool.Tool{tagged, byOption} {
		a := tool.Invoke(scoped(), `{"code":"aB3x","user":"ana"}`)
		b := tool.Invoke(scoped(), `{"code":"Ab3X","user":"ana"}`)
		c := tool.Invoke(scoped(), `{"code":"aB3x","user":"ANA"}`) // user is still loose
		mustStatus(t, a, envelope.Success)
		mustStatus(t, b, envelope.Success)
		if a.RequestRef == b.RequestRef {
			t.Errorf("codes that differ in case share a key")
		}
		if c.RequestRef != a.RequestRef {
			t.Errorf("a loose field compared exactly: %s vs %s", c.RequestRef, a.RequestRef)
		}
	}
	if runs != 4 {
		t.Errorf("runs = %d, want 4", runs)
	}
}

// Empty identifying values say nothing about the action: refused, nothing
// stored.
func TestEmptyIdentifyingValuesAreMissing(t *testing.T) {
	var seen []string
	store := memstore.New()
	tool, err := agenttool.Wrap(recordingTool{seen: &seen}, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"to"}})
	if err != nil {
		t.Fatal(err)
	}
	type optional struct {
		To      string `json:"to,omitempty"`
		Subject string `json:"subject,omitempty"`
	}
	plain, err := agenttool.New("send_email", "", func(_ context.Context, in optional) (string, error) {
		seen = append(seen, in.To)
		return "", nil
	}, agenttool.Options{Store: store, Class: agenttool.Keyed})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{`{"to":null}`, `{"to":""}`, `{"to":"  "}`, `{"to":[]}`, `{"to":{}}`, `{"subject":"x"}`} {
		wantCode(t, tool.Invoke(scoped(), in), envelope.CodeInvalidInput, `missing field "to"`)
	}
	for _, in := range []string{`{}`, `{"to":"","subject":" "}`} {
		wantCode(t, plain.Invoke(scoped(), in), envelope.CodeInvalidInput, "the input is empty")
	}
	if len(seen) != 0 || store.Len() != 0 {
		t.Fatalf("empty input ran the tool %d times and left %d records", len(seen), store.Len())
	}
}

// A wrapped tool gets one JSON object, in the canonical form that was
// digested; names that differ only in case are refused, and a name's case
// does not make a new action.
func TestWrappedToolInput(t *testing.T) {
	var seen []string
	store := memstore.New()
	tool, err := agenttool.Wrap(recordingTool{seen: &seen}, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"to"}})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, tool.Invoke(scoped(), `[{"to":"ana@example.com"}]`), envelope.CodeInvalidInput, "not an array")
	wantCode(t, tool.Invoke(scoped(), `{"to":"x1","To":"eve@example.com"}`), envelope.CodeInvalidInput, "differ only in case")
	wantCode(t, tool.Invoke(scoped(), `{"a":{"b":1,"B":2}}`), envelope.CodeInvalidInput, `"a.B" and "a.b" differ only in case`)
	if len(seen) != 0 {
		t.Fatalf("refused input reached the tool: %q", seen)
	}
	a := tool.Invoke(scoped(), ` {"to": "ana@example.com", "subject":"Lunch"} `)
	mustStatus(t, a, envelope.Success)
	if len(seen) != 1 || seen[0] != `{"subject":"Lunch","to":"ana@example.com"}` {
		t.Errorf("the tool received %q, want the canonical form", seen)
	}
	b := tool.Invoke(scoped(), `{"To":"ana@example.com","subject":"Lunch"}`)
	if b.RequestRef != a.RequestRef {
		t.Errorf("a member name's case made a new action: %s vs %s", b.RequestRef, a.RequestRef)
	}
	wantCode(t, b, envelope.CodeKeyReused, "different input")
	if len(seen) != 1 {
		t.Fatalf("the tool ran %d times for one action", len(seen))
	}
}

// Key-like members are found at any depth and under any disguise; a value
// that is a request reference of the tool is a key too.
func TestKeyLikeFieldsAreFoundInDisguise(t *testing.T) {
	m := &mailServer{}
	store := memstore.New()
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable})
	var seen []string
	wrapped, err := agenttool.Wrap(recordingTool{seen: &seen}, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"to"}})
	if err != nil {
		t.Fatal(err)
	}
	first := wrapped.Invoke(scoped(), `{"to":"ana@example.com"}`)
	for _, in := range []string{
		`{"to":"a@x","subject":"s","meta":{"idempotency_key":"k"}}`,
		`{"to":"a@x","subject":"s","idempotency key":"k"}`,
		`{"to":"a@x","subject":"s","idempotency_key ":"k"}`,
		`{"to":"a@x","subject":"s","ıdempotency_key":"k"}`,
		`{"to":"a@x","subject":"s","ｉｄｅｍｐｏｔｅｎｃｙ＿ｋｅｙ":"k"}`,
		`{"to":"a@x","subject":"s","idempotency\u200b_key":"k"}`,
		`{"to":"a@x","subject":"s","idеmpotency_key":"k"}`, // Cyrillic е
		`{"to":"a@x","subject":"s","IdempotencyKeyValue":"k"}`,
		`{"to":"a@x","subject":"s","items":[{"dedupe_id":"k"}]}`,
		`{"to":"a@x","subject":"s","Request-ID":"k"}`,
	} {
		for _, tl := range []*agenttool.Tool{tool, wrapped} {
			env := tl.Invoke(scoped(), in)
			if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeModelSuppliedKey {
				t.Errorf("%s: %s; want model_supplied_key", in, env)
			}
		}
	}
	for _, in := range []string{
		`{"to":"ana@example.com","ref":"` + first.RequestRef + `"}`,
		`{"to":"ana@example.com","notes":["` + strings.ToUpper(first.RequestRef) + ` "]}`,
	} {
		wantCode(t, wrapped.Invoke(scoped(), in), envelope.CodeModelSuppliedKey, "request reference")
	}
	wantCode(t, tool.Invoke(scoped(), "\ufeff"+emailToAna), envelope.CodeInvalidInput, "byte-order mark")
	if m.runs.Load() != 0 || len(seen) != 1 {
		t.Fatalf("refused input ran the tools %d and %d times", m.runs.Load(), len(seen)-1)
	}
}

// Under StripModelKeys, key-like members are removed at every depth before
// anything is digested or handed to the tool.
func TestStripModelKeysAtAnyDepth(t *testing.T) {
	var seen []string
	tool, err := agenttool.Wrap(recordingTool{seen: &seen}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, ModelKeys: agenttool.StripModelKeys,
		IdentifyingFields: []string{"to"}})
	if err != nil {
		t.Fatal(err)
	}
	keyed := tool.Invoke(scoped(), `{"to":"ana@example.com","Idempotency-Key":"model-1","meta":{"tag":"x","request_id":"model-2"}}`)
	mustStatus(t, keyed, envelope.Success)
	if len(seen) != 1 || seen[0] != `{"meta":{"tag":"x"},"to":"ana@example.com"}` {
		t.Fatalf("the tool received %q; want the input without the model's keys", seen)
	}
	plain := tool.Invoke(scoped(), `{"to":"ana@example.com","meta":{"tag":"x"}}`)
	if plain.RequestRef != keyed.RequestRef || !plain.Replayed {
		t.Errorf("without the model's keys: %s; want the keyed call replayed", plain)
	}
}

// Options that could only be blamed on the model at run time are refused
// when the tool is built.
func TestConstructionRefusesTraps(t *testing.T) {
	store := memstore.New()
	d := &bookingDesk{}
	type withKey struct {
		To       string `json:"to"`
		ClientID string `json:"client_token"`
	}
	keyFn := func(context.Context, withKey) (string, error) { return "", nil }
	tests := []struct {
		name string
		err  func() error
		msg  string
	}{
		{"Go name as identifying field", func() error {
			_, err := agenttool.New("book_flight", "", d.book, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"Passenger"}})
			return err
		}, `the JSON name of that field is "passenger"`},
		{"no such field", func() error {
			_, err := agenttool.New("book_flight", "", d.book, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"route"}})
			return err
		}, `"route", which is not a JSON field`},
		{"optional identifying field", func() error {
			_, err := agenttool.New("book_flight", "", d.book, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"note"}})
			return err
		}, `identifying field "note" is optional`},
		{"key-like input field", func() error {
			_, err := agenttool.New("x", "", keyFn, agenttool.Options{Store: store, Class: agenttool.Keyed})
			return err
		}, `input field "client_token" looks like an idempotency key`},
		{"name function calling rejects", func() error {
			_, err := agenttool.New("bad name!", "", d.book, agenttool.Options{Store: store, Class: agenttool.Keyed})
			return err
		}, "letters, digits"},
		{"header injection in the prefix", func() error {
			_, err := agenttool.New("book_flight", "", d.book, agenttool.Options{Store: store, Class: agenttool.Keyed, KeyPrefix: "bad\r\nX-Injected: 1"})
			return err
		}, "HTTP headers"},
		{"TextInput on a typed tool", func() error {
			_, err := agenttool.New("book_flight", "", d.book, agenttool.Options{Store: store, Class: agenttool.Keyed, TextInput: true})
			return err
		}, "TextInput is for wrapped tools"},
		{"a reconcilable tool nothing can ask", func() error {
			_, err := agenttool.New("book_flight", "", d.book, agenttool.Options{Store: store, Class: agenttool.Reconcilable})
			return err
		}, "needs a Reconciler"},
		{"a wrapped tool without identifying fields", func() error {
			_, err := agenttool.Wrap(recordingTool{}, agenttool.Options{Store: store, Class: agenttool.Keyed})
			return err
		}, "a wrapped tool needs IdentifyingFields"},
		{"an input bound below zero", func() error {
			_, err := agenttool.New("book_flight", "", d.book, agenttool.Options{Store: store, Class: agenttool.Keyed, MaxInput: -1})
			return err
		}, "MaxInput -1 is not between 1 and"},
		{"an identifying value larger than the input", func() error {
			_, err := agenttool.New("book_flight", "", d.book, agenttool.Options{Store: store, Class: agenttool.Keyed, MaxInput: 1000, MaxIdentifyingValue: 2000})
			return err
		}, "MaxIdentifyingValue 2000 is not between 1 and MaxInput (1000)"},
		{"a type that decodes itself but does not encode itself", func() error {
			type in struct {
				To decodeOnly `json:"to"`
			}
			_, err := agenttool.New("x", "", func(context.Context, in) (string, error) { return "", nil }, agenttool.Options{Store: store, Class: agenttool.Keyed})
			return err
		}, "does not encode itself"},
	}
	for _, tt := range tests {
		err := tt.err()
		if !errors.Is(err, agenttool.ErrInvalidOptions) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v; want ErrInvalidOptions mentioning %q", tt.name, err, tt.msg)
		}
	}
	// Identifying fields are required fields, and the schema the model sees
	// says so; pointers are optional.
	tool := newBookingTool(t, d, store, agenttool.Options{IdentifyingFields: []string{"flight", "passenger"}})
	if s := string(tool.Schema()); !strings.Contains(s, `"required":["flight","date","passenger"]`) {
		t.Errorf("schema %s does not list the required fields", s)
	}
	_, err := agenttool.New("book_flight", "", d.book, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"seat"}})
	if !errors.Is(err, agenttool.ErrInvalidOptions) || !strings.Contains(err.Error(), `identifying field "seat" is optional`) {
		t.Errorf("an optional pointer as identifying field: %v", err)
	}
}

// DefaultScope is copied when the tool is built: changing the caller's
// value later changes no key.
func TestDefaultScopeIsFixedAtConstruction(t *testing.T) {
	m := &mailServer{}
	scope := &agenttool.Scope{Principal: "batch-job", Session: "nightly"}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, DefaultScope: scope})
	a := tool.Invoke(context.Background(), emailToAna)
	scope.Session = "changed"
	b := tool.Invoke(context.Background(), emailToAna)
	if a.RequestRef != b.RequestRef || !b.Replayed || m.runs.Load() != 1 {
		t.Errorf("changing the DefaultScope after construction changed the action: %s then %s", a, b)
	}
}

// Tools that share a key prefix never share a key: a refund is not answered
// with the charge's outcome.
func TestToolsSharingAPrefixNeverShareAKey(t *testing.T) {
	store := memstore.New()
	type amount struct {
		Order string `json:"order"`
		Cents int    `json:"cents"`
	}
	var charged, refunded int
	charge, err := agenttool.New("charge", "", func(context.Context, amount) (string, error) { charged++; return "charged", nil },
		agenttool.Options{Store: store, Class: agenttool.Keyed, KeyPrefix: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	refund, err := agenttool.New("refund", "", func(context.Context, amount) (string, error) { refunded++; return "refunded", nil },
		agenttool.Options{Store: store, Class: agenttool.Keyed, KeyPrefix: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	in := `{"order":"A-1","cents":1200}`
	c := charge.Invoke(scoped(), in)
	r := refund.Invoke(scoped(), in)
	mustStatus(t, c, envelope.Success)
	mustStatus(t, r, envelope.Success)
	if r.Replayed || r.Tool != "refund" || c.RequestRef == r.RequestRef || charged != 1 || refunded != 1 {
		t.Errorf("charge %s, refund %s; charged %d, refunded %d", c, r, charged, refunded)
	}
}

// decodeOnly reads itself from JSON but has no way to write itself back.
type decodeOnly struct{ v string }

func (d *decodeOnly) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &d.v) }

type MailOptions struct {
	ReplyTo *string `json:"reply_to"` // optional: null or absent means none
}

type emailWithOptions struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	*MailOptions
}

// A null for an optional field of an embedded pointer struct is absent: the
// same email, one key.
//
// With an embedded pointer struct, an added "null" for an optional
// pointer field (documented as "null pointer = absent") allocates the
// embedded struct; the re-encoded value differs, so the key differs and the
// same email goes out twice.
func TestInput_NullForAnEmbeddedPointerFieldIsAbsent(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	send := func(ctx context.Context, in emailWithOptions) (string, error) {
		replyTo := ""
		if in.MailOptions != nil && in.ReplyTo != nil {
			replyTo = *in.ReplyTo
		}
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, in.To+"|"+in.Subject+"|"+replyTo)
		return "ok", nil
	}
	tool, err := agenttool.New("send_email", "Send an email.", send, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce})
	if err != nil {
		t.Fatal(err)
	}
	a := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch"}`)
	b := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch","reply_to":null}`)
	t.Logf("a: %s\nb: %s", a, b)
	if len(sent) > 1 {
		t.Fatalf("the tool saw %q: the same email twice (refs %s, %s)", sent, a.RequestRef, b.RequestRef)
	}
}

// Invisible characters of every kind are cosmetic: they never make a new key.
//
// Invisible characters that are not Unicode category Cf (variation
// selectors, the combining grapheme joiner, Hangul fillers) and a Cf that
// blocks NFKC composition until it is dropped make a new key: the
// "cosmetic variant" runs as a second action.
func TestInput_InvisibleCharactersAreCosmetic(t *testing.T) {
	type pair struct{ name, base, variant string }
	for _, p := range []pair{
		{"zero-width space (control: documented as handled)", "Lunch", "Lun\u200bch"},
		{"variation selector-16 after an emoji", "Lunch \u2615", "Lunch \u2615\ufe0f"},
		{"combining grapheme joiner U+034F", "Lunch", "Lun\u034fch"},
		{"Mongolian free variation selector U+180B", "Lunch", "Lunch\u180b"},
		{"Hangul filler U+3164", "Lunch", "Lunch\u3164"},
		{"Hangul choseong filler U+115F", "Lunch", "Lunch\u115f"},
		{"ZWSP between e and combining acute (Jose\u200b\u0301 vs José)", "Lunch with José", "Lunch with Jose\u200b\u0301"},
		{"ideographic variation selector U+E0100", "Lunch", "Lunch\U000e0100"},
		{"trailing NUL (Cc)", "Lunch", "Lunch\u0000"},
	} {
		m := &mailServer{}
		tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce})
		in := func(subject string) string {
			b, _ := json.Marshal(emailInput{To: "ana@example.com", Subject: subject, Body: "See you at noon."})
			return string(b)
		}
		first := tool.Invoke(scoped(), in(p.base))
		mustStatus(t, first, envelope.Success)
		again := tool.Invoke(scoped(), in(p.variant))
		if m.count() != 1 {
			t.Errorf("%s: subject %+q then %+q: ran again (%s vs %s), %d emails", p.name, p.base, p.variant, first.RequestRef, again.RequestRef, m.count())
		} else {
			t.Logf("%s: held (%s)", p.name, again.Error.Code)
		}
	}
}

// jsonMailer is an ordinary langchaingo tool: it reads its input with
// encoding/json into a struct, as almost every Go tool does.
type jsonMailer struct {
	mu   *sync.Mutex
	sent *[]string
}

func (jsonMailer) Name() string        { return "send_email" }
func (jsonMailer) Description() string { return "Send an email." }
func (j jsonMailer) Call(ctx context.Context, in string) (string, error) {
	var e struct {
		To      string `json:"to"`
		Subject string `json:"subject"`
	}
	if err := json.Unmarshal([]byte(in), &e); err != nil {
		return "", envelope.MarkDefinite(err, "invalid_input")
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	*j.sent = append(*j.sent, e.To+"|"+e.Subject)
	return `{"ok":true}`, nil
}

// A wrapped tool's key ignores what the model adds that the tool ignores.
//
// For a wrapped tool, model-chosen content the tool ignores (a null
// member, an unlisted "nonce", an idempotency key spelled with a lookalike
// letter the skeleton does not map) makes a new request_ref, and the same
// email goes out again.
func TestInput_WrappedToolKeyIgnoresWhatTheModelAdds(t *testing.T) {
	for _, variant := range []string{
		`{"to":"ana@example.com","subject":"Lunch","cc":null}`,
		`{"to":"ana@example.com","subject":"Lunch","nonce":"2"}`,
		`{"to":"ana@example.com","subject":"Lunch","ɪdempotency_key":"retry-2"}`, // U+026A LATIN LETTER SMALL CAPITAL I
		`{"to":"ana@example.com","subject":"Lunch","idempօtency_key":"retry-2"}`, // U+0585 ARMENIAN SMALL LETTER OH
		`{"to":"ana@example.com","subject":"Lunch","rеquest_іd":"retry-2"}`,      // Cyrillic е, і: caught? (control)
	} {
		var mu sync.Mutex
		var sent []string
		tool, err := agenttool.Wrap(jsonMailer{&mu, &sent}, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce,
			IdentifyingFields: []string{"to", "subject"}})
		if err != nil {
			t.Fatal(err)
		}
		first := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch"}`)
		mustStatus(t, first, envelope.Success)
		again := tool.Invoke(scoped(), variant)
		if len(sent) > 1 {
			t.Errorf("%s\n  -> %s\n  the tool saw %q: one action sent %d times", variant, again, sent, len(sent))
		} else {
			t.Logf("held: %s -> %s", variant, again.Error)
		}
	}
}

// addr is a well-behaved custom type: it reads and writes itself as a JSON
// string, with both methods on the pointer receiver (the usual style).
type addr struct{ a string }

func (x *addr) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &x.a) }
func (x *addr) MarshalJSON() ([]byte, error) { return json.Marshal(x.a) }

type addrEmail struct {
	To      addr   `json:"to"`
	Subject string `json:"subject"`
}

// A field type with pointer-receiver marshalers keys by its value: two
// recipients, two keys.
//
// Before, two different recipients got one key and one fingerprint, so the
// email to bob is "replayed" as a success although bob got nothing.
func TestInput_KeyUsesPointerReceiverMarshalers(t *testing.T) {
	var mu sync.Mutex
	var delivered []string
	send := func(ctx context.Context, in addrEmail) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, in.To.a)
		return "sent to " + in.To.a, nil
	}
	tool, err := agenttool.New("send_email", "Send an email.", send, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce})
	if err != nil {
		t.Fatal(err)
	}
	ana := tool.Invoke(scoped(), `{"to":"ana@example.com","subject":"Lunch"}`)
	bob := tool.Invoke(scoped(), `{"to":"bob@example.com","subject":"Lunch"}`)
	t.Logf("ana: %s", ana)
	t.Logf("bob: %s", bob)
	t.Logf("delivered: %v", delivered)
	mustStatus(t, ana, envelope.Success)
	if bob.Status == envelope.Success && len(delivered) == 1 {
		t.Fatalf("envelope says success for bob, but only %v was delivered (same ref %s for both)", delivered, bob.RequestRef)
	}
}

type transfer struct {
	To     string  `json:"to"`
	Amount big.Int `json:"amount"`
}

// Big integers of different values get different keys.
//
// Before, a standard-library type (math/big.Int, pointer-receiver
// MarshalJSON) as a value field: 100 and 1000000 got one key and one
// fingerprint.
func TestInput_KeyTellsBigIntsApart(t *testing.T) {
	var mu sync.Mutex
	var paid []string
	pay := func(ctx context.Context, in transfer) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		paid = append(paid, in.Amount.String())
		return "paid " + in.Amount.String(), nil
	}
	tool, err := agenttool.New("pay", "Pay.", pay, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce})
	if err != nil {
		t.Fatal(err)
	}
	small := tool.Invoke(scoped(), `{"to":"ana","amount":100}`)
	large := tool.Invoke(scoped(), `{"to":"ana","amount":1000000}`)
	t.Logf("100: %s", small)
	t.Logf("1000000: %s", large)
	if large.Status == envelope.Success && len(paid) == 1 {
		t.Fatalf("success for 1000000 but only %v was paid; refs %s / %s", paid, small.RequestRef, large.RequestRef)
	}
}

// An input larger than the tool's bound, or an identifying value larger
// than its own, is refused with a message the model can act on
// (invalid_input); the tool does not run and nothing is stored. The
// defaults are 1 MiB and 64 KiB; both are set per tool. A value that does
// not identify the action is bounded by the input alone.
func TestInputBeyondTheBoundsIsRefusedAndNothingStored(t *testing.T) {
	store := memstore.New()
	m := &mailServer{}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed})
	fewer := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"to"}})
	small := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed, MaxInput: 4096, MaxIdentifyingValue: 100})
	var seen []string
	text, err := agenttool.Wrap(recordingTool{seen: &seen}, agenttool.Options{Store: store, Class: agenttool.Keyed, TextInput: true})
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := agenttool.Wrap(recordingTool{seen: &seen}, agenttool.Options{Store: store, Class: agenttool.Keyed, IdentifyingFields: []string{"to"}})
	if err != nil {
		t.Fatal(err)
	}
	email := func(to, body string) string {
		b, _ := json.Marshal(emailInput{To: to, Subject: "Lunch", Body: body})
		return string(b)
	}
	huge := strings.Repeat("\ufdfa", agenttool.DefaultMaxInput/3+1)
	names := func(size int) string { // members named in U+FDFA, of size bytes in all
		var b strings.Builder
		for i := 0; size > 0; i++ {
			name := strconv.Itoa(i) + strings.Repeat("\ufdfa", 100)
			size -= len(name)
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(strconv.Quote(name) + `:"x"`)
		}
		return b.String()
	}
	for _, tt := range []struct {
		name  string
		tool  *agenttool.Tool
		input string
		says  string
	}{
		{"an input past 1 MiB", tool, email("ana@example.com", huge), "and this tool takes at most 1048576; send a shorter input"},
		{"an input past 1 MiB, not even JSON", tool, huge, "and this tool takes at most 1048576"},
		{"an identifying value past 64 KiB", tool, email("ana@example.com", strings.Repeat("x", 64<<10+1)), `the value of "body" is longer than this tool takes (at most 65536 bytes`},
		{"an identifying value past 64 KiB in U+FDFA", tool, email(strings.Repeat("\ufdfa", 64<<10/3+1), "hi"), `the value of "to" is longer`},
		{"an identifying field's value past 64 KiB", fewer, email(strings.Repeat("a", 64<<10)+"@example.com", "hi"), `the value of "to" is longer`},
		{"a smaller input bound", small, email("ana@example.com", strings.Repeat("x", 4096)), "at most 4096"},
		{"a smaller identifying bound", small, email(strings.Repeat("a", 101), "hi"), "at most 100 bytes"},
		{"a text past 64 KiB", text, strings.Repeat("send it ", 64<<10/8+1), "and this tool takes at most 65536"},
		{"member names beyond ASCII past 64 KiB in all", wrapped, `{"to":"ana@example.com","meta":{` + names(64<<10) + `}}`,
			"member names with characters beyond ASCII come to more than 65536 bytes in all"},
	} {
		wantCode(t, tt.tool.Invoke(scoped(), tt.input), envelope.CodeInvalidInput, tt.says)
	}
	if m.runs.Load() != 0 || len(seen) != 0 || store.Len() != 0 {
		t.Fatalf("input beyond the bounds ran the tool %d times and left %d records", m.runs.Load()+int64(len(seen)), store.Len())
	}
	// Up to the bounds, calls run: a body that does not identify the
	// action may be as large as the input allows.
	mustStatus(t, fewer.Invoke(scoped(), email("ana@example.com", strings.Repeat("x", 900<<10))), envelope.Success)
	mustStatus(t, tool.Invoke(scoped(), email("bo@example.com", strings.Repeat("x", 64<<10))), envelope.Success)
	mustStatus(t, small.Invoke(scoped(), email(strings.Repeat("c", 100), "hi")), envelope.Success)
	mustStatus(t, wrapped.Invoke(scoped(), `{"to":"cy@example.com","meta":{`+names(64<<10-400)+`}}`), envelope.Success)
}

// What one call costs is bounded by its input (docs/performance.md,
// "Where a call's time goes"), also for a parameter whose type parses numbers in
// exponent form: the key follows the value the tool receives, which is
// encoded again, and *big.Float writes "1e1000000" out digit by digit. A
// 40-byte input must not cost more than the documented cost of an
// identifying value at its 64 KiB bound (about 8 MB); with an exponent of
// nine digits, which the input's JSON allows, the same call would take
// days.
func TestInputCostIsBoundedForANumberInExponentForm(t *testing.T) {
	type charge struct {
		Card   string     `json:"card"`
		Amount *big.Float `json:"amount"`
	}
	tool, err := agenttool.New("charge_card", "", func(_ context.Context, c charge) (string, error) { return "ok", nil },
		agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, tool.Invoke(scoped(), `{"card":"4242","amount":"12.50"}`), envelope.Success)
	input := `{"card":"4242","amount":"1e1000000"}`
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	env := tool.Invoke(scoped(), input)
	runtime.ReadMemStats(&after)
	if mb := float64(after.TotalAlloc-before.TotalAlloc) / 1e6; mb > 8 {
		t.Errorf("a call with an input of %d bytes allocated %.1f MB (%s): more than an identifying value at its bound costs",
			len(input), mb, env.Status)
	}
}

// A refusal never hides a record: an input the store already holds for
// the action (done before the check refused it — a server's schema that
// changed, a version without the check) is replayed as any repeat is,
// not answered as though nothing had been done, which would invite the
// model to do it again another way.
func TestAnInputCheckNeverHidesARecordedAction(t *testing.T) {
	s := &checkedSender{}
	store := memstore.New()
	opts := agenttool.Options{Store: store, Class: agenttool.AtMostOnce, IdentifyingFields: []string{"text"}}
	before, err := agenttool.Wrap(plainSender{s}, opts) // the same tool before it checked its input
	if err != nil {
		t.Fatal(err)
	}
	first := before.Invoke(scoped(), `{"to":"team","text":"Lunch at one?"}`)
	if first.Status != envelope.Success || s.runs.Load() != 1 {
		t.Fatalf("the first call, before the check: %s (%d runs)", first, s.runs.Load())
	}
	checked, err := agenttool.Wrap(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	again := checked.Invoke(scoped(), `{"to":"team","text":"Lunch at one?"}`)
	if again.Status != envelope.Success || !again.Replayed || again.RequestRef != first.RequestRef || s.runs.Load() != 1 {
		t.Errorf("the same call once the check refuses its input: %s (%d runs); want the recorded success replayed, nothing run", again, s.runs.Load())
	}
	if other := checked.Invoke(scoped(), `{"to":"team","text":"Lunch at two?"}`); other.Status != envelope.DefiniteFailure || other.Error.Code != envelope.CodeInvalidInput {
		t.Errorf("another input the check refuses: %s; want invalid_input", other)
	}
}

// plainSender is a checkedSender without its check.
type plainSender struct{ s *checkedSender }

func (p plainSender) Name() string        { return p.s.Name() }
func (p plainSender) Description() string { return p.s.Description() }
func (p plainSender) Call(ctx context.Context, in string) (string, error) {
	return p.s.Call(ctx, in)
}
