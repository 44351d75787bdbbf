package envelope_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
)

type definiteErr struct{}

func (definiteErr) Error() string  { return "rejected by destination" }
func (definiteErr) Definite() bool { return true }

type safeToRetryErr struct{}

func (safeToRetryErr) Error() string     { return "conn closed before send" }
func (safeToRetryErr) SafeToRetry() bool { return true }

type maybeAppliedErr struct{}

func (maybeAppliedErr) Error() string      { return "commit acknowledgement lost" }
func (maybeAppliedErr) MaybeApplied() bool { return true }

// closedPort returns a loopback address on which nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestClassify(t *testing.T) {
	_, refused := net.DialTimeout("tcp", closedPort(t), time.Second)
	if refused == nil {
		t.Fatal("dial to a closed port succeeded")
	}
	_, httpRefused := http.Post("http://"+closedPort(t)+"/send", "text/plain", nil)

	// A server that accepts the request and then resets without answering.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}))
	defer srv.Close()
	_, reset := http.Post(srv.URL, "text/plain", nil)

	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer slow.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, slow.URL, nil)
	_, deadline := http.DefaultClient.Do(req)

	tests := []struct {
		name string
		err  error
		want envelope.Class
	}{
		{"unclassified", errors.New("boom"), envelope.Unknown},
		{"marked definite", envelope.MarkDefinite(errors.New("bad address"), "invalid_recipient"), envelope.Definite},
		{"marked transient", envelope.MarkTransient(io.ErrUnexpectedEOF), envelope.Transient},
		{"marked unknown wins over dial", envelope.MarkUnknown(refused), envelope.Unknown},
		{"wrapped mark", fmt.Errorf("send: %w", envelope.MarkDefinite(errors.New("x"), "")), envelope.Definite},
		{"Definite() interface", fmt.Errorf("w: %w", definiteErr{}), envelope.Definite},
		{"SafeToRetry() interface", safeToRetryErr{}, envelope.Transient},
		{"MaybeApplied() interface", maybeAppliedErr{}, envelope.Unknown},
		{"real connection refused", refused, envelope.Transient},
		{"real HTTP connection refused", httpRefused, envelope.Transient},
		{"DNS failure", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "mail.invalid", IsNotFound: true}}, envelope.Transient},
		{"bare DNS error", &net.DNSError{Err: "server misbehaving", Name: "x"}, envelope.Transient},
		{"ECONNREFUSED", fmt.Errorf("x: %w", syscall.ECONNREFUSED), envelope.Transient},
		{"real reset after request written", reset, envelope.Unknown},
		{"real deadline after request written", deadline, envelope.Unknown},
		{"context deadline", context.DeadlineExceeded, envelope.Unknown},
		{"context canceled", context.Canceled, envelope.Unknown},
		{"ECONNRESET", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, envelope.Unknown},
		{"EOF", io.EOF, envelope.Unknown},
		{"HTTP 422", &envelope.HTTPError{StatusCode: 422}, envelope.Definite},
		{"HTTP 503 wrapped", fmt.Errorf("book: %w", &envelope.HTTPError{StatusCode: 503}), envelope.Transient},
		{"HTTP 502 POST", &envelope.HTTPError{StatusCode: 502, Method: "POST"}, envelope.Unknown},
		{"HTTP 502 PUT", &envelope.HTTPError{StatusCode: 502, Method: "PUT"}, envelope.Transient},
	}
	for _, tt := range tests {
		if got := envelope.Classify(tt.err); got != tt.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestClassifyHTTP(t *testing.T) {
	for _, tt := range []struct {
		status int
		method string
		want   envelope.Class
	}{
		{400, "POST", envelope.Definite}, {401, "POST", envelope.Definite}, {403, "POST", envelope.Definite},
		{404, "POST", envelope.Definite}, {422, "POST", envelope.Definite}, {410, "GET", envelope.Definite},
		{429, "POST", envelope.Transient}, {503, "POST", envelope.Transient}, {408, "POST", envelope.Transient},
		{409, "POST", envelope.Transient},
		{500, "POST", envelope.Unknown}, {502, "POST", envelope.Unknown}, {504, "POST", envelope.Unknown},
		{500, "", envelope.Unknown}, {500, "PATCH", envelope.Unknown},
		{500, "GET", envelope.Transient}, {504, "DELETE", envelope.Transient},
		{501, "POST", envelope.Definite}, {200, "POST", envelope.Unknown},
	} {
		if got := envelope.ClassifyHTTP(tt.status, tt.method); got != tt.want {
			t.Errorf("ClassifyHTTP(%d, %q) = %v, want %v", tt.status, tt.method, got, tt.want)
		}
	}
}

func TestCode(t *testing.T) {
	if got := envelope.Code(fmt.Errorf("w: %w", envelope.MarkDefinite(errors.New("x"), "invalid_recipient"))); got != "invalid_recipient" {
		t.Errorf("Code = %q", got)
	}
	if got := envelope.Code(&envelope.HTTPError{StatusCode: 404}); got != "http_404" {
		t.Errorf("Code(HTTP 404) = %q", got)
	}
	if got := envelope.Code(errors.New("plain")); got != "" {
		t.Errorf("Code(plain) = %q", got)
	}
	if envelope.MarkDefinite(nil, "x") != nil || envelope.MarkTransient(nil) != nil || envelope.MarkUnknown(nil) != nil {
		t.Error("marking nil must stay nil")
	}
}
