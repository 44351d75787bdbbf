package agenttool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// canaries are planted in everything a caller hands retrysafe: inputs, the
// scope and its label, a tool's result and error, an effect's result, an
// operator's name and note.
var canaries = map[string]string{
	"input":     "CANARY-INPUT-5b1",
	"principal": "CANARY-PRINCIPAL-7e2",
	"session":   "CANARY-SESSION-c93",
	"result":    "CANARY-RESULT-0d4",
	"error":     "CANARY-ERROR-a65",
	"effect":    "CANARY-EFFECT-f76",
	"operator":  "CANARY-OPERATOR-187",
	"note":      "CANARY-NOTE-298",
	"label":     "CANARY-LABEL-3a9",
}

// plantCanaries runs calls that carry every canary into store: a success, a
// definite failure, an effect (boltstore), and an unknown outcome resolved by
// an operator with a note.
func plantCanaries(t *testing.T, store agenttool.Store, codec agenttool.Codec, key []byte) {
	t.Helper()
	ctx := agenttool.WithScope(context.Background(), canaries["principal"], canaries["session"])
	ctx = agenttool.WithLabel(ctx, canaries["label"])
	type msg struct {
		To   string `json:"to"`
		Body string `json:"body"`
	}
	runs := 0
	fn := func(ctx context.Context, m msg) (string, error) {
		runs++
		switch {
		case strings.HasPrefix(m.To, "fail"):
			return "", envelope.MarkDefinite(errors.New("550 no such user "+canaries["error"]), "smtp_550")
		case strings.HasPrefix(m.To, "lost"):
			return "", errLostReply
		case strings.HasPrefix(m.To, "effect"):
			b := store.(*boltstore.Store)
			res, err := b.Effect(ctx, func(tx *bolt.Tx) (json.RawMessage, error) {
				return json.RawMessage(`"` + canaries["effect"] + `"`), nil
			})
			return string(res), err
		}
		return canaries["result"], nil
	}
	tool, err := agenttool.New("send", "", fn, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Codec: codec,
		DigestKey: key, Fence: agenttool.FenceOff, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	in := func(to string) string { return fmt.Sprintf(`{"to":%q,"body":%q}`, to, canaries["input"]) }
	mustStatus(t, tool.Invoke(ctx, in("ok@example.com")), envelope.Success)
	mustStatus(t, tool.Invoke(ctx, in("fail@example.com")), envelope.DefiniteFailure)
	if _, ok := store.(*boltstore.Store); ok {
		mustStatus(t, tool.Invoke(ctx, in("effect@example.com")), envelope.Success)
	}
	lost := tool.Invoke(ctx, in("lost@example.com"))
	mustStatus(t, lost, envelope.UnknownOutcome)
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.ResolveNotApplied(context.Background(), lost.RequestRef, lost.Attempts, canaries["operator"], canaries["note"]); err != nil {
		t.Fatal(err)
	}
	// The operator reads the note and the label back through the codec.
	rec, err := op.Show(context.Background(), lost.RequestRef)
	if err != nil || rec.Resolution == nil || rec.Resolution.Why != canaries["note"] || rec.Resolution.By != "operator:"+canaries["operator"] {
		t.Errorf("the operator reads back %+v, %v", rec.Resolution, err)
	}
	if rec.Label != canaries["label"] {
		t.Errorf("the operator reads back the label %q, want %q", rec.Label, canaries["label"])
	}
}

// rawStore returns every byte the store keeps: the bbolt file, or every row
// of every table of the pgstore's schema, values as stored.
func rawStore(t *testing.T, store agenttool.Store) []byte {
	t.Helper()
	switch s := store.(type) {
	case *boltstore.Store:
		path := s.Path()
		s.Close()
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	case *pgstore.Store:
		ctx := context.Background()
		var raw bytes.Buffer
		for _, table := range []string{"records", "migrations"} {
			rows, err := s.Pool().Query(ctx, "SELECT * FROM "+pgx.Identifier{s.Schema(), table}.Sanitize())
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range vals {
					switch v := v.(type) {
					case []byte:
						raw.Write(v)
					case string:
						raw.WriteString(v)
					default:
						b, _ := json.Marshal(v)
						raw.Write(b)
					}
					raw.WriteByte(0)
				}
			}
			rows.Close()
		}
		return raw.Bytes()
	}
	t.Fatalf("no raw view of %T", store)
	return nil
}

// I8: with an encrypting codec and a digest key, nothing a caller handed
// retrysafe can be read from a copy of the store: not the input, the
// principal, the session, the label, a result, a tool's error text, an
// effect's result, nor an operator's name or note.
func TestI8_NoCanaryInTheStore(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		if _, mem := store.(interface{ Len() int }); mem {
			t.Skip("memstore has no bytes at rest")
		}
		plantCanaries(t, store, newSealCodec(t), bytes.Repeat([]byte{9}, 32))
		raw := rawStore(t, store)
		for what, c := range canaries {
			if bytes.Contains(raw, []byte(c)) {
				t.Errorf("the store keeps the %s in the clear (%s)", what, c)
			}
		}
	})
}

// With the default codec, inputs, principals and sessions are still never
// stored (only their digests); labels, results, error texts, effects'
// results and operators' names and notes are kept as they are, as the docs
// say.
func TestI8_WhatTheDefaultCodecLeavesReadable(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		if _, mem := store.(interface{ Len() int }); mem {
			t.Skip("memstore has no bytes at rest")
		}
		_, bolt := store.(*boltstore.Store)
		plantCanaries(t, store, nil, nil)
		raw := rawStore(t, store)
		for what, c := range canaries {
			if what == "effect" && !bolt {
				continue // effects are boltstore's
			}
			readable := what != "input" && what != "principal" && what != "session"
			if bytes.Contains(raw, []byte(c)) != readable {
				t.Errorf("%s: readable in the store = %v, want %v", what, !readable, readable)
			}
		}
	})
}

// Rotating the DigestKey never runs an action twice: a record made under the
// old key belongs to no principal under the new one, and a call that meets
// it is refused until the record expires.
func TestDigestKeyRotationRefusesNeverReruns(t *testing.T) {
	store := memstore.New()
	m := &mailServer{}
	before := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed, DigestKey: bytes.Repeat([]byte{1}, 32)})
	after := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed, DigestKey: bytes.Repeat([]byte{2}, 32)})
	mustStatus(t, before.Invoke(scoped(), emailToAna), envelope.Success)
	env := after.Invoke(scoped(), emailToAna)
	if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeScopeMismatch || m.runs.Load() != 1 {
		t.Errorf("after a rotation: %s, runs %d; want refused, not run again", env, m.runs.Load())
	}
	if _, err := agenttool.NewOperator(store, before, after); !errors.Is(err, agenttool.ErrInvalidOptions) {
		t.Errorf("an operator over tools with different digest keys: %v", err)
	}
	if _, err := agenttool.New("send_email", "", m.send, agenttool.Options{Store: store, Class: agenttool.Keyed, DigestKey: []byte("short")}); !errors.Is(err, agenttool.ErrInvalidOptions) {
		t.Errorf("a 5-byte digest key: %v", err)
	}
}
