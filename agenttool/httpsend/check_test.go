package httpsend_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool/httpsend"
	"github.com/retrysafe/retrysafe/envelope"
)

// A response that is not 2xx is an HTTPError that envelope.Classify
// classes by its status and method: a refusal is definite, not unknown.
func TestCheckClassesAResponseByItsStatus(t *testing.T) {
	cases := []struct {
		status int
		method string
		body   string
		want   envelope.Class
		msg    string
	}{
		{422, http.MethodPost, ` {"error":"amount_cents must be positive"}` + "\n", envelope.Definite, `{"error":"amount_cents must be positive"}`},
		{404, http.MethodGet, "", envelope.Definite, ""},
		{409, http.MethodPost, "in progress", envelope.Transient, "in progress"},
		{503, http.MethodPost, "", envelope.Transient, ""},
		{500, http.MethodPost, "", envelope.Unknown, ""},
		{502, "", "", envelope.Transient, ""}, // "" is a GET to net/http
		{502, http.MethodPatch, strings.Repeat("x", 600), envelope.Unknown, strings.Repeat("x", 512)},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(http.MethodGet, "http://api.example/", nil)
		req.Method = c.method
		resp := &http.Response{StatusCode: c.status, Request: req, Body: io.NopCloser(strings.NewReader(c.body))}
		err := httpsend.Check(resp)
		var h *envelope.HTTPError
		if !errors.As(err, &h) {
			t.Fatalf("%d: Check returned %v, want an *envelope.HTTPError", c.status, err)
		}
		if got := envelope.Classify(err); got != c.want || h.Message != c.msg {
			t.Errorf("%d %q: classed %v with message %q; want %v and %q", c.status, c.method, got, h.Message, c.want, c.msg)
		}
	}
	for _, status := range []int{200, 201, 204} {
		if err := httpsend.Check(&http.Response{StatusCode: status, Body: http.NoBody}); err != nil {
			t.Errorf("%d: %v, want nil", status, err)
		}
	}
}
