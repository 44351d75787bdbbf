package httpsend_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/httpsend"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

var fastRetry = agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond}

func scoped() context.Context {
	return agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9")
}

// An attempt sends its request once. The API acts on the first POST, on a
// connection that served a request before, and drops the connection
// before answering. A keyed tool's retry is the engine's next attempt,
// which the API replays: one invoice, and an ordinary success (the replay
// is of this call's own first attempt). An at-most-once tool stops at an
// unknown outcome: one message. Over HTTP/1.1 net/http would send the
// first POST again on its own, making a second message, or a replay the
// envelope would have taken for an earlier call's.
func TestAnAttemptSendsItsRequestOnce(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
		mode := plainHTTP1
		if proto == "HTTP/2" {
			mode = tlsHTTP2
		}
		for _, class := range []agenttool.Class{agenttool.Keyed, agenttool.AtMostOnce} {
			t.Run(proto+"/"+class.String(), func(t *testing.T) {
				api := &invoiceAPI{keyed: class == agenttool.Keyed, drop: true}
				srv, base := startAPI(t, api, mode)
				client := &http.Client{Transport: &httpsend.Transport{Base: base}}
				warmUp(t, client, srv.URL)
				tool, err := agenttool.New("create_invoice", "Create one invoice.", createInvoice(client, srv.URL),
					agenttool.Options{Store: memstore.New(), Class: class, Retry: fastRetry})
				if err != nil {
					t.Fatal(err)
				}
				env := tool.Invoke(scoped(), `{"customer":"ACME Corp","amount_cents":36000}`)
				if n := api.count(); n != 1 {
					t.Errorf("the API acted %d times, want once; the envelope: %s", n, env)
				}
				if env.Replayed {
					t.Errorf("the envelope says replayed, but no earlier call sent anything: %s", env)
				}
				switch class {
				case agenttool.Keyed:
					if env.Status != envelope.Success || env.Attempts != 2 || env.Note != "" {
						t.Errorf("keyed: %s; want an ordinary success after 2 attempts", env)
					}
				default:
					if env.Status != envelope.UnknownOutcome || env.Attempts != 1 {
						t.Errorf("at most once: %s; want unknown_outcome after 1 attempt", env)
					}
				}
			})
		}
	}
}

