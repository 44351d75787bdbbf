package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// consoleOut is the transcript of a run with -console: it tells, once, the
// console's address.
type consoleOut struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	addr chan string
}

var consoleLine = regexp.MustCompile(`console: (http://\S+/) `)

func (o *consoleOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if m := consoleLine.FindSubmatch(p); m != nil {
		o.addr <- string(m[1])
	}
	return len(p), nil
}

// With -console, the email the mail server cannot place stays unknown, and
// a person settles it in the console, on loopback: the record then says
// applied, by whom and why.
func TestConsoleSettlesThePendingEmail(t *testing.T) {
	db := filepath.Join(t.TempDir(), "retrysafe.db")
	out := &consoleOut{addr: make(chan string, 1)}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	type ran struct {
		sum demo.Summary
		err error
	}
	done := make(chan ran, 1)
	go func() {
		sum, err := demo.Run(ctx, example, []string{"-fault", "index-down", "-console", "127.0.0.1:0", "-db", db}, out, os.Getenv)
		done <- ran{sum, err}
	}()
	var base string
	select {
	case base = <-out.addr:
	case r := <-done:
		t.Fatalf("the run ended before serving the console: %v\n%s", r.err, out.buf.String())
	}

	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	list := get("")
	ref := regexp.MustCompile(`send_email/[a-z0-9]+`).FindString(list)
	if ref == "" || !strings.Contains(list, "Sam (tenant 42)") || !strings.Contains(list, "the mailbox search is down") {
		t.Fatalf("the console does not list the pending email:\n%s", list)
	}
	page := get("action?ref=" + url.QueryEscape(ref))
	token := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if token == nil {
		t.Fatalf("no form on the email's page:\n%s", page)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.PostForm(base+"action", url.Values{"csrf": {token[1]}, "ref": {ref}, "do": {"applied"}, "attempts": {"1"},
		"reason": {"the mail server's log shows the message stored"}, "result": {`{"message_id":"<` + strings.ReplaceAll(ref, "/", ".") + `@agent.example>"}`}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resolving applied: %d", resp.StatusCode)
	}

	stop()
	r := <-done
	if r.err != nil || r.sum.Effects != 1 {
		t.Fatalf("the run: %v, %d effects\n%s", r.err, r.sum.Effects, out.buf.String())
	}
	store, err := boltstore.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec, err := store.Get(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != agenttool.Succeeded || rec.Resolution == nil || rec.Resolution.By != "operator:local-operator" {
		t.Errorf("after the console: %v, %+v", rec.State, rec.Resolution)
	}
	env, err := envelope.Parse(rec.Outcome)
	if err != nil || env.Status != envelope.Success || !strings.Contains(string(env.Result), "@agent.example") {
		t.Errorf("the recorded outcome: %s, %v", rec.Outcome, err)
	}
}

// The console is never served to the network.
func TestConsoleOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.0.2.1:8080", "example.com:80", "127.0.0.1"} {
		var out bytes.Buffer
		_, err := demo.Run(context.Background(), example, []string{"-console", addr}, &out, os.Getenv)
		if err == nil || !strings.Contains(err.Error(), "loopback only") {
			t.Errorf("-console %s: %v", addr, err)
		}
		if strings.Contains(out.String(), "mail server") {
			t.Errorf("-console %s: the agent ran before the address was refused:\n%s", addr, out.String())
		}
	}
}
