package agenttool

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// NewSealingCodec returns a Codec that encrypts what it encodes with
// AES-256-GCM under key (32 bytes: keep it as secret as a database
// password), each value with a random nonce, and bound to the record's
// key: a value copied onto another record does not decode. For
// Options.InputCodec (inputs a tool keeps) or Options.Codec (everything a
// store keeps that came from an outcome or a person). Losing the key
// loses what it sealed.
func NewSealingCodec(key []byte) (Codec, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("agenttool: a sealing key is 32 bytes, not %d: %w", len(key), ErrInvalidOptions)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return sealingCodec{aead}, nil
}

type sealingCodec struct{ aead cipher.AEAD }

func (c sealingCodec) Encode(key string, b []byte) ([]byte, error) {
	nonce := make([]byte, c.aead.NonceSize(), c.aead.NonceSize()+len(b)+c.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return c.aead.Seal(nonce, nonce, b, []byte(key)), nil
}

func (c sealingCodec) Decode(key string, b []byte) ([]byte, error) {
	n := c.aead.NonceSize()
	if len(b) < n+c.aead.Overhead() {
		return nil, errors.New("agenttool: a sealed value too short to be one")
	}
	return c.aead.Open(nil, b[:n], b[n:], []byte(key))
}
