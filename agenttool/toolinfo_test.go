package agenttool_test

import (
	"context"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/reconcile"
)

// An operator says, per tool, which settlements can work: a screen offers
// "reconcile" only for a tool with a reconciler, "compensate" only for one
// with a Compensate function.
func TestOperatorToolInfo(t *testing.T) {
	store := memstore.New()
	m := &mailServer{script: func(n int) (bool, error) { return true, nil }}
	atMostOnce := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce,
		Compensate: func(context.Context, agenttool.CallInfo) error { return nil }})
	checked, err := agenttool.New("send_sms", "Send an SMS.", m.send, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
		Reconciler: reconcile.Func(func(context.Context, string) reconcile.Answer { return reconcile.StillPending() })})
	if err != nil {
		t.Fatal(err)
	}
	op, err := agenttool.NewOperator(store, atMostOnce, checked)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want agenttool.ToolInfo
		ok   bool
	}{
		{"send_email", agenttool.ToolInfo{Name: "send_email", Class: agenttool.AtMostOnce, Compensates: true}, true},
		{"send_sms", agenttool.ToolInfo{Name: "send_sms", Class: agenttool.Reconcilable, Reconciles: true}, true},
		{"book_flight", agenttool.ToolInfo{Name: "book_flight"}, false},
	}
	for _, tt := range tests {
		for _, o := range []*agenttool.Operator{op, op.ForPrincipal("tenant-1"), op.ForTool("send_sms")} {
			got, ok := o.Tool(tt.name)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Tool(%q) = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
			}
		}
	}
}
