package boltstore_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// A read-only open reads the records a closed application left, shares the
// file with other read-only opens, writes nothing (not even the lease
// endings of an ordinary open) and refuses every write.
func TestReadOnlyOpenReadsAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	app, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claim := storekit.ClaimRequest{Key: "send_email/abc", Tool: "send_email", Principal: agenttool.Digest{1},
		Fingerprint: agenttool.Digest{2}, Owner: "o-1", Now: now, Lease: time.Hour}
	if _, err := app.Claim(ctx, claim); err != nil {
		t.Fatal(err)
	}
	app.Close() // the application stops with the record pending
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	ro, err := boltstore.Open(path, &boltstore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	other, err := boltstore.Open(path, &boltstore.Options{ReadOnly: true, LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("a second read-only open: %v", err)
	}
	other.Close()

	rec, err := ro.Get(ctx, claim.Key)
	if err != nil || rec.State != agenttool.Pending || !rec.LeaseExpiry.After(now) {
		t.Errorf("read-only Get: %+v, %v; want the pending record with its lease as the application left it", rec, err)
	}
	counts, err := ro.Count(ctx, storekit.CountRequest{})
	if err != nil || len(counts) != 1 || counts[0].Records != 1 {
		t.Errorf("read-only Count: %+v, %v", counts, err)
	}
	claim.Key = "send_email/def"
	if _, err := ro.Claim(ctx, claim); !errors.Is(err, boltstore.ErrReadOnly) {
		t.Errorf("read-only Claim: %v, want ErrReadOnly", err)
	}
	if _, err := ro.Sweep(ctx, storekit.SweepRequest{Now: now}); !errors.Is(err, boltstore.ErrReadOnly) {
		t.Errorf("read-only Sweep: %v, want ErrReadOnly", err)
	}
	ro.Close()
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("a read-only open changed the file")
	}
}

// While the application holds the file for writing, a read-only open fails
// within its lock timeout and says what to do instead.
func TestReadOnlyOpenWhileTheApplicationRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	app, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	_, err = boltstore.Open(path, &boltstore.Options{ReadOnly: true, LockTimeout: 50 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "open in another process") || !strings.Contains(err.Error(), "agenttool/opcmd") {
		t.Errorf("read-only open of a file in use: %v", err)
	}
}

// A read-only open never creates a file, and says there is none.
func TestReadOnlyOpenOfNoFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.db")
	_, err := boltstore.Open(path, &boltstore.Options{ReadOnly: true})
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "no store") {
		t.Errorf("read-only open of no file: %v", err)
	}
	if _, serr := os.Stat(path); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the read-only open created %s", path)
	}
}
