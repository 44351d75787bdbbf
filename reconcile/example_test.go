package reconcile_test

import (
	"context"
	"fmt"

	"github.com/retrysafe/retrysafe/reconcile"
)

// A reconciler for a database effect: the row carries the request
// reference, committed in the same transaction as the effect, so its absence
// proves the effect did not happen.
func ExampleFunc() {
	rows := map[string]string{"append_note/abc": `{"note_number":1}`} // stands in for SELECT … WHERE request_ref = $1
	r := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		row, ok := rows[ref]
		if !ok {
			return reconcile.NotAppliedYet()
		}
		return reconcile.AppliedWith([]byte(row))
	})
	for _, ref := range []string{"append_note/abc", "append_note/xyz"} {
		a := r.Check(context.Background(), reconcile.Request{Ref: ref})
		fmt.Println(ref, a.Verdict, string(a.Result))
	}
	// Output:
	// append_note/abc applied {"note_number":1}
	// append_note/xyz not applied
}
