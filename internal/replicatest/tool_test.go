package replicatest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// email is send_email's input: the model writes all of it, and every field
// tells one email from another.
type email struct {
	To      string `json:"to" desc:"the recipient's address"`
	Subject string `json:"subject" desc:"the subject line"`
	Body    string `json:"body" desc:"the message"`
}

// sent is the destination's answer for an email it sent.
type sent struct {
	ID string `json:"id"`
	To string `json:"to"`
}

// The replicas' timings. A killed replica is restarted well within the
// lease; a paused one is held past it.
const (
	lease          = 2 * time.Second
	attemptTimeout = time.Second
	clockSkew      = 100 * time.Millisecond // the replicas share this machine's clock
	waitTimeout    = time.Second
	noticeHold     = 1500 * time.Millisecond
)

// The headers between a replica and the destination.
const (
	headerRef     = "X-Request-Ref" // the action's request reference
	headerToken   = "Fencing-Token" // the claim's fencing token (agenttool.CallInfo.Token)
	headerReplica = "X-Replica"     // which replica sends: for the test's faults only
	headerFenced  = "X-Fenced"      // on a "not found": no older token will be accepted from now on
)

// errStale is a write the destination refused for its fencing token.
var errStale = errors.New("the mail service refused this request: a newer claim of this action has been heard from (a higher fencing token); this request sent nothing")

// destinationClient is how a replica's tool reaches the mail service.
type destinationClient struct {
	url     string
	replica string
	http    *http.Client
	// pause, if set, is called before each write: the test may stop the
	// process there (SIGSTOP) — after the tool's last look at its context,
	// before its bytes leave — and then it reports true once resumed.
	pause func(ctx context.Context, ref, to string, token uint64) bool
}

// send is send_email: one POST, with the request reference and the claim's
// fencing token.
func (d destinationClient) send(ctx context.Context, in email) (sent, error) {
	info, _ := agenttool.CallInfoFrom(ctx)
	if d.pause != nil && d.pause(ctx, info.RequestRef, in.To, info.Token) {
		// Resumed: the write goes out whatever the context says by now, as
		// the write of a process paused past its last context check does.
		ctx = context.WithoutCancel(ctx)
	}
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/send", bytes.NewReader(body))
	if err != nil {
		return sent{}, envelope.MarkDefinite(err, "bad_request")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerRef, info.RequestRef)
	req.Header.Set(headerToken, strconv.FormatUint(info.Token, 10))
	req.Header.Set(headerReplica, d.replica)
	resp, err := d.http.Do(req)
	if err != nil {
		return sent{}, err // a failed dial is transient; a timeout or a reset unknown
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return sent{}, envelope.MarkUnknown(fmt.Errorf("reading the answer: %w", err))
	case resp.StatusCode == http.StatusPreconditionFailed:
		return sent{}, envelope.MarkDefinite(errStale, "stale_holder")
	case resp.StatusCode != http.StatusOK:
		return sent{}, &envelope.HTTPError{StatusCode: resp.StatusCode, Method: http.MethodPost, Message: string(data)}
	}
	var s sent
	if err := json.Unmarshal(data, &s); err != nil || s.ID == "" {
		return sent{}, envelope.MarkUnknown(fmt.Errorf("unreadable answer %q", data))
	}
	return s, nil
}

// status asks the mail service what became of ref, with the checker's
// fencing token when it has one.
func (d destinationClient) status(ctx context.Context, ref string) reconcile.Answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/status?ref="+url.QueryEscape(ref), nil)
	if err != nil {
		return reconcile.CantSayBecause(err)
	}
	if info, ok := agenttool.CallInfoFrom(ctx); ok && info.Token != 0 {
		req.Header.Set(headerToken, strconv.FormatUint(info.Token, 10))
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return reconcile.CantSayBecause(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode == http.StatusOK:
		return reconcile.AppliedWith(data)
	case resp.StatusCode == http.StatusConflict:
		return reconcile.StillPending()
	case resp.StatusCode == http.StatusNotFound && resp.Header.Get(headerFenced) != "":
		return reconcile.NotAppliedFenced()
	case resp.StatusCode == http.StatusNotFound:
		return reconcile.NotAppliedYet()
	}
	return reconcile.CantSayBecause(&envelope.HTTPError{StatusCode: resp.StatusCode, Method: http.MethodGet, Message: string(data)})
}

// newSendEmail returns send_email as every replica builds it (and the
// test, for its operator): Reconcilable, asking the mail service.
func newSendEmail(store agenttool.Store, d destinationClient, hooks agenttool.Hooks) (*agenttool.Tool, error) {
	return agenttool.New("send_email", "Send one email.", d.send, agenttool.Options{
		Store: store,
		Class: agenttool.Reconcilable,
		Reconciler: reconcile.Poll(reconcile.Func(d.status),
			reconcile.PollOptions{MaxChecks: 4, Interval: 50 * time.Millisecond, MaxWait: 600 * time.Millisecond}),
		Lease:          lease,
		AttemptTimeout: attemptTimeout,
		ClockSkew:      clockSkew,
		WaitTimeout:    waitTimeout,
		NoticeHold:     noticeHold,
		CheckTimeout:   2 * time.Second,
		KeyTTL:         time.Hour,
		Retry:          agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: 20 * time.Millisecond, MaxInterval: 100 * time.Millisecond, MaxElapsed: 3 * time.Second},
		Hooks:          hooks,
	})
}
