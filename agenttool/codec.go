package agenttool

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// What a store keeps that came from a person or a tool (results, error
// text, operators' notes, labels) passes through the tool's Codec (I8).

type plainCodec struct{}

func (plainCodec) Encode(_ string, b []byte) ([]byte, error) { return b, nil }
func (plainCodec) Decode(_ string, b []byte) ([]byte, error) { return b, nil }

// sealPrefix starts a resolution's who or why as the tool's codec encoded
// it, in base64.
const sealPrefix = "sealed:"

// seal returns s encoded by the tool's codec, in base64 after sealPrefix.
// The default codec keeps s as it is, unless s itself starts with the
// prefix.
func (t *Tool) seal(key, s string) (string, error) {
	if _, plain := t.cfg.codec.(plainCodec); s == "" || (plain && !strings.HasPrefix(s, sealPrefix)) {
		return s, nil
	}
	b, err := t.cfg.codec.Encode(key, []byte(s))
	if err != nil {
		return "", err
	}
	return sealPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// unseal returns what seal encoded, decoded by the tool's codec; a string
// it cannot decode comes back as it is.
func (t *Tool) unseal(key, s string) string {
	if !strings.HasPrefix(s, sealPrefix) {
		return s
	}
	b, err := base64.StdEncoding.DecodeString(s[len(sealPrefix):])
	if err == nil {
		b, err = t.cfg.codec.Decode(key, b)
	}
	if err != nil {
		return s
	}
	return string(b)
}

// sealResolution returns res with By and Why encoded by the tool's codec,
// unless the codec is the default one, which keeps them as they are.
func (t *Tool) sealResolution(key string, res *Resolution) (*Resolution, error) {
	out := *res
	for _, f := range []*string{&out.By, &out.Why} {
		sealed, err := t.seal(key, *f)
		if err != nil {
			return nil, fmt.Errorf("encoding the resolution: %w", err)
		}
		*f = sealed
	}
	return &out, nil
}

// openResolution returns res with By and Why decoded by the tool's codec,
// as far as it can.
func (t *Tool) openResolution(key string, res *Resolution) *Resolution {
	if res == nil {
		return nil
	}
	out := *res
	out.By, out.Why = t.unseal(key, out.By), t.unseal(key, out.Why)
	return &out
}
