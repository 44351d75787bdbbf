package envelope_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
)

func TestMarshalIsCompactAndOrdered(t *testing.T) {
	e := envelope.Envelope{
		Version:    envelope.Version,
		Status:     envelope.Success,
		Tool:       "send_email",
		RequestRef: "send_email/abc",
		Attempts:   2,
		Result:     json.RawMessage(`{"id":"<m1@x>"}`),
		Next:       envelope.Continue,
	}
	got, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":2,"status":"success","tool":"send_email","request_ref":"send_email/abc","attempts":2,"result":{"id":"<m1@x>"},"next":"continue"}`
	if string(got) != want {
		t.Errorf("Marshal =\n%s\nwant\n%s", got, want)
	}
}

func TestParseRoundTrip(t *testing.T) {
	in := `{"version":1,"status":"unknown_outcome","tool":"book_flight","request_ref":"book_flight/x",` +
		`"attempts":1,"error":{"code":"outcome_unknown","message":"timeout"},"next":"do_not_retry","note":"It may be booked."}`
	e, err := envelope.Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if e.Status != envelope.UnknownOutcome || e.Error.Code != envelope.CodeOutcomeUnknown || e.Next != envelope.DoNotRetry {
		t.Errorf("parsed %+v", e)
	}
	out, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("round trip changed the envelope:\n%s\n%s", in, out)
	}
}

func TestEarlierRoundTrip(t *testing.T) {
	in := `{"version":1,"status":"definite_failure","tool":"send_email","request_ref":"send_email/b","attempts":0,` +
		`"error":{"code":"earlier_action_applied","message":"m"},` +
		`"earlier":{"request_ref":"send_email/a","state":"succeeded","result":{"id":"<m1@x>"}},"next":"ask_human"}`
	e, err := envelope.Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if e.Earlier == nil || e.Earlier.State != envelope.ActionSucceeded || e.Earlier.RequestRef != "send_email/a" {
		t.Fatalf("parsed earlier = %+v", e.Earlier)
	}
	out, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("round trip changed the envelope:\n%s\n%s", in, out)
	}
	var std bytes.Buffer
	enc := json.NewEncoder(&std)
	enc.SetEscapeHTML(false)
	enc.Encode(e)
	if !bytes.Equal(bytes.TrimSuffix(std.Bytes(), []byte("\n")), out) {
		t.Errorf("Marshal differs from encoding/json:\n%s\n%s", out, std.String())
	}
}

func TestParseRefusesInconsistentEnvelopes(t *testing.T) {
	tests := []struct{ name, in, msg string }{
		{"not json", `{`, "invalid envelope"},
		{"null", `null`, "version 0"},
		{"newer version", `{"version":3,"status":"success","tool":"t","attempts":1,"next":"continue"}`, "version 3"},
		{"retry_after in version 1", `{"version":1,"status":"unknown_outcome","tool":"t","attempts":0,"error":{"code":"in_progress","message":""},"retry_after":5,"next":"wait"}`, "field of version 2"},
		{"retry_after on a success", `{"version":2,"status":"success","tool":"t","attempts":1,"retry_after":5,"next":"continue"}`, "carries retry_after"},
		{"negative retry_after", `{"version":2,"status":"unknown_outcome","tool":"t","attempts":0,"error":{"code":"in_progress","message":""},"retry_after":-1,"next":"wait"}`, "negative"},
		{"unknown status", `{"version":1,"status":"done","tool":"t","attempts":1,"next":"continue"}`, `status "done"`},
		{"unknown next", `{"version":1,"status":"success","tool":"t","attempts":1,"next":"retry"}`, `next "retry"`},
		{"success with error", `{"version":1,"status":"success","tool":"t","attempts":1,"error":{"code":"x","message":""},"next":"continue"}`, "carries an error"},
		{"failure without error", `{"version":1,"status":"definite_failure","tool":"t","attempts":1,"next":"fix_input"}`, "needs an error"},
		{"failure with result", `{"version":1,"status":"definite_failure","tool":"t","attempts":1,"result":1,"error":{"code":"x","message":""},"next":"fix_input"}`, "carries a result"},
		{"unknown field", `{"version":1,"status":"success","tool":"t","attempts":1,"next":"continue","key":"k"}`, "unknown field"},
		{"trailing data", `{"version":1,"status":"success","tool":"t","attempts":1,"next":"continue"} {}`, "after the envelope"},
		{"no tool", `{"version":1,"status":"success","tool":"","attempts":1,"next":"continue"}`, "tool is empty"},
		{"earlier without state", `{"version":1,"status":"definite_failure","tool":"t","attempts":0,"error":{"code":"x","message":""},"earlier":{"request_ref":"t/a","state":""},"next":"ask_human"}`, "earlier needs"},
		{"earlier with an unknown state", `{"version":1,"status":"definite_failure","tool":"t","attempts":0,"error":{"code":"x","message":""},"earlier":{"request_ref":"t/a","state":"done"},"next":"ask_human"}`, "earlier needs"},
		{"earlier result of a failure", `{"version":1,"status":"definite_failure","tool":"t","attempts":0,"error":{"code":"x","message":""},"earlier":{"request_ref":"t/a","state":"failed","result":1},"next":"ask_human"}`, "earlier carries a result"},
	}
	for _, tt := range tests {
		_, err := envelope.Parse([]byte(tt.in))
		if !errors.Is(err, envelope.ErrInvalid) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: Parse error = %v, want ErrInvalid mentioning %q", tt.name, err, tt.msg)
		}
	}
}

