package agenttool_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
)

// The takeover grace (not applied counts as pending until the lapsed
// lease's end + AttemptTimeout + ClockSkew, "until then the first request
// may still be in flight") is dropped by a boltstore restart: Open ends
// the dead holder's lease (HeldUntil zero), so the restarted process trusts
// "not applied" at once, while the request the dead process sent is still
// on the wire. It lands: two emails.
func TestARestartKeepsTheInFlightGrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	w := &wire{effects: map[string]int{}}
	started, land := make(chan struct{}), make(chan struct{})
	landed := make(chan struct{})
	first := true
	send := func(ctx context.Context, in emailInput) (sent, error) {
		ref := agenttool.RequestRef(ctx)
		if first { // process 1: the request is sent, then the process dies
			first = false
			close(started)
			<-land
			w.apply(ref) // the request sent before the crash reaches the destination
			close(landed)
			return sent{}, errLostReply
		}
		w.apply(ref)
		return sent{MessageID: ref}, nil
	}
	opts := func(s agenttool.Store) agenttool.Options {
		return agenttool.Options{Store: s, Class: agenttool.Reconcilable, Reconciler: w,
			AttemptTimeout: 10 * time.Second, ClockSkew: time.Second, Lease: time.Minute, Retry: fastRetry}
	}
	s1, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	proc1, err := agenttool.New("send_email", "Send.", send, opts(s1))
	if err != nil {
		t.Fatal(err)
	}
	go proc1.Invoke(scoped(), lunch)
	<-started
	s1.Close() // process 1 is killed with its request on the wire

	s2 := openBolt(t, path) // process 2, a moment later
	proc2, err := agenttool.New("send_email", "Send.", send, opts(s2))
	if err != nil {
		t.Fatal(err)
	}
	env := proc2.Invoke(scoped(), lunch) // the model repeats itself
	t.Logf("after the restart: %s", env)
	close(land)
	<-landed
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.effects[env.RequestRef]; n > 1 {
		t.Fatalf("one action applied %d times: not applied was trusted inside the in-flight grace, which a restart dropped (envelope %s)", n, env.Status)
	}
}
