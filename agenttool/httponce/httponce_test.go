package httponce_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/httponce"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// messages is a destination: it posts a message per request, or, when it
// dedupes, one per Idempotency-Key, answering a repeat with the first
// answer and Idempotent-Replayed: true.
type messages struct {
	mu     sync.Mutex
	dedupe bool
	posted map[string]int // by idempotency key ("" for none)
	total  int
}

// post records a request's effect and reports whether it was a replay.
func (m *messages) post(key string) (replayed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dedupe && key != "" && m.posted[key] > 0 {
		return true
	}
	m.posted[key]++
	m.total++
	return false
}

func (m *messages) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}

// breakingServer speaks HTTP/1.1 on 127.0.0.1. On the first connection it
// answers one request, keeps the connection alive, then reads the next
// request, acts on it, and closes the connection without answering: the
// reply is lost on a reused connection, as when a keep-alive connection
// breaks. Every later connection is served normally.
func breakingServer(t *testing.T, m *messages) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for n := 0; ; n++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c, m, n == 0)
		}
	}()
	return "http://" + l.Addr().String()
}

func serve(c net.Conn, m *messages, breaks bool) {
	defer c.Close()
	r := bufio.NewReader(c)
	for i := 0; ; i++ {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		if req.Method == http.MethodGet {
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			continue
		}
		replayed := m.post(req.Header.Get("Idempotency-Key"))
		if breaks && i > 0 {
			return // acted; the reply is lost with the connection
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nIdempotent-Replayed: %v\r\nContent-Length: 6\r\n\r\nposted", replayed)
	}
}

// postTool is the documented way of writing an HTTP tool: the reference as
// the Idempotency-Key, httponce's client, Check for the status, and the
// destination's replay told to the call.
func postTool(t *testing.T, client *http.Client, url string, class agenttool.Class) *agenttool.Tool {
	t.Helper()
	tool, err := agenttool.New("post_message", "Post a message.", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/messages", strings.NewReader(in.Text))
		if err != nil {
			return "", envelope.MarkDefinite(err, "bad_request")
		}
		req.Header.Set("Idempotency-Key", agenttool.RequestRef(ctx))
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if err := httponce.Check(resp); err != nil {
			return "", err
		}
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			agenttool.DestinationReplayed(ctx)
		}
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}, agenttool.Options{Store: memstore.New(), Class: class,
		Retry: agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func scope() context.Context {
	return agenttool.WithScope(context.Background(), "tenant-1/ana", "conversation-1")
}

// warm makes the client keep an idle connection to url.
func warm(t *testing.T, client *http.Client, url string) {
	t.Helper()
	resp, err := client.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// net/http resends a keyed POST by itself when a reused keep-alive
// connection breaks after the request was written. Through httponce's
// client it goes once per attempt: an at-most-once tool posts one message
// and says its outcome is unknown; a keyed tool's next attempt, under the
// same key, is replayed by the destination, and the envelope is the
// call's own success — not a replay of "an earlier request".
func TestAKeyedPostGoesOncePerAttemptOverHTTP1(t *testing.T) {
	t.Run("premise: net/http's own client resends it", func(t *testing.T) {
		m := &messages{posted: map[string]int{}}
		url := breakingServer(t, m)
		client := &http.Client{Transport: &http.Transport{}}
		warm(t, client, url)
		env := postTool(t, client, url, agenttool.AtMostOnce).Invoke(scope(), `{"text":"lunch at noon?"}`)
		if m.count() != 2 || env.Status != envelope.Success || env.Attempts != 1 {
			t.Fatalf("without httponce: %d messages, %s; the premise (a hidden resend) did not hold", m.count(), env)
		}
	})
	for _, tc := range []struct {
		class  agenttool.Class
		dedupe bool
		status envelope.Status
	}{
		{agenttool.AtMostOnce, false, envelope.UnknownOutcome},
		{agenttool.Keyed, true, envelope.Success},
	} {
		t.Run(tc.class.String(), func(t *testing.T) {
			m := &messages{posted: map[string]int{}, dedupe: tc.dedupe}
			url := breakingServer(t, m)
			client := httponce.Client(&http.Client{Transport: &http.Transport{}})
			warm(t, client, url)
			env := postTool(t, client, url, tc.class).Invoke(scope(), `{"text":"lunch at noon?"}`)
			if m.count() != 1 || env.Status != tc.status || env.Replayed {
				t.Errorf("%d messages, %s; want 1, %s, replayed false", m.count(), env, tc.status)
			}
		})
	}
}

// Over HTTP/2 net/http resends only what the server proved it did not
// process (or what never left): a stream the server reset after acting
// is not resent, through httponce's client as through net/http's.
func TestAKeyedPostGoesOncePerAttemptOverHTTP2(t *testing.T) {
	for _, tc := range []struct {
		class  agenttool.Class
		dedupe bool
		status envelope.Status
	}{
		{agenttool.AtMostOnce, false, envelope.UnknownOutcome},
		{agenttool.Keyed, true, envelope.Success},
	} {
		t.Run(tc.class.String(), func(t *testing.T) {
			m := &messages{posted: map[string]int{}, dedupe: tc.dedupe}
			var first sync.Once
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					io.WriteString(w, "ok")
					return
				}
				io.Copy(io.Discard, r.Body)
				replayed := m.post(r.Header.Get("Idempotency-Key"))
				lost := false
				first.Do(func() { lost = true })
				if lost {
					panic(http.ErrAbortHandler) // acted; the stream is reset, the reply lost
				}
				w.Header().Set("Idempotent-Replayed", fmt.Sprint(replayed))
				io.WriteString(w, "posted")
			}))
			srv.EnableHTTP2 = true
			srv.StartTLS()
			t.Cleanup(srv.Close)
			client := httponce.Client(srv.Client())
			warm(t, client, srv.URL)
			env := postTool(t, client, srv.URL, tc.class).Invoke(scope(), `{"text":"lunch at noon?"}`)
			if m.count() != 1 || env.Status != tc.status || env.Replayed {
				t.Errorf("%d messages, %s; want 1, %s, replayed false", m.count(), env, tc.status)
			}
		})
	}
}