// post POSTs to url/messages with client: with an Idempotency-Key header
// if key, a body if body, and GetBody cleared if noGetBody.
func post(client *http.Client, url string, key, body, noGetBody bool) error {
	var rd io.Reader
	if body {
		rd = strings.NewReader(`{"channel":"billing","text":"Invoice sent."}`)
	}
	req, err := http.NewRequest(http.MethodPost, url+"/messages", rd)
	if err != nil {
		return err
	}
	if key {
		req.Header.Set("Idempotency-Key", "post_message/7wo2opzy")
	}
	if noGetBody {
		req.GetBody = nil
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// What net/http's HTTP/1 transport sends again by itself, as the package
// documentation says, and that Transport sends each request once: a POST
// is read and acted on, on a connection that served a request before,
// and the connection is dropped before the response.
func TestHTTP1ResendsAfterTheServerActed(t *testing.T) {
	cases := []struct {
		name                 string
		key, body, noGetBody bool
		netHTTP              int // the effects through net/http's own transport
	}{
		{"keyed POST", true, true, false, 2},
		{"keyed POST, GetBody cleared", true, true, true, 1},
		{"keyed POST without a body", true, false, true, 2}, // clearing GetBody does not help
		{"POST without a key", false, true, false, 1},
	}
	for _, c := range cases {
		throughBoth(t, c.name, func(t *testing.T, ours bool) {
			api := &invoiceAPI{drop: true} // acts on every POST
			srv, base := startAPI(t, api, plainHTTP1)
			client := through(base, ours)
			warmUp(t, client, srv.URL)
			err := post(client, srv.URL, c.key, c.body, c.noGetBody)
			want := c.netHTTP
			if ours {
				want = 1
			}
			if n := api.count(); n != want {
				t.Errorf("the API acted %d times, want %d (error: %v)", n, want, err)
			}
			if ours && (err == nil || envelope.Classify(err) != envelope.Unknown) {
				t.Errorf("error %v (%v); want one classed unknown: the request was sent", err, envelope.Classify(err))
			}
		})
	}
}

// throughBoth runs f as two subtests of name: through net/http's own
// transport (ours false), and through a Transport (ours true).
func throughBoth(t *testing.T, name string, f func(t *testing.T, ours bool)) {
	t.Helper()
	t.Run(name+"/net/http", func(t *testing.T) { f(t, false) })
	t.Run(name+"/httpsend", func(t *testing.T) { f(t, true) })
}

// through returns a client that sends through base, or through a
// Transport over base if ours.
func through(base *http.Transport, ours bool) *http.Client {
	if ours {
		return &http.Client{Transport: &httpsend.Transport{Base: base}}
	}
	return &http.Client{Transport: base}
}

// What net/http's HTTP/2 transport sends again by itself: after
// RST_STREAM with REFUSED_STREAM or a GOAWAY that leaves the stream out,
// which promise the server did not process the stream, and after
// RST_STREAM with PROTOCOL_ERROR, which promises nothing; not after the
// connection breaks. Transport stops all three, since the transport does
// not say which it is retrying: the first two are answered unknown
// although nothing was done, the third would have acted twice.
func TestHTTP2ResendsAfterAStreamReset(t *testing.T) {
	cases := []struct {
		name    string
		first   func(*h2Stream)
		netHTTP int  // the effects through net/http's own transport
		resent  bool // net/http sent it again, and its copy was answered
		ours    int  // the effects through Transport, whose error is unknown
	}{
		{"PROTOCOL_ERROR after acting", func(st *h2Stream) { st.act(); st.reset(codeProtocolError) }, 2, true, 1},
		{"REFUSED_STREAM", func(st *h2Stream) { st.reset(codeRefusedStream) }, 1, true, 0},
		{"GOAWAY leaving the stream out", func(st *h2Stream) { st.goAway() }, 1, true, 0},
		{"connection dropped after acting", func(st *h2Stream) { st.act(); st.w.c.Close() }, 1, false, 1},
	}
	for _, c := range cases {
		throughBoth(t, c.name, func(t *testing.T, ours bool) {
			s := &h2Server{answer: func(n int, st *h2Stream) {
				if n == 1 {
					c.first(st)
					return
				}
				st.act()
				st.ok()
			}}
			url := startH2(t, s)
			err := post(through(h2Client(), ours), url, false, true, false)
			switch {
			case !ours && ((err == nil) != c.resent || s.count() != c.netHTTP):
				t.Errorf("net/http: %d effects, error %v; want %d, and a response %v", s.count(), err, c.netHTTP, c.resent)
			case ours && (envelope.Classify(err) != envelope.Unknown || errors.Is(err, httpsend.ErrNotResent) != c.resent || s.count() != c.ours):
				t.Errorf("httpsend: %d effects, error %v (%v); want %d, an unknown error, ErrNotResent %v", s.count(), err, envelope.Classify(err), c.ours, c.resent)
			}
		})
	}
}

// An error says whether the request may have been sent: transient if its
// head was never written, unknown otherwise.
func TestErrorsSayWhetherTheRequestWasSent(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String()
	closed.Close()
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	dropping := &invoiceAPI{drop: true}
	dropSrv, dropBase := startAPI(t, dropping, plainHTTP1)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	cases := []struct {
		name string
		ctx  context.Context
		url  string
		base *http.Transport
		want envelope.Class
	}{
		{"connection refused", context.Background(), refused, nil, envelope.Transient},
		{"certificate not trusted", context.Background(), tlsSrv.URL, &http.Transport{}, envelope.Transient},
		{"cancelled before sending", cancelled, dropSrv.URL, dropBase, envelope.Transient},
		{"connection dropped after the server read it", context.Background(), dropSrv.URL, dropBase, envelope.Unknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.url+"/messages", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Transport: &httpsend.Transport{Base: c.base}}
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatal("the request succeeded")
			}
			if got := envelope.Classify(err); got != c.want {
				t.Errorf("%v is classed %v, want %v", err, got, c.want)
			}
		})
	}
}

// Each request goes on a connection of its own, which net/http's HTTP/1
// transport never sends a request on twice, and on which no server can
// close an idle connection just as a request is written on it.
func TestEachRequestHasAConnectionOfItsOwn(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		var mu sync.Mutex
		conns := map[string]bool{}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			conns[r.RemoteAddr] = true
			mu.Unlock()
		}))
		if h2 {
			srv.EnableHTTP2 = true
			srv.StartTLS()
		} else {
			srv.Start()
		}
		client := &http.Client{Transport: &httpsend.Transport{Base: srv.Client().Transport.(*http.Transport)}}
		for range 3 {
			if err := post(client, srv.URL, true, true, false); err != nil {
				t.Fatal(err)
			}
		}
		srv.Close()
		if len(conns) != 3 {
			t.Errorf("HTTP/2 %v: 3 requests came on %d connections, want 3", h2, len(conns))
		}
	}
}

