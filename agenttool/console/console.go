package console

import (
	"crypto/rand"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/internal/printable"
)

// Viewer is the person using the console, as the application's Who
// function names them for one request.
type Viewer struct {
	// Name says who decides. It is recorded with every settlement the
	// viewer makes (as "operator:" + Name) and in the audit log, and it
	// keys the viewer's form tokens. Required.
	Name string
	// All lets the viewer see and settle every principal's actions.
	All bool
	// Principals, unless All is set, are the only principals whose actions
	// the viewer sees and settles, spelled exactly as trusted code passes
	// them to agenttool.WithScope. None: the viewer sees nothing.
	Principals []string
}

// Options configure a console. Operator and Who are required; every other
// zero value takes the default in its comment.
type Options struct {
	// Operator lists and settles the actions. Give it every guarded tool
	// whose records people settle here: its reconciler, compensation and
	// codec are the tool's.
	Operator *agenttool.Operator
	// Who answers, for each request, who the viewer is and which principals
	// they may see, from the application's own authentication (a session
	// cookie, a header set by a proxy). An error refuses the request (403;
	// the error goes to Logger, not to the browser).
	Who func(r *http.Request) (Viewer, error)
	// Approvals, if set, is the Approver given to the application's
	// at-most-once tools: the list then shows which actions the agent asked
	// about, with the call's scope.
	Approvals *Approvals
	// ShowScope says how a principal (and its session, "" when the console
	// knows only the principal) is shown to people. Default: the principal,
	// then the session, as they are.
	ShowScope func(agenttool.Scope) string
	// Secret keys the form tokens (32 bytes or more). Default: random bytes
	// drawn when the handler is made, so forms rendered before a restart,
	// or by another replica, are refused; set one shared Secret when
	// several replicas serve the console behind one address.
	Secret []byte
	// Logger receives the audit log (one record per decision: who, what,
	// which reference, why, and the result) and refused requests. nil
	// means discard.
	Logger *slog.Logger
	// Limit bounds how many actions the list reads, per principal of the
	// viewer (or in all, for a viewer of all). 0 means 200.
	Limit int
	// Now is the clock for ages. Default: time.Now.
	Now func() time.Time
}

// Handler serves the console. It is safe for concurrent use.
type Handler struct {
	opts   Options
	secret []byte
	mux    *http.ServeMux
	origin *http.CrossOriginProtection
	pages  *template.Template
}

// New returns a console for opts.
func New(opts Options) (*Handler, error) {
	if opts.Operator == nil {
		return nil, errors.New("console: Options.Operator is required")
	}
	if opts.Who == nil {
		return nil, errors.New("console: Options.Who is required: the console must know who is deciding, and what they may see")
	}
	h := &Handler{opts: opts, secret: opts.Secret, mux: http.NewServeMux(), origin: http.NewCrossOriginProtection(), pages: pages}
	if h.secret == nil {
		h.secret = make([]byte, 32)
		rand.Read(h.secret)
	} else if len(h.secret) < 32 {
		return nil, fmt.Errorf("console: Options.Secret has %d bytes; it needs 32 or more", len(h.secret))
	}
	if h.opts.ShowScope == nil {
		h.opts.ShowScope = showScope
	}
	if h.opts.Logger == nil {
		h.opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if h.opts.Limit <= 0 {
		h.opts.Limit = 200
	}
	if h.opts.Now == nil {
		h.opts.Now = time.Now
	}
	h.mux.HandleFunc("GET /{$}", h.list)
	h.mux.HandleFunc("GET /action", h.detail)
	h.mux.HandleFunc("POST /action", h.act)
	return h, nil
}

// ServeHTTP serves the list at "/", an action at "/action?ref=REF", and
// decisions as POSTs to "/action". Links are relative: mount the handler
// at a path that ends in "/", with http.StripPrefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

func showScope(s agenttool.Scope) string {
	if s.Session == "" {
		return s.Principal
	}
	return s.Principal + " · " + s.Session
}

// plain answers with a status and a plain-text message.
func plain(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, "%d %s: %s\n", status, http.StatusText(status), printable.Line(msg))
}

// errText is an error's text for a log record, through the same filter as
// pages ("" for nil): an error may quote a destination.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return printable.Line(err.Error())
}
