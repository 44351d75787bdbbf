package agenttool_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// One unreadable record never stops a listing or a sweep: it is skipped,
// reported and left in place, and the others are settled.
func TestCorruptRecordNeverStopsASweepOrAListing(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		var corrupt func(ref string)
		switch s := store.(type) {
		case *boltstore.Store:
			corrupt = func(ref string) {
				s.DB().Update(func(tx *bolt.Tx) error {
					return tx.Bucket([]byte("retrysafe/records")).Put([]byte(ref), []byte{2, 4, 0, 1})
				})
			}
		case *pgstore.Store:
			corrupt = func(ref string) {
				_, err := s.Pool().Exec(context.Background(), "UPDATE "+pgx.Identifier{s.Schema(), "records"}.Sanitize()+
					" SET principal = '\\x01'::bytea WHERE key = $1", ref)
				if err != nil {
					t.Fatal(err)
				}
			}
		default:
			t.Skip("memstore keeps records in memory: none can be corrupt")
		}
		lost := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
		tool := newEmailTool(t, lost, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
			Reconciler: fixed(reconcile.AppliedWith([]byte(`{"found":true}`)))})
		var refs []string
		for i := range 5 {
			env := newEmailTool(t, lost, agenttool.Options{Store: store, Class: agenttool.Reconcilable}).
				Invoke(agenttool.WithScope(context.Background(), "tenant-1", fmt.Sprintf("s%d", i)), emailToAna)
			mustStatus(t, env, envelope.UnknownOutcome)
			refs = append(refs, env.RequestRef)
		}
		slices.Sort(refs)
		bad := refs[1]
		corrupt(bad)
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := op.Unknown(context.Background(), "", 2)
		if keys := agenttool.CorruptKeys(err); !slices.Equal(keys, []string{bad}) {
			t.Errorf("listing reported %v (%v), want the corrupt record %s", keys, err, bad)
		}
		if len(recs) != 1 || recs[0].Key != refs[0] {
			t.Errorf("the first page lists %d records; want the readable %s", len(recs), refs[0])
		}
		rep, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{Batch: 2, Concurrency: 2})
		if err != nil {
			t.Fatalf("the sweep stopped: %v", err)
		}
		if rep.Applied != 4 || rep.Corrupt < 1 {
			t.Errorf("sweep report %+v; want the 4 readable records settled and the corrupt one reported", rep)
		}
		if _, err := store.Get(context.Background(), bad); err == nil {
			t.Errorf("the corrupt record became readable")
		}
	})
}
