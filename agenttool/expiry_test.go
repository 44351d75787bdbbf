package agenttool_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	bolt "go.etcd.io/bbolt"
)

type noteIn struct {
	Text string `json:"text"`
}

// appendNote is a tool's function that appends a note in s, its effect
// committed with its record (boltstore.Effect).
func appendNote(s *boltstore.Store) func(context.Context, noteIn) (json.RawMessage, error) {
	return func(ctx context.Context, in noteIn) (json.RawMessage, error) {
		return s.Effect(ctx, func(tx *bolt.Tx) (json.RawMessage, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("notes"))
			if err != nil {
				return nil, err
			}
			n, _ := b.NextSequence()
			return json.RawMessage(`{"note_number":` + strconv.FormatUint(n, 10) + `}`), b.Put([]byte(strconv.FormatUint(n, 10)), []byte(in.Text))
		})
	}
}

func notesCount(s *boltstore.Store) int {
	n := 0
	s.DB().View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte("notes")); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n
}

// After the key lifetime, the same input is a fresh action: an expired
// action's effect entry never answers it.
//
// After the key lifetime the same input is a new action and runs again
// (TestExpiredOutcomeIsAFreshAction). With boltstore.Effect, a claim made
// over an expired record keeps the old action's effect entry: the new
// action's Effect returns the old result without writing, and the envelope
// says success (not replayed) although nothing happened. After a Sweep
// the same call does write: the outcome depends on when the sweeper ran.
func TestExpiry_AnExpiredActionsEffectDoesNotAnswerTheNext(t *testing.T) {
	for _, swept := range []bool{true, false} {
		t.Run("swept="+strconv.FormatBool(swept), func(t *testing.T) {
			s := openBolt(t, filepath.Join(t.TempDir(), "notes.db"))
			clk := newClock()
			tool, err := agenttool.New("append_note", "Append a note.", appendNote(s), agenttool.Options{Store: s, Class: agenttool.Reconcilable, Reconciler: s.Reconciler(), Now: clk.Now, KeyTTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			first := tool.Invoke(scoped(), `{"text":"check the carrier scan"}`)
			mustStatus(t, first, envelope.Success)
			clk.Advance(2 * time.Hour) // the key's lifetime ends: the next one is a fresh action
			if swept {
				if _, err := s.Sweep(context.Background(), storekit.SweepRequest{Now: clk.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			second := tool.Invoke(scoped(), `{"text":"check the carrier scan"}`)
			t.Logf("fresh action: %s; notes: %d", second, notesCount(s))
			if second.Status == envelope.Success && !second.Replayed && notesCount(s) != 2 {
				t.Fatalf("success (not replayed) for a fresh action that wrote nothing: %d note(s)", notesCount(s))
			}
		})
	}
}

// A fresh action whose tool refused is never answered with an expired
// action's effect.
//
// The same leftover turns a definite failure of the fresh action — the tool
// refused before it wrote anything — into success, reconciled: Finish
// (Failed) meets the old effect entry (ErrEffectApplied), and the store's
// reconciler answers with the old action's result.
func TestExpiry_AFreshActionIsNotAnsweredWithAnExpiredEffect(t *testing.T) {
	s := openBolt(t, filepath.Join(t.TempDir(), "notes.db"))
	clk := newClock()
	closed := false
	tool, err := agenttool.New("append_note", "Append a note.", func(ctx context.Context, in noteIn) (json.RawMessage, error) {
		if closed {
			return nil, envelope.MarkDefinite(errorString("incident INC-104 is closed"), "incident_closed")
		}
		return appendNote(s)(ctx, in)
	}, agenttool.Options{Store: s, Class: agenttool.Reconcilable, Reconciler: s.Reconciler(), Now: clk.Now, KeyTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, tool.Invoke(scoped(), `{"text":"check the carrier scan"}`), envelope.Success)
	clk.Advance(2 * time.Hour) // a fresh action from now on
	closed = true              // the incident no longer takes notes
	env := tool.Invoke(scoped(), `{"text":"check the carrier scan"}`)
	t.Logf("fresh action on a closed incident: %s; notes: %d", env, notesCount(s))
	if env.Status == envelope.Success {
		t.Fatalf("success for an action whose tool refused and wrote nothing")
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// A succeeded action replays, without a second effect, for its whole key
// lifetime, whatever records are imported meanwhile: records copied from
// a store whose writers' clocks ran a day ahead (their Updated a day in
// this process's future) take no record of this store away before it
// expires. boltstore keeps settled records in generations by the end of
// their lifetime, and a write that starts one drops those that have ended
// once 64 are in the file: an imported record's times are data, not a
// clock that says which have ended.
func TestExpiry_ImportedRecordsFromAClockAheadEndNoLiveAction(t *testing.T) {
	s := openBolt(t, filepath.Join(t.TempDir(), "keys.db"))
	clk := newClock()
	m := &mailServer{}
	tool := newEmailTool(t, m, agenttool.Options{Store: s, Class: agenttool.AtMostOnce, Now: clk.Now, KeyTTL: 4 * time.Minute})
	input := func(i int) string {
		return `{"to":"ana@example.com","subject":"Reminder ` + strconv.Itoa(i) + `"}`
	}
	// Lifetimes of 4 minutes settle in windows of 16 s: an action every
	// 16 s starts a generation, and 64 of them fill the file.
	const actions = 64
	for i := range actions {
		mustStatus(t, tool.Invoke(scoped(), input(i)), envelope.Success)
		clk.Advance(16 * time.Second)
	}
	ahead := clk.Now().Add(24 * time.Hour)
	if err := s.Import(context.Background(), []storekit.Record{{Key: "copied/1", Tool: "send_email", State: storekit.Succeeded, Token: 1, Attempts: 1,
		Outcome: []byte(`{}`), Created: ahead, Updated: ahead, Expires: ahead.Add(4 * time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	last := tool.Invoke(scoped(), input(actions-1)) // settled 16 s ago, for 4 minutes
	mustStatus(t, last, envelope.Success)
	if !last.Replayed || m.count() != actions {
		t.Fatalf("the last action, 16 s into its 4 minutes, ran again: replayed=%v, %d messages sent for %d actions", last.Replayed, m.count(), actions)
	}
}
