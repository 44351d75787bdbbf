package agenttool

import (
	"testing"
)

// Golden vectors pin key derivation: a change to any part of it (the tags,
// the order of parts, their length prefixes, the loose form) changes these
// references, and would silently give every stored action a new key. Such a
// change needs a new key version, never an edit of these values.
func TestKeyDerivationGoldenVectors(t *testing.T) {
	tool := &Tool{name: "send_email"}
	cfg, err := newConfig("send_email", Options{Store: &mapStore{m: map[string]Record{}}, Class: Keyed})
	if err != nil {
		t.Fatal(err)
	}
	tool.cfg = cfg
	scope := Scope{Principal: "tenant-42/user-7", Session: "conversation-9"}
	tests := []struct {
		name, input, action, want string
	}{
		{"fields", `{"to":"ana@example.com","subject":"Lunch","body":"See you at noon."}`, "", "send_email/ekqoooiqn2fzgdexgncpaydqyhtisk2s"},
		{"loose variant", `{"to":"ANA@example.com ","subject":"lunch","body":"See  you at noon."}`, "", "send_email/ekqoooiqn2fzgdexgncpaydqyhtisk2s"},
		{"action id", `{"to":"ana@example.com"}`, "step-1", "send_email/yql3vlhsncprsv5rutxcrvjy2bp7aynb"},
	}
	for _, tt := range tests {
		in, bad := tool.parse(tt.input)
		if bad != nil {
			t.Fatalf("%s: %v", tt.name, bad)
		}
		ref, _ := refAndOwner(cfg.KeyPrefix, tool.name, scope, tt.action, in.identifying)
		if ref != tt.want {
			t.Errorf("%s: reference %s, want %s", tt.name, ref, tt.want)
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
	add("principal ab, session c", string(appendRef(nil, "p", "t", Scope{"ab", "c"}, "", id)))
	add("principal a, session bc", string(appendRef(nil, "p", "t", Scope{"a", "bc"}, "", id)))
	add("session s, action id x", string(appendRef(nil, "p", "t", Scope{"a", "s"}, "x", id)))
	add("session sx, no action id", string(appendRef(nil, "p", "t", Scope{"a", "sx"}, "", id)))
	add("tool t, principal a", string(appendRef(nil, "p", "t", Scope{"a", "s2"}, "", id)))
	add("tool ta, principal empty", string(appendRef(nil, "p", "ta", Scope{"", "s2"}, "", id)))
	// Tools that share a prefix never share a key.
	add("tool charge", string(appendRef(nil, "payments", "charge", Scope{"a", "s"}, "", id)))
	add("tool refund", string(appendRef(nil, "payments", "refund", Scope{"a", "s"}, "", id)))
}
