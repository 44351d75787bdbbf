package console_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/retrysafe/retrysafe/envelope"
)

// chromium finds Debian's Chromium (apt-get install chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Skip("SKIPPED: Chromium is not installed (apt-get install chromium; .ci/run installs it), so the console was not tested in a real browser")
	return ""
}

// browse starts a headless Chromium with a fresh profile, made for a
// machine whose network is closed, and returns a context that drives it.
func browse(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	alloc, stop := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), // /dev/shm is small in containers
		chromedp.WindowSize(1180, 380),
	)
	t.Cleanup(stop)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithErrorf(t.Logf))
	t.Cleanup(cancel)
	// A bound on a browser that hangs, far above the few seconds a run
	// takes; go test's own -timeout would otherwise be the only one.
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelTimeout)
	return ctx
}

// signedIn is the application around the console in the browser test:
// "/login" sets a session cookie, and the console, mounted at /console/,
// is served only to a signed-in browser (the X-User header the test's Who
// reads stands for the application's session).
func signedIn(console http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "maria", Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
	})
	mux.Handle("/console/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("session")
		if err != nil {
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		r.Header.Set("X-User", c.Value)
		http.StripPrefix("/console", console).ServeHTTP(w, r)
	}))
	return mux
}

// In a real browser, a person opens the console, finds the unknown
// at-most-once charge at the top of the list, opens it and approves one
// retry; the tool's next call then runs it exactly once.
//
// With RETRYSAFE_SCREENSHOT=FILE, it also writes a PNG of the list with
// the pending actions to FILE (the README's picture):
//
//	RETRYSAFE_SCREENSHOT=$PWD/docs/console.png go test -run TestBrowser ./agenttool/console
func TestBrowserApprovesOneRetry(t *testing.T) {
	w := newWorld(t, signedIn)
	ctx := browse(t)
	w.lostEmail(bob, "Bob Stone")
	w.clock.advance(25 * time.Minute)
	charge := w.lostCharge(ana, "Ana Lima", chargeAna)
	w.clock.advance(4 * time.Minute)

	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	if err := chromedp.Do(ctx,
		chromedp.Navigate(w.srv.URL+"/login"),
		chromedp.WaitVisible(css("table")),
	); err != nil {
		t.Fatalf("opening the console: %v", err)
	}
	list, err := chromedp.Run(ctx, chromedp.Text(css("tbody tr:first-child")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(list, charge.RequestRef) || !strings.Contains(list, "at-most-once") || !strings.Contains(list, "Ana Lima") {
		t.Fatalf("the first row is not the unknown charge:\n%s", list)
	}
	if file := os.Getenv("RETRYSAFE_SCREENSHOT"); file != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the list page to %s", filepath.Base(file))
	}

	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.Search(`//a[normalize-space()="`+charge.RequestRef+`"]`)),
		chromedp.WaitVisible(css("#form-retry")),
	); err != nil {
		t.Fatalf("opening the charge: %v", err)
	}
	attempts, err := chromedp.Run(ctx, chromedp.Text(css("#attempts")))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(css("#reason-retry"), "The card processor has no charge for this card today."),
		chromedp.Click(css("#button-retry")),
		chromedp.WaitVisible(css("p.done")),
	); err != nil {
		t.Fatalf("approving one retry: %v", err)
	}
	done, err := chromedp.Run(ctx, chromedp.Text(css("p.done")))
	if err != nil {
		t.Fatal(err)
	}
	state, err := chromedp.Run(ctx, chromedp.Text(css("#state")))
	if err != nil {
		t.Fatal(err)
	}
	if attempts != "1" || !strings.Contains(done, "One retry approved") || state != "approved for one more attempt" {
		t.Fatalf("the page showed attempt %q, then said %q, state %q", attempts, done, state)
	}
	rec := w.record(charge.RequestRef)
	if !rec.RetryApproved || rec.Resolution.By != "operator:maria" || !strings.Contains(rec.Resolution.Why, "no charge for this card today") {
		t.Errorf("the record after the approval: %+v, %+v", rec.RetryApproved, rec.Resolution)
	}

	before := w.charges.Load()
	first := w.charge.Invoke(ctx2(ana), chargeAna)
	second := w.charge.Invoke(ctx2(ana), chargeAna)
	if n := w.charges.Load() - before; n != 1 {
		t.Errorf("after the approval the tool ran %d times; want exactly once", n)
	}
	if first.Status != envelope.Success || second.Status != envelope.Success || !second.Replayed {
		t.Errorf("after the approval: %s, then %s; want a success, then its replay", first, second)
	}

	// Back on the list, the charge no longer awaits a decision.
	if err := chromedp.Do(ctx,
		chromedp.Click(css(`a[href="./"]`)),
		chromedp.WaitVisible(css("h1")),
	); err != nil {
		t.Fatal(err)
	}
	body, err := chromedp.Run(ctx, chromedp.Text(css("body")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(body, charge.RequestRef) || !strings.Contains(body, "Bob Stone") {
		t.Errorf("the list after the approval:\n%s", body)
	}
}

func ctx2(principal string) context.Context { return ctx(principal, "") }
