package agenttool

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
)

// Golden vectors pin key derivation: a change to any part of it (the tags,
// the order of parts, their length prefixes, the loose form, the keying)
// changes these references, and would silently give every stored action a
// new key. Such a change needs a new key version, never an edit of these
// values. Version 2 is a tool without a DigestKey; version 3, with one (the
// same parts, HMAC-SHA-256 under the key). The action-id vectors were
// computed apart from this code: SHA-256 or HMAC-SHA-256 of the tag and the
// parts, each after its length as 8 bytes big-endian, the first 20 bytes
// in lower-case base32.
func TestKeyDerivationGoldenVectors(t *testing.T) {
	digestKey := []byte("0123456789abcdef0123456789abcdef")
	scope := Scope{Principal: "tenant-42/user-7", Session: "conversation-9"}
	tests := []struct {
		name, input, action string
		v2, v3              string
	}{
		{"fields", `{"to":"ana@example.com","subject":"Lunch","body":"See you at noon."}`, "",
			"send_email/ekqoooiqn2fzgdexgncpaydqyhtisk2s", "send_email/q3x2e5fweum7htc3wntwm4ynqvxeqjvi"},
		{"loose variant", `{"to":"ANA@example.com ","subject":"lunch","body":"See  you at noon."}`, "",
			"send_email/ekqoooiqn2fzgdexgncpaydqyhtisk2s", "send_email/q3x2e5fweum7htc3wntwm4ynqvxeqjvi"},
		{"action id", `{"to":"ana@example.com"}`, "step-1",
			"send_email/yql3vlhsncprsv5rutxcrvjy2bp7aynb", "send_email/ts5taldews22jimmq2cfqz3rdslnepbw"},
	}
	for _, version := range []struct {
		name string
		key  []byte
		want func(v2, v3 string) string
	}{
		{"version 2 (no DigestKey)", nil, func(v2, _ string) string { return v2 }},
		{"version 3 (DigestKey)", digestKey, func(_, v3 string) string { return v3 }},
	} {
		cfg, err := newConfig("send_email", Options{Store: &mapStore{m: map[string]Record{}}, Class: Keyed, DigestKey: version.key})
		if err != nil {
			t.Fatal(err)
		}
		tool := &Tool{name: "send_email", cfg: cfg}
		for _, tt := range tests {
			in, bad := tool.parse(tt.input)
			if bad != nil {
				t.Fatalf("%s: %v", tt.name, bad)
			}
			ref, _ := cfg.refAndOwner(tool.name, scope, tt.action, in.identifying)
			if want := version.want(tt.v2, tt.v3); ref != want {
				t.Errorf("%s, %s: reference %s, want %s", version.name, tt.name, ref, want)
			}
		}
	}
}

// Every part of a key is length-prefixed: moving bytes from one part to the
// next never yields the same key.
func TestKeyPartsDoNotRunTogether(t *testing.T) {
	var id Digest
	refs := map[string]string{}
	add := func(name, ref string) {
		if other, dup := refs[ref]; dup {
			t.Errorf("%s and %s share the reference %s", name, other, ref)
		}
		refs[ref] = name
	}
	add("principal ab, session c", string(appendRef(nil, nil, "p", "t", Scope{"ab", "c"}, "", id)))
	add("principal a, session bc", string(appendRef(nil, nil, "p", "t", Scope{"a", "bc"}, "", id)))
	add("session s, action id x", string(appendRef(nil, nil, "p", "t", Scope{"a", "s"}, "x", id)))
	add("session sx, no action id", string(appendRef(nil, nil, "p", "t", Scope{"a", "sx"}, "", id)))
	add("tool t, principal a", string(appendRef(nil, nil, "p", "t", Scope{"a", "s2"}, "", id)))
	add("tool ta, principal empty", string(appendRef(nil, nil, "p", "ta", Scope{"", "s2"}, "", id)))
	// Tools that share a prefix never share a key.
	add("tool charge", string(appendRef(nil, nil, "payments", "charge", Scope{"a", "s"}, "", id)))
	add("tool refund", string(appendRef(nil, nil, "payments", "refund", Scope{"a", "s"}, "", id)))
	// A digest key makes another reference, and another key another one.
	add("keyed", string(appendRef(nil, []byte("0123456789abcdef0123456789abcdef"), "payments", "refund", Scope{"a", "s"}, "", id)))
	add("keyed otherwise", string(appendRef(nil, []byte("fedcba9876543210fedcba9876543210"), "payments", "refund", Scope{"a", "s"}, "", id)))
}

