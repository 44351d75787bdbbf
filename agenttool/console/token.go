package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

// token is the viewer's form token: an HMAC-SHA-256, under the handler's
// secret, of the viewer's name. Every page that offers a decision carries
// it in a hidden field, and every decision must bring it back. Another
// site can make a viewer's browser send a POST, with the viewer's cookies,
// but cannot read the console's pages, so it cannot know the token; and a
// token rendered for one viewer is refused for any other.
func (h *Handler) token(v Viewer) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte("retrysafe console form token\x00"))
	m.Write([]byte(v.Name))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// validToken reports whether got is v's token, in constant time.
func (h *Handler) validToken(v Viewer, got string) bool {
	return got != "" && hmac.Equal([]byte(got), []byte(h.token(v)))
}
