package agenttool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	bolt "go.etcd.io/bbolt"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/observe"
	"github.com/retrysafe/retrysafe/agenttool/otelhooks"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
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
	// kept input: the input of a tool with KeepInput, kept while its
	// action is unknown, through the codec.
	"kept input": "CANARY-KEPT-INPUT-4c7",
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
		DigestKey: key, Fence: agenttool.FenceOff, Retry: agenttool.RetryPolicy{MaxAttempts: 1}, ClockSkew: -1})
	if err != nil {
		t.Fatal(err)
	}
	in := func(to string) string { return fmt.Sprintf(`{"to":%q,"body":%q}`, to, canaries["input"]) }
	kept, err := agenttool.New("send_kept", "", func(context.Context, msg) (string, error) { return "", errLostReply }, agenttool.Options{
		Store: store, Class: agenttool.Reconcilable, Reconciler: reconcile.Func(func(context.Context, string) reconcile.Answer { return reconcile.StillPending() }),
		KeepInput: true, Codec: codec, DigestKey: key, Fence: agenttool.FenceOff, Retry: agenttool.RetryPolicy{MaxAttempts: 1}, ClockSkew: -1})
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, kept.Invoke(ctx, fmt.Sprintf(`{"to":"kept@example.com","body":%q}`, canaries["kept input"])), envelope.UnknownOutcome)
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
			// A kept input is the one input the store holds, as the
			// default codec leaves it: readable (Options.KeepInput).
			readable := what != "input" && what != "principal" && what != "session"
			if bytes.Contains(raw, []byte(c)) != readable {
				t.Errorf("%s: readable in the store = %v, want %v", what, !readable, readable)
			}
		}
	})
}

// Rotating the DigestKey starts a new key space: references and digests
// are keyed, so a call under the new key never meets a record made under
// the old one — a repeat of an action done before the rotation is a new
// action, with a new reference, as docs/promises.md says. What was recorded
// before stays with operators: an unknown action made under the old key is
// listed and settled by its reference.
func TestDigestKeyRotationStartsNewReferences(t *testing.T) {
	store := memstore.New()
	m := &mailServer{script: func(n int) (bool, error) {
		if n == 2 {
			return true, errLostReply
		}
		return true, nil
	}}
	before := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed, DigestKey: bytes.Repeat([]byte{1}, 32), Fence: agenttool.FenceOff,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	after := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed, DigestKey: bytes.Repeat([]byte{2}, 32), Fence: agenttool.FenceOff})
	done := before.Invoke(scoped(), emailToAna)
	mustStatus(t, done, envelope.Success)
	lost := before.Invoke(scoped(), `{"to":"bo@example.com","subject":"Lunch"}`)
	mustStatus(t, lost, envelope.UnknownOutcome)
	again := after.Invoke(scoped(), emailToAna)
	if again.RequestRef == done.RequestRef || again.Replayed || m.runs.Load() != 3 {
		t.Errorf("the same action after a rotation: %s, runs %d; want a new reference, run as a new action", again, m.runs.Load())
	}
	op, err := agenttool.NewOperator(store, after)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := op.Unknown(context.Background(), "", 10)
	if err != nil || len(recs) != 1 || recs[0].Key != lost.RequestRef {
		t.Fatalf("the operator lists %v, %v; want the unknown action made before the rotation", recs, err)
	}
	if err := op.ResolveNotApplied(context.Background(), lost.RequestRef, recs[0].Attempts, "maria", "bounced"); err != nil {
		t.Errorf("settling an action made before the rotation: %v", err)
	}
	if _, err := agenttool.NewOperator(store, before, after); !errors.Is(err, agenttool.ErrInvalidOptions) {
		t.Errorf("an operator over tools with different digest keys: %v", err)
	}
	if _, err := agenttool.New("send_email", "", m.send, agenttool.Options{Store: store, Class: agenttool.Keyed, DigestKey: []byte("short")}); !errors.Is(err, agenttool.ErrInvalidOptions) {
		t.Errorf("a 5-byte digest key: %v", err)
	}
}

