package boltstore

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// The count of unknown records follows every write, and a store of schema
// 4 (no expiry index, no count) is upgraded: both are built from its
// records, and a sweep then finds what expired.
func TestExpiryIndexAndUnknownCount(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_780_000_000, 0)
	claim := func(key string) uint64 {
		res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "t", Principal: agenttool.Digest{1}, Fingerprint: agenttool.Digest{2},
			Owner: "o-" + key, Now: now, Lease: time.Minute})
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v, %v", key, res, err)
		}
		return res.Record.Token
	}
	finish := func(key string, tok uint64, state agenttool.State, approve bool) {
		if err := s.Finish(ctx, storekit.FinishRequest{Key: key, Token: tok, State: state, Attempts: 1, Now: now, TTL: time.Hour, RetryApproved: approve}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(want int, when string) {
		t.Helper()
		n, err := s.CountUnknown(ctx)
		if err != nil || n != want {
			t.Errorf("%s: CountUnknown = %d, %v; want %d", when, n, err, want)
		}
	}
	finish("a", claim("a"), agenttool.Unknown, false)
	finish("b", claim("b"), agenttool.Unknown, false)
	finish("c", claim("c"), agenttool.Succeeded, false)
	count(2, "two unknown")
	tok, _ := s.Claim(ctx, storekit.ClaimRequest{Key: "b", Tool: "t", Principal: agenttool.Digest{1}, Fingerprint: agenttool.Digest{2},
		Owner: "o-b2", Now: now, Lease: time.Minute, TakeOver: true})
	count(1, "one taken over")
	finish("b", tok.Record.Token, agenttool.Unknown, true) // found not applied: approved
	count(1, "one approved")

	// As schema 4 left it: no expiry index, no count.
	if err := s.DB().Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(expiryBucket); err != nil {
			return err
		}
		if err := tx.Bucket(metaBucket).Delete(unknownKey); err != nil {
			return err
		}
		return tx.Bucket(metaBucket).Put(schemaKey, []byte("4"))
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	count(1, "after the upgrade")
	n, err := s.Sweep(ctx, storekit.SweepRequest{Now: now.Add(2 * time.Hour)})
	if err != nil || n != 2 { // c (succeeded) and b (approved, expired)
		t.Errorf("sweep after the upgrade: %d, %v; want 2", n, err)
	}
	if _, err := s.Get(ctx, "a"); err != nil {
		t.Errorf("the unknown record was swept: %v", err)
	}
	count(1, "after the sweep")
}

// A program that must not upgrade a store (cmd/retrysafe) opens it with
// KeepSchema: a store of an older schema is refused and left as it was.
func TestKeepSchemaRefusesToUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Update(func(tx *bolt.Tx) error { return tx.Bucket(metaBucket).Put(schemaKey, []byte("4")) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(path, &Options{KeepSchema: true}); err == nil || !strings.Contains(err.Error(), "upgrade the application") {
		t.Fatalf("KeepSchema open of an older store: %v", err)
	}
	s, err = Open(path, &Options{ReadOnly: true, LockTimeout: 0})
	if err == nil {
		s.Close()
		t.Fatal("the refused open upgraded the store")
	}
	if s, err = Open(filepath.Join(t.TempDir(), "new.db"), &Options{KeepSchema: true}); err != nil {
		t.Fatalf("KeepSchema open of a new file: %v", err)
	}
	s.Close()
}
