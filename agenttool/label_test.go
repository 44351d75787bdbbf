package agenttool_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
)

// An operator tells whose unknown action a record is by the label trusted
// code set with the scope; the label is not part of the action: the same
// email with another label is the same email, and it is not sent twice.
func TestOperatorSeesTheLabel(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
		tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce})
		ctx := agenttool.WithLabel(scoped(), "Ana Ruiz · ticket 4411")
		first := tool.Invoke(ctx, emailToAna)
		mustStatus(t, first, envelope.UnknownOutcome)

		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := op.Unknown(context.Background(), "", 10)
		if err != nil || len(recs) != 1 {
			t.Fatalf("Unknown: %d records, %v", len(recs), err)
		}
		if recs[0].Label != "Ana Ruiz · ticket 4411" {
			t.Errorf("Unknown lists the label %q", recs[0].Label)
		}

		again := tool.Invoke(agenttool.WithLabel(scoped(), "someone else's ticket"), emailToAna)
		mustStatus(t, again, envelope.UnknownOutcome)
		if again.RequestRef != first.RequestRef || m.count() != 1 {
			t.Errorf("another label made another action: refs %s, %s; %d emails", first.RequestRef, again.RequestRef, m.count())
		}
		rec, err := op.Show(context.Background(), first.RequestRef)
		if err != nil || rec.Label != "Ana Ruiz · ticket 4411" {
			t.Errorf("Show: label %q, %v; a call that does not take the record over must not relabel it", rec.Label, err)
		}
	})
}

// A keyed tool's retry takes the record over; its label replaces the old
// one, and a sweeper's takeover, which has none, keeps it.
func TestTakeoverRelabels(t *testing.T) {
	store := openBolt(t, t.TempDir()+"/keys.db")
	m := &mailServer{dedupe: true, script: func(n int) (bool, error) {
		if n <= 3 {
			return true, errLostReply
		}
		return true, nil
	}}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed})
	first := tool.Invoke(agenttool.WithLabel(scoped(), "first"), emailToAna)
	mustStatus(t, first, envelope.UnknownOutcome)
	op, _ := agenttool.NewOperator(store, tool)
	second := tool.Invoke(agenttool.WithLabel(scoped(), "second"), emailToAna)
	mustStatus(t, second, envelope.Success)
	rec, err := op.Show(context.Background(), first.RequestRef)
	if err != nil || rec.Label != "second" {
		t.Errorf("after a keyed retry: label %q, %v; want the retrying call's", rec.Label, err)
	}
}

// The approver, a person behind a UI, is shown the call's label.
func TestApproverSeesTheLabel(t *testing.T) {
	m := &mailServer{script: func(n int) (bool, error) { return n == 1, errLostReply }}
	var seen []string
	tool := newEmailTool(t, m, agenttool.Options{Store: openBolt(t, t.TempDir()+"/keys.db"), Class: agenttool.AtMostOnce,
		Approver: agenttool.ApproverFunc(func(ctx context.Context, req agenttool.ApprovalRequest) (agenttool.Approval, error) {
			seen = append(seen, req.Label)
			return agenttool.Approval{}, nil
		})})
	ctx := agenttool.WithLabel(scoped(), "Ana Ruiz")
	mustStatus(t, tool.Invoke(ctx, emailToAna), envelope.UnknownOutcome)
	mustStatus(t, tool.Invoke(ctx, emailToAna), envelope.UnknownOutcome)
	if len(seen) == 0 || seen[len(seen)-1] != "Ana Ruiz" {
		t.Errorf("the approver saw labels %q", seen)
	}
}

// A label is for display: it is cut to 256 bytes on a character boundary,
// and invalid UTF-8 and control characters are replaced, so that a label
// cannot garble an operator's terminal or screen.
func TestLabelIsCleaned(t *testing.T) {
	m := &mailServer{script: func(n int) (bool, error) { return true, errLostReply }}
	store := openBolt(t, t.TempDir()+"/keys.db")
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce})
	op, _ := agenttool.NewOperator(store, tool)
	for i, tc := range []struct{ label, want string }{
		{"Ana\x1b[31m\nRuiz\xff", "Ana [31m Ruiz\uFFFD"},
		{strings.Repeat("é", 200), strings.Repeat("é", 126) + "…"},
	} {
		ctx := agenttool.WithScope(context.Background(), "tenant-42/user-7", fmt.Sprint("conversation-", i)) // apart from the unknown fence
		env := tool.Invoke(agenttool.WithLabel(ctx, tc.label), emailToAna)
		mustStatus(t, env, envelope.UnknownOutcome)
		rec, err := op.Show(context.Background(), env.RequestRef)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Label != tc.want || !utf8.ValidString(rec.Label) || len(rec.Label) > 256 {
			t.Errorf("label %q stored as %q (%d bytes), want %q", tc.label, rec.Label, len(rec.Label), tc.want)
		}
	}
}
