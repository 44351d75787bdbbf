package agenttool_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/envelope"
)

// An application confines an operator to one tenant (ForPrincipal) and
// mounts opcmd with it, e.g. for that tenant's admins. opcmd "narrows"
// with -principal, but ForPrincipal replaces the restriction instead of
// intersecting it: the tenant's admin lists another tenant's records.
func TestReview6_ForPrincipalWidensARestrictedOperator(t *testing.T) {
	store := memstore.New()
	m := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable})
	other := agenttool.WithLabel(agenttool.WithScope(context.Background(), "tenant-99/ceo", "c-1"), "CEO: merger memo to bank")
	mustStatus(t, tool.Invoke(other, emailToAna), envelope.UnknownOutcome)

	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	tenant42 := op.ForPrincipal("tenant-42/user-7") // what tenant 42's admins get

	recs, _ := tenant42.Unknown(context.Background(), "", 10)
	if len(recs) != 0 {
		t.Fatalf("the restricted operator already lists %d records", len(recs))
	}
	// Go API: narrowing again widens.
	if recs, _ := tenant42.ForPrincipal("tenant-99/ceo").Unknown(context.Background(), "", 10); len(recs) != 0 {
		t.Errorf("op.ForPrincipal(tenant-42).ForPrincipal(tenant-99) lists %d records of tenant-99 (label %q)", len(recs), recs[0].Label)
	}
	// The CLI mounted with the tenant's operator.
	var out, errb bytes.Buffer
	code := opcmd.Run(context.Background(), tenant42, []string{"list", "-principal", "tenant-99/ceo"}, &out, &errb, nil)
	if strings.Contains(out.String(), "merger memo") {
		t.Errorf("opcmd mounted with an operator limited to tenant-42 shows tenant-99's record (exit %d):\n%s", code, out.String())
	}
	out.Reset()
	code = opcmd.Run(context.Background(), tenant42, []string{"stats", "-principal", "tenant-99/ceo"}, &out, &errb, nil)
	if strings.Contains(out.String(), "unknown") {
		t.Errorf("stats -principal through the tenant-42 operator counts tenant-99's records (exit %d):\n%s", code, out.String())
	}
}
