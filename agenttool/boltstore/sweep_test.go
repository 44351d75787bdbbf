package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	bolt "go.etcd.io/bbolt"
)

func settledRecord(key string, exp time.Time, t0 time.Time) agenttool.Record {
	return agenttool.Record{Key: key, Tool: "send_email", State: agenttool.Succeeded,
		Principal: agenttool.Digest{1}, Session: agenttool.Digest{2}, Fingerprint: agenttool.Digest{3},
		Token: 1, Attempts: 1, Created: t0, Updated: t0, Expires: exp, Outcome: []byte(`{}`)}
}

// Unreadable records never stop a sweep: every readable expired record
// behind them is swept.
//
// Unreadable records are "left in place and reported". A sweep step reads
// at most 2*limit due entries of the expiry index; when that many of the
// oldest ones name unreadable records, every step deletes nothing, and
// SweepAll stops at once: no expired record behind them is ever swept.
// Records of the records bucket (here: a file of layout 6, read one by
// one) are read and the unreadable reported; a generation that ended goes
// whole, or cut down, unread records included — only settled records
// whose lifetime is over ever enter one.
func TestSweep_CorruptRecordsNeverStopIt(t *testing.T) {
	for _, layout := range []string{"records bucket", "generations"} {
		for _, limit := range []int{50, 0} {
			t.Run(fmt.Sprintf("%s, steps of %d", layout, limit), func(t *testing.T) {
				ctx := context.Background()
				t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
				path := filepath.Join(t.TempDir(), "keys.db")
				s, err := boltstore.Open(path, nil)
				if err != nil {
					t.Fatal(err)
				}
				var recs []agenttool.Record
				for i := range 100 { // expire first
					recs = append(recs, settledRecord(fmt.Sprintf("a/%03d", i), t0.Add(time.Minute), t0))
				}
				for i := range 1000 { // expire later, still long before the sweep
					recs = append(recs, settledRecord(fmt.Sprintf("b/%04d", i), t0.Add(time.Hour), t0))
				}
				if err := s.Import(ctx, recs); err != nil {
					t.Fatal(err)
				}
				if layout == "records bucket" {
					s.Close()
					db, err := bolt.Open(path, 0o600, nil)
					if err != nil {
						t.Fatal(err)
					}
					if err := db.Update(boltstore.LayoutSix); err != nil {
						t.Fatal(err)
					}
					db.Close()
					if s, err = boltstore.Open(path, nil); err != nil {
						t.Fatal(err)
					}
				}
				defer s.Close()
				// A disk error, or a record written by a later version, damages the 100 oldest.
				if err := s.DB().Update(func(tx *bolt.Tx) error {
					for i := range 100 {
						if err := boltstore.Corrupt(tx, fmt.Sprintf("a/%03d", i), []byte{9, 9, 9}); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				n, err := storekit.SweepAll(ctx, s, t0.Add(24*time.Hour), limit, nil)
				t.Logf("SweepAll: %d deleted, corrupt reported: %v", n, errors.Is(err, agenttool.ErrCorrupt))
				left := 0
				for i := range 1000 {
					if _, err := s.Get(ctx, fmt.Sprintf("b/%04d", i)); err == nil {
						left++
					}
				}
				if left != 0 {
					t.Errorf("SweepAll left %d of 1000 readable expired records; every later sweep does the same", left)
				}
				switch {
				case layout == "records bucket" && (n != 1000 || !errors.Is(err, agenttool.ErrCorrupt)):
					t.Errorf("deleted %d (%v); want the 1000 readable ones, and the others reported", n, err)
				case layout == "generations" && (n != 1100 || err != nil):
					t.Errorf("deleted %d (%v); want all 1100 expired records, deleted with their generations", n, err)
				}
			})
		}
	}
}

// An unresolved unknown record that expires is refused at import, and a
// sweep drops any index entry it cannot use.
//
// storekit.ValidateImport accepted an unresolved unknown record with an
// Expires (memstore and pgstore ignored it when sweeping). In boltstore its
// expiry entry was due, not sweepable and not stale: it was never removed,
// and 100 of them stopped every sweep. Now such a record is refused at
// import, and a sweep drops any index entry it cannot use.
func TestSweep_ImportRefusesUnknownThatExpires(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s := boltstore.OpenTemp(t)
	var unknown, settled []agenttool.Record
	for i := range 100 {
		r := settledRecord(fmt.Sprintf("a/%03d", i), t0.Add(time.Minute), t0)
		r.State = agenttool.Unknown
		unknown = append(unknown, r)
	}
	for i := range 500 {
		settled = append(settled, settledRecord(fmt.Sprintf("b/%04d", i), t0.Add(time.Hour), t0))
	}
	if err := s.Import(ctx, append(unknown, settled...)); !errors.Is(err, agenttool.ErrInvalidRequest) {
		t.Fatalf("importing unresolved unknown records that expire: %v, want ErrInvalidRequest", err)
	}
	for i := range unknown {
		unknown[i].Expires = time.Time{}
	}
	if err := s.Import(ctx, append(unknown, settled...)); err != nil {
		t.Fatalf("import: %v", err)
	}
	n, err := storekit.SweepAll(ctx, s, t0.Add(24*time.Hour), 0, nil)
	if err != nil || n != 500 {
		t.Errorf("SweepAll: %d deleted of 500 expired settled records, %v", n, err)
	}
}

// A sweep that stops for its budget with expired records left says so
// (storekit.SweepExpired's more, the sweeper's Behind), so that the next
// pass catches up without pausing — also when its first step dropped
// whole generations, whose count sizes the later steps beyond the number
// the store deletes one by one in a step.
func TestASweepStoppedByItsBudgetReportsTheBacklogLeft(t *testing.T) {
	ctx := context.Background()
	s := boltstore.OpenTemp(t)
	t0 := time.Unix(1_780_000_000, 0)
	var recs []agenttool.Record
	for i := range 2000 {
		recs = append(recs, settledRecord(fmt.Sprintf("gen/%04d", i), t0.Add(80*time.Second), t0)) // in generations
		r := settledRecord(fmt.Sprintf("approved/%04d", i), t0.Add(80*time.Second), t0)            // in the records bucket
		r.State, r.RetryApproved = agenttool.Unknown, true
		recs = append(recs, r)
	}
	if err := s.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	const budget = time.Second
	began, steps := time.Now(), 0
	deleted, more, err := storekit.SweepExpired(ctx, s, storekit.SweepPlan{Now: t0.Add(time.Hour), Budget: budget, Progress: func(int) {
		if steps++; steps == 2 {
			time.Sleep(budget - time.Since(began)) // the budget ends with the second step
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if steps != 2 || deleted >= len(recs) {
		t.Fatalf("%d steps deleted %d of %d records; want the budget to stop the sweep after 2, with records left", steps, deleted, len(recs))
	}
	if !more {
		t.Errorf("the sweep stopped for its budget with %d expired records left, and reported none left", len(recs)-deleted)
	}
}