// Records made under key version 2 keep working once a tool has a
// DigestKey, whose calls make version-3 references: an operator finds and
// settles them by their reference, and an unknown one still holds back the
// tool's new writes in its scope (the unknown fence) — a repeat of its own
// action too, whose reference is now another — until it is settled, and
// then the repeat is told it was done rather than run.
func TestRecordsOfKeyVersion2KeepWorking(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	runs := 0
	type email struct {
		To string `json:"to"`
	}
	tool, err := New("send_email", "", func(context.Context, email) (string, error) { runs++; return "sent", nil },
		Options{Store: store, Class: Keyed, DigestKey: bytes.Repeat([]byte{7}, 32), Retry: RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	scope := Scope{Principal: "tenant-42/user-7", Session: "conversation-9"}
	const input = `{"to":"ana@example.com"}`
	in, bad := tool.parse(input)
	if bad != nil {
		t.Fatal(bad)
	}
	// What an earlier version left: an unknown outcome under a version-2
	// reference, its digests keyed, holding its session's slot as the
	// store's upgrade leaves it.
	v2 := string(appendRef(nil, nil, tool.cfg.KeyPrefix, tool.name, scope, "", in.identifying))
	principal, session := tool.cfg.principalDigest(scope.Principal), tool.cfg.sessionDigest(scope)
	now := time.Now()
	res, err := store.Claim(ctx, storekit.ClaimRequest{Key: v2, Tool: tool.name, Principal: principal, Session: session,
		Fingerprint: in.fingerprint, Owner: "an earlier version", Now: now.Add(-time.Hour), Lease: time.Minute, FenceScope: session})
	if err != nil || !res.Claimed {
		t.Fatal(res, err)
	}
	lost, _ := envelope.Envelope{Version: envelope.Version, Status: envelope.UnknownOutcome, Tool: tool.name, RequestRef: v2, Attempts: 1,
		Error: &envelope.Error{Code: envelope.CodeOutcomeUnknown, Message: "EOF"}, Next: envelope.DoNotRetry}.Marshal()
	if err := store.Finish(ctx, storekit.FinishRequest{Key: v2, Token: res.Record.Token, State: Unknown, Attempts: 1, Outcome: lost,
		Now: now.Add(-time.Hour), HeldUntil: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}

	call := WithScope(ctx, scope.Principal, scope.Session)
	repeat := tool.Invoke(call, input)
	if repeat.RequestRef == v2 || repeat.Error == nil || repeat.Error.Code != envelope.CodeEarlierUnknown ||
		repeat.Earlier == nil || repeat.Earlier.RequestRef != v2 || runs != 0 {
		t.Fatalf("a repeat of the version-2 action: %s, %d runs; want it held back by %s, not run", repeat, runs, v2)
	}
	op, err := NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := op.ForPrincipal(scope.Principal).Unknown(ctx, "", 10)
	if err != nil || len(recs) != 1 || recs[0].Key != v2 {
		t.Fatalf("the operator lists %v, %v; want %s", recs, err, v2)
	}
	if err := op.ResolveApplied(ctx, v2, recs[0].Attempts, []byte(`"sent"`), "maria", "in the mail log"); err != nil {
		t.Fatal(err)
	}
	if again := tool.Invoke(call, input); again.Error == nil || again.Error.Code != envelope.CodeEarlierApplied || runs != 0 {
		t.Errorf("the repeat after the version-2 action was settled as done: %s, %d runs; want earlier_action_applied, not run", again, runs)
	}
}
