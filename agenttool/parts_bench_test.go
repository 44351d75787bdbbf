package agenttool

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/storekit"

	"github.com/retrysafe/retrysafe/envelope"
)

// BenchmarkParts measures, each alone, the parts of a guarded call that the
// in-memory overhead budget names: canonical JSON with the input's
// fingerprint, the key, the envelope, and the state machine (a claim and an
// outcome decided on a map, as memstore does), and then all four in turn, on
// the benchmarks' typical ~300-byte input (benchtool.Input, which this
// package's own tests cannot import).
// What an end-to-end call costs on top of them (a lease timer, two clock
// reads, the call's allocations and their collection, a real store and its
// sweeps) is in BenchmarkCall and in go run ./internal/bench.
//
//	go test -run '^$' -bench BenchmarkParts -benchmem ./agenttool/
func BenchmarkParts(b *testing.B) {
	const in = `{"to":"user1@example.com","subject":"Your booking is confirmed",` +
		`"body":"Hello, your seat 14C on flight TP1234 from Lisbon to Porto on 12 December at 09:40 is confirmed.` +
		` Please arrive at the gate 30 minutes before departure. Reply to this message if anything needs to change."}`
	store := &mapStore{m: make(map[string]Record)}
	cfg, err := newConfig("send_email", Options{Store: store, Class: Keyed})
	if err != nil {
		b.Fatal(err)
	}
	tool := &Tool{name: "send_email", cfg: cfg}
	scope := Scope{Principal: "tenant-42/user-7", Session: "conversation-9"}
	result := envelope.ResultFromText(`{"message_id":"<1@mail.example>"}`)
	now := time.Now()

	canonical := func() input {
		parsed, bad := tool.parse(in)
		if bad != nil {
			b.Fatal(bad)
		}
		return parsed
	}
	key := func(parsed input) (string, string, Digest) {
		ref, owner := cfg.refAndOwner(tool.Name(), scope, "", parsed.identifying)
		principal, _ := tool.scopeDigests(scope)
		return ref, owner, principal
	}
	encode := func(ref string) []byte {
		out, err := envelope.Envelope{Version: envelope.Version, Status: envelope.Success, Tool: "send_email", RequestRef: ref,
			Attempts: 1, Result: result, Next: envelope.Continue}.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	state := func(ref, owner string, principal, fp Digest, outcome []byte) {
		res, err := store.Claim(context.Background(), storekit.ClaimRequest{Key: ref, Tool: "send_email", Principal: principal,
			Fingerprint: fp, Owner: owner, Now: now, Lease: time.Minute})
		if err != nil || !res.Claimed {
			b.Fatal(res, err)
		}
		err = store.Finish(context.Background(), storekit.FinishRequest{Key: ref, Token: res.Record.Token, State: Succeeded,
			Attempts: 1, Outcome: outcome, Now: now, TTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		delete(store.m, ref) // the store stays small: this is the state machine, not a store
	}
	parsed := canonical()
	ref, owner, principal := key(parsed)
	outcome := encode(ref)
	b.Run("canonical+fingerprint", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			canonical()
		}
	})
	b.Run("key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			key(parsed)
		}
	})
	b.Run("envelope", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encode(ref)
		}
	})
	b.Run("state-machine", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			state(ref, owner, principal, parsed.fingerprint, outcome)
		}
	})
	b.Run("all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := canonical()
			ref, owner, principal := key(p)
			state(ref, owner, principal, p.fingerprint, encode(ref))
		}
	})
}

// mapStore decides claims and outcomes with the shared state machine over a
// map, as memstore does, without memstore's locking and record layout.
type mapStore struct {
	Store
	m     map[string]Record
	token uint64
}

func (s *mapStore) next() (uint64, error) { s.token++; return s.token, nil }

func (s *mapStore) Claim(_ context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	var existing *Record
	if r, ok := s.m[req.Key]; ok {
		existing = &r
	}
	d, err := storekit.DecideClaim(existing, nil, req, s.next)
	if err == nil && d.Write {
		s.m[req.Key] = d.Result.Record
	}
	return d.Result, err
}

func (s *mapStore) Finish(_ context.Context, req storekit.FinishRequest) error {
	r, ok := s.m[req.Key]
	if !ok {
		return ErrNotFound
	}
	rec, err := storekit.DecideFinish(&r, req)
	if err == nil {
		s.m[req.Key] = rec
	}
	return err
}