func TestSchemaNamesEveryField(t *testing.T) {
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(envelope.Schema, &schema); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	typ := reflect.TypeFor[envelope.Envelope]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if _, ok := schema.Properties[name]; !ok {
			t.Errorf("field %q of Envelope is missing from the schema", name)
		}
	}
	if len(schema.Properties) != typ.NumField() {
		t.Errorf("schema has %d properties, Envelope has %d fields", len(schema.Properties), typ.NumField())
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"version":1,"status":"success","tool":"t","attempts":1,"result":{"a":[1,2]},"next":"continue"}`))
	f.Add([]byte(`{"version":1,"status":"unknown_outcome","tool":"t","attempts":3,"error":{"code":"outcome_unknown","message":"m"},"next":"wait","note":"n"}`))
	f.Add([]byte(`{"version":1,"status":"definite_failure","tool":"t","attempts":0,"error":{"code":"missing_scope","message":""},"next":"do_not_retry"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := envelope.Parse(data)
		if err != nil {
			return
		}
		out, err := e.Marshal()
		if err != nil {
			t.Fatalf("parsed envelope does not marshal: %v", err)
		}
		again, err := envelope.Parse(out)
		if err != nil {
			t.Fatalf("marshalled envelope does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(e, again) {
			t.Fatalf("round trip changed the envelope:\n%+v\n%+v", e, again)
		}
	})
}