// observedCalls runs a success, a definite failure and an unknown outcome
// settled by an operator — for a guessable principal, session and input —
// through a send_email tool on store with digest key key (nil: none), and
// returns the request references of the calls and what its logs
// (observe.Log) and spans (otelhooks, with the SDK's span recorder) hold.
func observedCalls(t *testing.T, store agenttool.Store, key []byte) (refs []string, logs, spans []byte) {
	t.Helper()
	var logBuf bytes.Buffer
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	otel, err := otelhooks.New(otelhooks.Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	m := &mailServer{script: func(n int) (bool, error) {
		switch n {
		case 2:
			return false, envelope.MarkDefinite(errors.New("550 no such user"), "smtp_550")
		case 3:
			return true, errLostReply
		}
		return true, nil
	}}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.AtMostOnce, DigestKey: key, Fence: agenttool.FenceOff,
		Retry: agenttool.RetryPolicy{MaxAttempts: 1},
		Hooks: observe.Join(otel, observe.Log(slog.New(slog.NewJSONHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))))})
	ctx := agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9")
	for _, in := range []string{emailToAna, `{"to":"bo@example.com","subject":"Lunch"}`, `{"to":"cy@example.com","subject":"Lunch"}`} {
		refs = append(refs, tool.Invoke(ctx, in).RequestRef)
	}
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.ResolveApplied(context.Background(), refs[2], 1, nil, "maria", "in the mail log"); err != nil {
		t.Fatal(err)
	}
	for _, s := range recorder.Ended() {
		spans = append(spans, s.Name()...)
		for _, a := range s.Attributes() {
			spans = append(append(spans, 0), a.Value.String()...)
		}
		for _, e := range s.Events() {
			for _, a := range e.Attributes {
				spans = append(append(spans, 0), a.Value.String()...)
			}
		}
	}
	return refs, logBuf.Bytes(), spans
}

// I8, references: with a DigestKey, a request reference cannot be checked
// against a guess. What anyone can compute from a guessed principal,
// session and input — the unkeyed reference, and the unkeyed digests of the
// principal, the session and the input — is nowhere in a copy of the store
// (the bbolt file's bytes, the PostgreSQL rows), in the logs or in the
// spans. Without a DigestKey the same scan finds them, as the docs say.
func TestI8_ReferencesRevealNothingWithADigestKey(t *testing.T) {
	key := bytes.Repeat([]byte{0x5a}, 32)
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store := open()
		if _, mem := store.(interface{ Len() int }); mem {
			t.Skip("memstore has no bytes at rest")
		}
		// What a guess yields: the calls made without a key.
		plain := openBolt(t, t.TempDir()+"/plain.db")
		guessed, plainLogs, plainSpans := observedCalls(t, plain, nil)
		var needles [][]byte
		for _, ref := range guessed {
			needles = append(needles, []byte(ref), []byte(ref[strings.IndexByte(ref, '/')+1:]))
			rec, err := plain.Get(context.Background(), ref)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []agenttool.Digest{rec.Principal, rec.Session, rec.Fingerprint} {
				needles = append(needles, d[:], []byte(d.String()))
			}
		}
		plainRaw := rawStore(t, plain)
		for _, ref := range guessed {
			for where, raw := range map[string][]byte{"store": plainRaw, "logs": plainLogs, "spans": plainSpans} {
				if !bytes.Contains(raw, []byte(ref)) {
					t.Fatalf("without a DigestKey, the %s do not hold %s: the scan would find nothing", where, ref)
				}
			}
		}

		refs, logs, spans := observedCalls(t, store, key)
		for i, ref := range refs {
			if ref == guessed[i] {
				t.Errorf("with a DigestKey the reference is the guessable %s", ref)
			}
		}
		for where, raw := range map[string][]byte{"store": rawStore(t, store), "logs": logs, "spans": spans} {
			if !bytes.Contains(raw, []byte(refs[0])) {
				t.Errorf("the %s hold none of the calls' references: the scan looks at nothing", where)
			}
			for _, n := range needles {
				if bytes.Contains(raw, n) {
					t.Errorf("with a DigestKey, the %s hold %q, which anyone can compute from a guess", where, n)
				}
			}
			for _, plain := range []string{"tenant-42/user-7", "conversation-9", "ana@example.com"} {
				if bytes.Contains(raw, []byte(plain)) {
					t.Errorf("the %s hold %q", where, plain)
				}
			}
		}
	})
}
