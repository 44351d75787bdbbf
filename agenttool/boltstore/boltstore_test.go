package boltstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

func TestOpenLockedFileFailsClearly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	first, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	start := time.Now()
	_, err = boltstore.Open(path, &boltstore.Options{LockTimeout: 50 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second Open = %v, want a locked-file error", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("Open waited %v for the lock", time.Since(start))
	}
}

func TestOpenRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	data := make([]byte, 16384)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.IntN(256))
	}
	if err := os.WriteFile(garbage, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := boltstore.Open(garbage, nil); err == nil || !strings.Contains(err.Error(), "not a usable bbolt database") {
		t.Errorf("Open(random bytes) = %v", err)
	}

	other := filepath.Join(dir, "other.db")
	db, err := bolt.Open(other, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("invoices")); return err })
	db.Close()
	if _, err := boltstore.Open(other, nil); err == nil || !strings.Contains(err.Error(), "not a retrysafe store") {
		t.Errorf("Open(another application's bbolt file) = %v", err)
	}

	newer := filepath.Join(dir, "newer.db")
	s, err := boltstore.Open(newer, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.DB().Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("retrysafe/meta")).Put([]byte("schema"), []byte("99"))
	})
	s.Close()
	if _, err := boltstore.Open(newer, nil); err == nil || !strings.Contains(err.Error(), `schema "99"`) {
		t.Errorf("Open(newer schema) = %v", err)
	}
}

func TestCorruptRecordFailsClosed(t *testing.T) {
	s := boltstore.OpenTemp(t)
	s.DB().Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("retrysafe/records")).Put([]byte("send_email/x"), []byte("{not json"))
	})
	_, err := s.Claim(context.Background(), storekit.ClaimRequest{Key: "send_email/x", Owner: "o", Now: time.Now(), Lease: time.Minute})
	if !errors.Is(err, agenttool.ErrCorrupt) {
		t.Errorf("Claim over a corrupt record = %v, want ErrCorrupt (never treated as free)", err)
	}
	if _, err := s.Get(context.Background(), "send_email/x"); !errors.Is(err, agenttool.ErrCorrupt) {
		t.Errorf("Get of a corrupt record = %v", err)
	}
}

func TestCancelledContextWritesNothing(t *testing.T) {
	s := boltstore.OpenTemp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: "k/1", Owner: "o", Now: time.Now(), Lease: time.Minute}); !errors.Is(err, context.Canceled) {
		t.Errorf("Claim with a cancelled context = %v", err)
	}
	if _, err := s.Get(context.Background(), "k/1"); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("a cancelled claim left a record: %v", err)
	}
}
