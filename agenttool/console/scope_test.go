package console_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// A viewer limited to one principal neither lists nor sees nor settles
// another principal's action, even with its reference in hand: the answer
// is the one for a reference that does not exist.
func TestPrincipalIsolation(t *testing.T) {
	w := newWorld(t, nil)
	anas := w.lostCharge(ana, "Ana Lima", chargeAna)
	bobs := w.lostCharge(bob, "Bob Stone", chargeBob)

	list := text(w.get("bob", "/").body)
	if !strings.Contains(list, bobs.RequestRef) || strings.Contains(list, anas.RequestRef) || strings.Contains(list, "Ana") {
		t.Errorf("bob's list:\n%s", list)
	}
	if !strings.Contains(list, "Bob Stone (tenant 2), conversation-1") {
		t.Errorf("bob's list does not show his scope:\n%s", list)
	}
	both := text(w.get("both", "/").body)
	if !strings.Contains(both, bobs.RequestRef) || !strings.Contains(both, anas.RequestRef) {
		t.Errorf("a viewer of both principals sees:\n%s", both)
	}

	missing := w.get("bob", detailPath("charge_card/nosuchaction"))
	guessed := w.get("bob", detailPath(anas.RequestRef))
	if guessed.status != http.StatusNotFound || guessed.body != missing.body || strings.Contains(guessed.body, "Ana") {
		t.Errorf("bob opens ana's action: %d %q; a missing one: %d %q", guessed.status, guessed.body, missing.status, missing.body)
	}

	// With bob's own valid token, every decision on ana's action is refused
	// as not found, and changes nothing.
	token := w.token("bob", bobs.RequestRef)
	for _, do := range []string{"reconcile", "applied", "not-applied", "retry", "compensate"} {
		p := w.do("bob", http.MethodPost, "/action", url.Values{"csrf": {token}, "ref": {anas.RequestRef}, "do": {do},
			"attempts": {strconv.Itoa(anas.Attempts)}, "reason": {"guessed"}, "result": {`{}`}})
		if p.status != http.StatusNotFound || p.body != missing.body {
			t.Errorf("bob's %s on ana's action: %d %q", do, p.status, p.body)
		}
	}
	if !w.awaiting(anas.RequestRef) || len(w.refunded) != 0 {
		t.Fatalf("bob changed ana's action: %+v, refunds %v", w.record(anas.RequestRef), w.refunded)
	}
	// His own, he settles.
	w.settled(w.decide("bob", bobs.RequestRef, "retry", bobs.Attempts, "no charge at the processor"), bobs.RequestRef, "bob", "One retry approved")
	if !w.awaiting(anas.RequestRef) {
		t.Fatal("settling bob's action changed ana's")
	}
	// A viewer of no principal sees nothing.
	if got := text(w.get("nobody", "/").body); !strings.Contains(got, "Nothing awaits a decision.") {
		t.Errorf("a viewer of no principal sees:\n%s", got)
	}
	if p := w.get("nobody", detailPath(anas.RequestRef)); p.status != http.StatusNotFound {
		t.Errorf("a viewer of no principal opens an action: %d", p.status)
	}
}

// Labels, scopes, answers and reasons are shown as text: a label that is
// markup is escaped, never run.
func TestPagesEscapeText(t *testing.T) {
	w := newWorld(t, nil)
	const label = `<script>alert("owned")</script><img src=x onerror=alert(1)>`
	charge := w.lostCharge(ana, label, chargeAna)
	for _, path := range []string{"/", detailPath(charge.RequestRef)} {
		p := w.get("maria", path)
		if strings.Contains(p.body, "<script>") || strings.Contains(p.body, "<img") {
			t.Errorf("%s renders the label as markup:\n%s", path, p.body)
		}
		if !strings.Contains(p.body, "&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;") || !strings.Contains(text(p.body), label) {
			t.Errorf("%s does not show the label as text:\n%s", path, p.body)
		}
	}
	// A refused decision shows the reason typed back, as text too.
	p := w.decide("maria", charge.RequestRef, "applied", 1, `</textarea><script>x()</script>`, "result", "{")
	if p.status != http.StatusBadRequest || strings.Contains(p.body, "<script>") || !strings.Contains(p.body, "&lt;/textarea&gt;&lt;script&gt;x()&lt;/script&gt;") {
		t.Errorf("the reason is not escaped:\n%s", p.body)
	}
}

// Mounted under a prefix, every link, form and redirect stays under it.
func TestMountedUnderPrefix(t *testing.T) {
	w := newWorld(t, func(h http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/ops/console/", http.StripPrefix("/ops/console", h))
		return mux
	})
	charge := w.lostCharge(ana, "Ana Lima", chargeAna)
	list := w.get("maria", "/ops/console/")
	link := `href="action?ref=` + strings.ReplaceAll(charge.RequestRef, "/", "%2f") + `"`
	if list.status != http.StatusOK || !strings.Contains(list.body, link) {
		t.Fatalf("the list under /ops/console/: %d\n%s", list.status, list.body)
	}
	base, _ := url.Parse(w.srv.URL + "/ops/console/")
	detail, _ := base.Parse("action?ref=" + url.QueryEscape(charge.RequestRef))
	p := w.get("maria", detail.RequestURI())
	m := tokenField.FindStringSubmatch(p.body)
	if p.status != http.StatusOK || m == nil || !strings.Contains(p.body, `<form method="post" action="action"`) || !strings.Contains(p.body, `<a href="./">`) {
		t.Fatalf("the page under /ops/console/: %d\n%s", p.status, p.body)
	}
	post := w.do("maria", http.MethodPost, "/ops/console/action", url.Values{"csrf": {m[1]}, "ref": {charge.RequestRef},
		"do": {"retry"}, "attempts": {"1"}, "reason": {"no charge found"}})
	next, _ := detail.Parse(post.location)
	if post.status != http.StatusSeeOther || next.Path != "/ops/console/action" {
		t.Fatalf("the decision redirects to %q (%s); want under /ops/console/", post.location, next)
	}
	if got := text(w.get("maria", next.RequestURI()).body); !strings.Contains(got, "One retry approved") {
		t.Errorf("after the redirect:\n%s", got)
	}
}