// One Transport serves many requests at once, each on its own connection.
func TestTransportIsSafeForConcurrentUse(t *testing.T) {
	api := &invoiceAPI{}
	srv, base := startAPI(t, api, tlsHTTP2)
	client := &http.Client{Transport: &httpsend.Transport{Base: base}}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() { errs <- post(client, srv.URL, false, true, false) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := api.count(); n != 16 {
		t.Errorf("the API acted %d times, want 16", n)
	}
}

// Through an HTTP proxy, by CONNECT, a request goes once and its answer
// comes back: the proxy's CONNECT is not taken for the request's head.
func TestThroughAProxy(t *testing.T) {
	var tunnels atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		tunnels.Add(1)
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer up.Close()
		down, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer down.Close()
		io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n")
		go io.Copy(up, down)
		io.Copy(down, up)
	}))
	defer proxy.Close()
	proxyURL, err := url.Parse(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []int{tlsHTTP1, tlsHTTP2} {
		api := &invoiceAPI{}
		srv, base := startAPI(t, api, mode)
		base = base.Clone()
		base.Proxy = http.ProxyURL(proxyURL)
		if err := post(through(base, true), srv.URL, true, true, false); err != nil || api.count() != 1 {
			t.Errorf("HTTP/2 %v: error %v, %d effects; want a response and 1", mode == tlsHTTP2, err, api.count())
		}
	}
	if n := tunnels.Load(); n != 2 {
		t.Errorf("the proxy opened %d tunnels, want 2", n)
	}
}

// seeOtherAPI is a chat API that answers a POST the Post/Redirect/Get way:
// it posts the message, then answers 303 See Other with the message's
// location, which a client reads with a GET. The location is on a host
// that does not answer (a status host that is down, a server that went
// away right after acting).
type seeOtherAPI struct {
	location string
	posts    atomic.Int64
}

func (a *seeOtherAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusOK)
		return
	}
	io.Copy(io.Discard, r.Body)
	n := a.posts.Add(1)
	w.Header().Set("Location", a.location+"/messages/"+string(rune('0'+n)))
	w.WriteHeader(http.StatusSeeOther)
}

// An error says whether the request may have been sent: a round trip that
// failed before its own head was written is transient only if no request
// of the same client call was sent before it. http.Client follows a
// redirect with a new round trip; the POST that got the 303 was sent, and
// acted on.
//
// A chat tool (at-most-once: the API does not dedupe), written the
// documented way: its POST is answered 303 See Other, and the client's GET
// of the location is refused (nothing listens there). Transport classes
// that GET's error transient (its head was never written), client.Do
// returns it wrapped, and the engine, reading "not applied", attempts
// again: three messages, and the envelope says definite_failure,
// unavailable, "Nothing was done".
func TestErrorsSayWhetherTheRequestWasSent_AfterARedirect(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + closed.Addr().String()
	closed.Close()
	api := &seeOtherAPI{location: gone}
	srv := httptest.NewServer(api)
	defer srv.Close()
	client := &http.Client{Transport: &httpsend.Transport{}}

	postMessage := func(ctx context.Context, in struct {
		Channel string `json:"channel"`
		Text    string `json:"text"`
	}) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/messages", strings.NewReader(`{"text":"hi"}`))
		if err != nil {
			return "", envelope.MarkDefinite(err, "bad_request")
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err // transient if it was not sent, unknown if it was
		}
		defer resp.Body.Close()
		if err := httpsend.Check(resp); err != nil {
			return "", err
		}
		return resp.Request.URL.String(), nil
	}
	tool, err := agenttool.New("post_message", "Post one message.", postMessage,
		agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), `{"channel":"#team","text":"Lunch at noon?"}`)
	t.Logf("envelope: %s", env)
	if n := api.posts.Load(); n != 1 {
		t.Errorf("the API posted %d messages for one call, want 1", n)
	}
	if env.Status == envelope.DefiniteFailure {
		t.Errorf("the envelope says definite_failure, but the API acted on the POST: %s", env)
	}
}
