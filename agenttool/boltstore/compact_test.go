package boltstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
)

// The compaction the package documentation gives operators (bbolt's
// Compact, which its command line runs) keeps every record, and the
// fencing tokens of later claims stay above every token given before it.
func TestCompactedFileKeepsRecordsAndTokens(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "retrysafe.db"), filepath.Join(dir, "retrysafe.compact.db")
	s, err := boltstore.Open(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tokens []uint64
	tool, err := agenttool.New("send_email", "", func(ctx context.Context, in note) (string, error) {
		info, _ := agenttool.CallInfoFrom(ctx)
		tokens = append(tokens, info.Token)
		return "sent", nil
	}, agenttool.Options{Store: s, Class: agenttool.Reconcilable, SettledByOperators: true})
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for i := range 50 {
		env := tool.Invoke(scope(), fmt.Sprintf(`{"text":"before %d"}`, i))
		if env.Status != envelope.Success {
			t.Fatal(env)
		}
		refs = append(refs, env.RequestRef)
	}
	s.Close()

	from, err := bolt.Open(src, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	to, err := bolt.Open(dst, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.Compact(to, from, 65536); err != nil {
		t.Fatal(err)
	}
	from.Close()
	to.Close()

	s, err = boltstore.Open(dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, ref := range refs {
		if rec, err := s.Get(context.Background(), ref); err != nil || rec.State != agenttool.Succeeded {
			t.Fatalf("%s after compaction: %+v, %v", ref, rec, err)
		}
	}
	tool, err = agenttool.New("send_email", "", func(ctx context.Context, in note) (string, error) {
		info, _ := agenttool.CallInfoFrom(ctx)
		tokens = append(tokens, info.Token)
		return "sent", nil
	}, agenttool.Options{Store: s, Class: agenttool.Reconcilable, SettledByOperators: true})
	if err != nil {
		t.Fatal(err)
	}
	before := tokens[len(tokens)-1]
	if env := tool.Invoke(scope(), `{"text":"after"}`); env.Status != envelope.Success {
		t.Fatal(env)
	}
	if after := tokens[len(tokens)-1]; after <= before {
		t.Errorf("the first claim after compaction got token %d, not above the last before it (%d)", after, before)
	}
	if env := tool.Invoke(scope(), `{"text":"before 7"}`); env.Status != envelope.Success || !env.Replayed {
		t.Errorf("an action done before compaction, called again: %s; want its outcome replayed", env)
	}
	// The generations' counts came through too: a sweep once every
	// record has expired deletes and counts all 51.
	n, err := s.Sweep(context.Background(), storekit.SweepRequest{Now: time.Now().Add(365 * 24 * time.Hour)})
	if err != nil || n != len(refs)+1 {
		t.Errorf("a sweep after compaction, every record expired: %d deleted, %v; want %d", n, err, len(refs)+1)
	}
}
