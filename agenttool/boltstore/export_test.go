package boltstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// TestExportPagesPastUnreadableRecords exports a file, opened read-only
// as a copy opens a stopped application's, in which two records cannot be
// read — one at the end of a page, one in the middle — and one is still
// pending: every readable record is listed once, in order, the unreadable
// ones are named and skipped, and the pending record keeps its lease
// (a read-only open writes nothing).
func TestExportPagesPastUnreadableRecords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var recs []storekit.Record
	for i := range 10 {
		recs = append(recs, storekit.Record{Key: fmt.Sprintf("send_email/%02d", i), Tool: "send_email", State: storekit.Succeeded,
			Token: uint64(i + 1), Attempts: 1, Outcome: []byte(`{"status":"success"}`), Created: time.Unix(100, 0), Updated: time.Unix(101, 0),
			Expires: time.Unix(1e10, 0)})
	}
	if err := s.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	lease := time.Now().Add(time.Hour)
	if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: "send_email/10", Tool: "send_email", Owner: "o", Now: time.Now(), Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	corrupt := []string{"send_email/02", "send_email/04"} // the 3rd record ends the first page of 3
	err = s.DB().Update(func(tx *bolt.Tx) error {
		for _, k := range corrupt {
			if err := boltstore.Corrupt(tx, k, []byte{9, 9, 9}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	ro, err := boltstore.Open(path, &boltstore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var got, unreadable []string
	var pending storekit.Record
	after := ""
	for {
		page, next, err := ro.Export(ctx, after, 3)
		unreadable = append(unreadable, storekit.CorruptKeys(err)...)
		if err != nil && len(storekit.CorruptKeys(err)) == 0 {
			t.Fatal(err)
		}
		for _, r := range page {
			got = append(got, r.Key)
			if r.State == storekit.Pending {
				pending = r
			}
		}
		if next == "" {
			break
		}
		after = next
	}
	want := []string{"send_email/00", "send_email/01", "send_email/03", "send_email/05", "send_email/06", "send_email/07",
		"send_email/08", "send_email/09", "send_email/10"}
	if !slices.Equal(got, want) || !slices.Equal(unreadable, corrupt) {
		t.Errorf("exported %q, unreadable %q\nwant %q, unreadable %q", got, unreadable, want, corrupt)
	}
	if pending.Key != "send_email/10" || pending.Owner != "o" || pending.LeaseExpiry.Before(lease.Add(-time.Minute)) {
		t.Errorf("the pending record exported as %+v; want it as the application left it, lease and all", pending)
	}
}
