package agenttool

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
)

// Every digest starts with its own domain tag, so that no two kinds of digest
// can collide. Changing how one is derived means a new tag: golden vectors
// in key_test.go pin each.
//
// Version 2 of the key adds the tool's name (tools that share a prefix
// never share a key) and digests the loose form of the identifying values;
// the fingerprint digests the canonical form of what the tool receives.
// Version 3 is version 2 keyed: HMAC-SHA-256 under Options.DigestKey, used
// whenever a tool has one, so that a reference cannot be checked against a
// guess of who did what. Without a DigestKey, references stay version 2.
const (
	keyTag         = "retrysafe/key/v2"
	keyedKeyTag    = "retrysafe/key/v3"
	fingerprintTag = "retrysafe/fingerprint/v2\x00"
	identifyingTag = "retrysafe/identifying/v2\x00"
	principalTag   = "retrysafe/principal/v1\x00"
	sessionTag     = "retrysafe/session/v1\x00"
)

// refEncoding writes keys in lower-case base32 without padding: safe in
// headers, Message-IDs and file names, and unambiguous when read aloud.
var refEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// refBytes is how much of the key digest the reference keeps: 160 bits.
const refBytes = 20

// refLen is the length of a reference after its prefix and '/'.
var refLen = refEncoding.EncodedLen(refBytes)

// refAndOwner returns the request reference of a logical action of the
// tool named tool and a new lease owner for claiming it, in one allocation.
func (c *config) refAndOwner(tool string, s Scope, actionID string, identifying Digest) (ref, owner string) {
	var out [160]byte
	b := appendRef(out[:0], c.digestKey, c.KeyPrefix, tool, s, actionID, identifying)
	n := len(b)
	both := string(appendOwner(b))
	return both[:n], both[n:]
}

// appendRef appends the request reference of a logical action: prefix "/"
// and the digest of the key tag, prefix, tool name, principal, session and
// either the action id or the digest of the identifying values — SHA-256
// (key version 2) or, with a digest key, HMAC-SHA-256 under it (version
// 3). Each part is length prefixed, so no two different tuples share an
// encoding.
func appendRef(ref []byte, key []byte, prefix, tool string, s Scope, actionID string, identifying Digest) []byte {
	var stack [256]byte
	tag := keyTag
	if key != nil {
		tag = keyedKeyTag
	}
	b := appendPart(append(stack[:0], tag...), prefix)
	b = appendPart(b, tool)
	b = appendPart(b, s.Principal)
	b = appendPart(b, s.Session)
	if actionID != "" {
		b = appendPart(b, "action")
		b = appendPart(b, actionID)
	} else {
		b = appendPart(b, "fields")
		b = append(b, identifying[:]...)
	}
	var sum [sha256.Size]byte
	if key == nil {
		sum = sha256.Sum256(b)
	} else {
		// A copy: b stays on the stack only if nothing behind an
		// interface (the HMAC's hash) is handed it.
		sum = hmacSum(key, append([]byte(nil), b...))
	}
	ref = append(append(ref, prefix...), '/')
	n := len(ref)
	ref = append(ref, make([]byte, refEncoding.EncodedLen(refBytes))...)
	refEncoding.Encode(ref[n:], sum[:refBytes])
	return ref
}

func hmacSum(key, b []byte) (sum [sha256.Size]byte) {
	m := hmac.New(sha256.New, key)
	m.Write(b)
	m.Sum(sum[:0])
	return sum
}

func appendPart(b []byte, s string) []byte {
	return append(binaryLen(b, len(s)), s...)
}

// binaryLen appends n as a fixed-size length prefix.
func binaryLen(b []byte, n int) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(n))
}

// sessionDigest digests a scope's principal and session together: records
// keep it to find the open actions of a session (the unknown fence).
func (c *config) sessionDigest(s Scope) Digest {
	return c.digest(sessionTag, appendPart(appendPart(nil, s.Principal), s.Session))
}

// digest returns the digest of tag and b that records keep: SHA-256, or
// HMAC-SHA-256 keyed with Options.DigestKey when one is set, so that a copy
// of the store cannot be searched for guessed principals or inputs.
func (c *config) digest(tag string, b []byte) Digest {
	if c.digestKey == nil {
		return digest(tag, b)
	}
	m := hmac.New(sha256.New, c.digestKey)
	m.Write([]byte(tag))
	m.Write(b)
	var d Digest
	m.Sum(d[:0])
	return d
}

// principalDigest digests a principal; records keep the digest, not the name.
func (c *config) principalDigest(p string) Digest {
	if c.digestKey == nil {
		var stack [128]byte
		return sha256.Sum256(append(append(stack[:0], principalTag...), p...))
	}
	return c.digest(principalTag, []byte(p))
}

// scopeMemo is the last scope a tool digested, with its digests: an agent's
// calls come from one scope at a time, and a digest costs more than a
// comparison.
type scopeMemo struct {
	scope              Scope
	principal, session Digest
}

// scopeDigests returns principalDigest(s.Principal) and sessionDigest(s),
// from the memo when s is the scope of the tool's previous call.
func (t *Tool) scopeDigests(s Scope) (principal, session Digest) {
	if m := t.scopeMemo.Load(); m != nil && m.scope == s {
		return m.principal, m.session
	}
	m := &scopeMemo{scope: s, principal: t.cfg.principalDigest(s.Principal), session: t.cfg.sessionDigest(s)}
	t.scopeMemo.Store(m)
	return m.principal, m.session
}
