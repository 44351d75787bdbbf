package httpsend

import (
	"bytes"
	"io"
	"net/http"

	"github.com/retrysafe/retrysafe/envelope"
)

// maxMessage bounds how much of an error response's body Check keeps.
const maxMessage = 512

// Check returns nil if resp's status is 2xx. Otherwise it returns an
// [*envelope.HTTPError] with the status, the method of resp's request and,
// as its message, the start of the response's body (at most 512 bytes,
// trimmed), which it reads but does not close. [envelope.Classify]
// classes it by [envelope.ClassifyHTTP]: 408, 409, 425, 429 and 503 are
// transient (not applied; the call may be retried), any other 4xx, 501
// and 505 definite (not applied; a retry will not help), 500, 502, 504
// and the other 5xx unknown for a POST or PATCH (it may have been
// applied) and transient for a method HTTP calls idempotent (GET, PUT,
// DELETE …). Returned as it is, or wrapped, it keeps a refusal from
// reading as an unknown outcome, which would hold back the conversation's
// next writes.
//
// The message reaches the model, in the envelope's error.message: a tool
// whose destination's error bodies say more than a model should see
// clears the HTTPError's Message (see docs/writing-tools.md).
func Check(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	method := "" // unknown: classed as a POST
	if resp.Request != nil {
		method = resp.Request.Method
		if method == "" {
			method = http.MethodGet // as net/http sends it
		}
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxMessage))
	return &envelope.HTTPError{StatusCode: resp.StatusCode, Method: method, Message: string(bytes.TrimSpace(body))}
}