// A POST with no body goes once too: net/http takes an empty keyed
// request for replayable; httponce gives it a body it cannot rewind.
func TestAnEmptyKeyedPostGoesOnce(t *testing.T) {
	m := &messages{posted: map[string]int{}}
	url := breakingServer(t, m)
	client := httponce.Client(&http.Client{Transport: &http.Transport{}})
	warm(t, client, url)
	req, _ := http.NewRequest(http.MethodPost, url+"/messages", nil)
	req.Header.Set("Idempotency-Key", "post/1")
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if m.count() != 1 || err == nil {
		t.Errorf("%d messages, err %v; want 1 and the broken connection's error", m.count(), err)
	}
}

// Check turns a non-2xx answer into an error Classify reads: a 4xx is
// definite, so the tool's refusal is not taken for an unknown outcome.
func TestCheckClassesByStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		method string
		want   envelope.Class
	}{
		{422, http.MethodPost, envelope.Definite},
		{429, http.MethodPost, envelope.Transient},
		{502, http.MethodPost, envelope.Unknown},
		{503, http.MethodPost, envelope.Transient},
	} {
		resp := &http.Response{StatusCode: tc.status, Body: io.NopCloser(strings.NewReader(`{"error":"no"}`)),
			Request: &http.Request{Method: tc.method}}
		err := httponce.Check(resp)
		if got := envelope.Classify(err); got != tc.want || !strings.Contains(err.Error(), `{"error":"no"}`) {
			t.Errorf("%d: %v classed %v; want %v, with the body", tc.status, err, got, tc.want)
		}
	}
	if err := httponce.Check(&http.Response{StatusCode: 201}); err != nil {
		t.Errorf("201: %v", err)
	}
}
