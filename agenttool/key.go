package agenttool

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"hash"
)

// keyVersion is mixed into every key; changing how keys are derived means a
// new version, so that old and new keys never collide.
const keyVersion = "retrysafe/key/v1"

// refEncoding writes keys in lower-case base32 without padding: safe in
// headers, Message-IDs and file names, and unambiguous when read aloud.
var refEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// refBytes is how much of the key digest the reference keeps: 160 bits.
const refBytes = 20

// deriveRef returns the request reference of a logical action: prefix "/"
// and the digest of the key version, prefix, principal, session and either
// the action id or the canonical identifying fields. Each part is length
// prefixed, so no two different tuples share an encoding.
func deriveRef(prefix string, s Scope, actionID string, identifying []byte) string {
	h := sha256.New()
	writePart(h, []byte(keyVersion))
	writePart(h, []byte(prefix))
	writePart(h, []byte(s.Principal))
	writePart(h, []byte(s.Session))
	if actionID != "" {
		writePart(h, []byte("action"))
		writePart(h, []byte(actionID))
	} else {
		writePart(h, []byte("fields"))
		writePart(h, identifying)
	}
	var sum [sha256.Size]byte
	return prefix + "/" + refEncoding.EncodeToString(h.Sum(sum[:0])[:refBytes])
}

func writePart(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// fingerprint digests the canonical form of the whole input.
func fingerprint(canonical []byte) Digest {
	h := sha256.New()
	writePart(h, []byte("retrysafe/fingerprint/v1"))
	writePart(h, canonical)
	var d Digest
	h.Sum(d[:0])
	return d
}

// principalDigest digests a principal; records keep the digest, not the name.
func principalDigest(p string) Digest {
	h := sha256.New()
	writePart(h, []byte("retrysafe/principal/v1"))
	writePart(h, []byte(p))
	var d Digest
	h.Sum(d[:0])
	return d
}