// FuzzMarshalMatchesEncodingJSON keeps the hand-written encoder byte for byte
// equal to encoding/json (without HTML escaping) on any strings.
func FuzzMarshalMatchesEncodingJSON(f *testing.F) {
	f.Add("send_email", "ref/1", "msg \"q\" \\ \n\t\b\f\x01 <&> \u2028\u2029 é", "note", 3, true, `{"a": [1, 2]}`)
	f.Add("t", "", "\xff\xfe bad utf8", "", 0, false, ``)
	f.Fuzz(func(t *testing.T, tool, ref, msg, note string, attempts int, fail bool, result string) {
		e := envelope.Envelope{Version: envelope.Version, Status: envelope.Success, Tool: tool, RequestRef: ref,
			Attempts: attempts, Next: envelope.Continue, Note: note, Replayed: attempts%2 == 0, Reconciled: fail}
		if fail {
			e.Status, e.Next, e.Error = envelope.UnknownOutcome, envelope.Wait, &envelope.Error{Code: "c" + msg, Message: msg}
			// The earlier action a refusal met, with its result when it succeeded.
			e.Earlier = &envelope.Earlier{RequestRef: "e" + ref, State: envelope.ActionUnknown}
			if result != "" {
				e.Earlier.State, e.Earlier.Result = envelope.ActionSucceeded, json.RawMessage(result)
			}
		} else if result != "" {
			e.Result = json.RawMessage(result)
		}
		got, err := e.Marshal()
		if result != "" && !json.Valid([]byte(result)) {
			if err == nil {
				t.Fatalf("Marshal accepted the invalid result %q", result)
			}
			return
		}
		if err != nil {
			return // invalid envelopes are refused, not encoded
		}
		if s := e.String(); s != string(got) {
			t.Fatalf("String %s, Marshal %s", s, got)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
		if string(got) != strings.TrimSuffix(want.String(), "\n") {
			t.Fatalf("Marshal:\n%s\nencoding/json:\n%s", got, want.String())
		}
	})
}

// Marshal sizes its buffer once: one allocation, whatever the envelope holds.
func TestMarshalAllocatesOnce(t *testing.T) {
	for _, e := range []envelope.Envelope{
		{Version: envelope.Version, Status: envelope.Success, Tool: "send_email", RequestRef: "send_email/abcdefghijklmnopqrstuvwxyzabcdef",
			Attempts: 123, Replayed: true, Reconciled: true, Result: json.RawMessage(`{"message_id":"<1@mail.example>"}`),
			Next: envelope.Continue, Note: "Already done by an earlier call; this is its recorded result."},
		{Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: "t", Attempts: 1, Next: envelope.DoNotRetry,
			Error: &envelope.Error{Code: "rejected", Message: "no"}},
	} {
		if n := testing.AllocsPerRun(100, func() { e.Marshal() }); n != 1 {
			t.Errorf("Marshal of %s: %v allocations, want 1", e, n)
		}
	}
}

// A call held behind an earlier action ran nothing itself: what is
// unknown is the earlier action, and UnknownRef names it; otherwise the
// call's own reference.
func TestUnknownRefNamesTheActionThatIsUnknown(t *testing.T) {
	held := envelope.Envelope{Status: envelope.UnknownOutcome, RequestRef: "pay/this",
		Earlier: &envelope.Earlier{RequestRef: "pay/earlier", State: envelope.ActionUnknown}}
	running := held
	running.Earlier = &envelope.Earlier{RequestRef: "pay/earlier", State: envelope.ActionRunning}
	own := envelope.Envelope{Status: envelope.UnknownOutcome, RequestRef: "pay/this"}
	applied := envelope.Envelope{Status: envelope.DefiniteFailure, RequestRef: "pay/this",
		Earlier: &envelope.Earlier{RequestRef: "pay/earlier", State: envelope.ActionSucceeded}}
	for _, tc := range []struct {
		name string
		env  envelope.Envelope
		ref  string
		ok   bool
	}{
		{"held behind an unknown action", held, "pay/earlier", true},
		{"held behind a running action", running, "pay/earlier", true},
		{"its own outcome unknown", own, "pay/this", true},
		{"not an unknown outcome", applied, "", false},
	} {
		if ref, ok := tc.env.UnknownRef(); ref != tc.ref || ok != tc.ok {
			t.Errorf("%s: UnknownRef() = %q, %v; want %q, %v", tc.name, ref, ok, tc.ref, tc.ok)
		}
	}
}

// Version 2 adds retry_after; an envelope of version 1, as a store kept
// it, is still read.
func TestVersion2AddsRetryAfterAndVersion1IsStillRead(t *testing.T) {
	old := `{"version":1,"status":"success","tool":"t","attempts":1,"result":{"id":1},"next":"continue"}`
	if e, err := envelope.Parse([]byte(old)); err != nil || e.Version != 1 {
		t.Errorf("a version-1 envelope: %+v, %v", e, err)
	}
	in := `{"version":2,"status":"unknown_outcome","tool":"t","request_ref":"t/a","attempts":0,"error":{"code":"in_progress","message":"m"},` +
		`"earlier":{"request_ref":"t/a","state":"running"},"retry_after":42,"next":"wait"}`
	e, err := envelope.Parse([]byte(in))
	if err != nil || e.RetryAfter != 42 {
		t.Fatalf("Parse: %+v, %v", e, err)
	}
	if out, err := e.Marshal(); err != nil || string(out) != in {
		t.Errorf("Marshal = %s, %v; want %s", out, err, in)
	}
}
