package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/tools"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// chat is a chat service that counts the messages it posts, by request
// reference. It can lose the reply to a post it made, have its status
// endpoint down, and hold a post (once made) until released.
type chat struct {
	mu         sync.Mutex
	posts      map[string]int
	loseReply  string          // a post of this text is made, and its reply lost
	statusDown bool            // the status endpoint does not answer
	posted     chan string     // if set, a post sends its reference here once made
	release    <-chan struct{} // if set, a post then waits for it
}

func (c *chat) post(ctx context.Context, m message) (string, error) {
	ref := agenttool.RequestRef(ctx)
	c.mu.Lock()
	c.posts[ref]++
	lose, posted, release := m.Text == c.loseReply, c.posted, c.release
	c.mu.Unlock()
	if posted != nil {
		posted <- ref
		<-release
	}
	if lose {
		return "", errors.New("read tcp 127.0.0.1:443: connection reset by peer")
	}
	return "posted to " + m.Channel, nil
}

func (c *chat) Check(ctx context.Context, req reconcile.Request) reconcile.Answer {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.statusDown:
		return reconcile.CantSayBecause(errors.New("status endpoint: 503"))
	case c.posts[req.Ref] > 0:
		return reconcile.AppliedWith([]byte(`"posted"`))
	}
	return reconcile.NotAppliedYet()
}

func (c *chat) count() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.posts {
		out[k] = v
	}
	return out
}

type message struct {
	Channel string `json:"channel"`
	Text    string `json:"text"`
}

// postMessage is the application's post_message tool on store.
func postMessage(t *testing.T, store agenttool.Store, c *chat) *agenttool.Tool {
	t.Helper()
	tool, err := agenttool.New("post_message", "Post a message to a channel.", c.post, agenttool.Options{
		Store: store, Class: agenttool.Reconcilable, Reconciler: c, Retry: agenttool.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// converse plays one conversation of a scripted model with the agent: the
// turns, in the session, and returns the envelopes the model read.
func converse(t *testing.T, tool *agenttool.Tool, session string, turns ...langchaintest.Turn) []envelope.Envelope {
	t.Helper()
	model := langchaintest.New(turns...)
	ctx := agenttool.WithScope(context.Background(), "tenant-42/team-ops", session)
	if _, err := chains.Run(ctx, agents.NewExecutor(agents.NewOpenAIFunctionsAgent(model, []tools.Tool{tool})), "Tell #ops about the deploy."); err != nil {
		t.Fatalf("%s: %v", session, err)
	}
	if err := model.Err(); err != nil {
		t.Fatalf("%s: %v", session, err)
	}
	var envs []envelope.Envelope
	for _, r := range model.Results() {
		env, err := envelope.Parse([]byte(r))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	return envs
}

const (
	deploy   = `{"channel":"#ops","text":"Deploy starts at 14:00."}`
	rollback = `{"channel":"#ops","text":"The rollback plan is in the runbook."}`
	freeze   = `{"channel":"#ops","text":"Merge freeze until the deploy is done."}`
)

// The move from one machine to many, as an operator makes it: the
// application runs on bbolt — one message posted, one whose reply was lost
// (unknown), and one posted by a call the process died in before
// recording it (pending) — and stops; the operator copies the file into
// PostgreSQL with the command (pending records refused at first, then
// copied as unknown; a second run copies nothing); the application starts
// on PostgreSQL and the same conversations are replayed. Every message
// was posted exactly once: replays and reconciled outcomes, no second
// post.
func TestSwitchingStoresMidConversation(t *testing.T) {
	url := pgtest.URL(t)
	path := filepath.Join(t.TempDir(), "app.db")
	c := &chat{posts: map[string]int{}, statusDown: true, loseReply: "The rollback plan is in the runbook."}

	bolt, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	tool := postMessage(t, bolt, c)
	converse(t, tool, "conversation-1",
		langchaintest.Call("post_message", deploy),
		langchaintest.Call("post_message", rollback).Checking(langchaintest.WantStatus(envelope.Success)),
		langchaintest.Final("Posted; the second message may have gone out.").Checking(langchaintest.WantStatus(envelope.UnknownOutcome)),
	)
	// The process dies in conversation 2, after the chat service posted
	// the message and before the outcome was recorded.
	posted, release := make(chan string, 1), make(chan struct{})
	c.mu.Lock()
	c.posted, c.release = posted, release
	c.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		model := langchaintest.New(langchaintest.Call("post_message", freeze), langchaintest.Final("(never read)"))
		ctx := agenttool.WithScope(context.Background(), "tenant-42/team-ops", "conversation-2")
		chains.Run(ctx, agents.NewExecutor(agents.NewOpenAIFunctionsAgent(model, []tools.Tool{tool})), "Announce the freeze.")
	}()
	frozen := <-posted
	bolt.Close() // the process is gone: nothing more reaches the file
	close(release)
	<-done
	c.mu.Lock()
	c.posted, c.release = nil, nil
	c.mu.Unlock()
	before := c.count()
	if len(before) != 3 {
		t.Fatalf("posts on bbolt: %v, want 3 messages", before)
	}

	// The operator copies the file into PostgreSQL.
	schema := pgtest.Schema(t, url)
	to := []string{"copy", "-from", path, "-to", url, "-to-schema", schema}
	out := command(t, nil, to...).exits(t, opcmd.ExitFailed, "not copied: "+frozen+": pending", "stop the application", "-pending unknown")
	if !strings.Contains(out.stdout, "3     2       0           0       0              0        1        0       0") {
		t.Errorf("first copy:\n%s", out.stdout)
	}
	out = command(t, nil, append(to, "-pending", "unknown")...).ok(t)
	if !strings.Contains(out.stdout, "3     1       1           0       2              0        0        0       0") {
		t.Errorf("copy with -pending unknown:\n%s", out.stdout)
	}
	out = command(t, nil, append(to, "-pending", "unknown")...).ok(t)
	if !strings.Contains(out.stdout, "3     0       0           0       3              0        0        0       0") {
		t.Errorf("a third copy:\n%s", out.stdout)
	}

	// The application starts on PostgreSQL; the chat service answers its
	// status endpoint again. The same conversations are replayed.
	pg, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	c.mu.Lock()
	c.statusDown = false
	c.mu.Unlock()
	tool = postMessage(t, pg, c)
	again := converse(t, tool, "conversation-1",
		langchaintest.Call("post_message", deploy),
		langchaintest.Call("post_message", rollback).Checking(langchaintest.WantStatus(envelope.Success)),
		langchaintest.Final("Both are posted.").Checking(langchaintest.WantStatus(envelope.Success)),
	)
	if !again[0].Replayed || !again[1].Reconciled {
		t.Errorf("conversation 1 on PostgreSQL: %s, then %s; want the first replayed, the second reconciled as applied", again[0], again[1])
	}
	resumed := converse(t, tool, "conversation-2",
		langchaintest.Call("post_message", freeze),
		langchaintest.Final("The freeze is announced.").Checking(langchaintest.WantStatus(envelope.Success)),
	)
	if !resumed[0].Reconciled || resumed[0].RequestRef != frozen {
		t.Errorf("conversation 2 on PostgreSQL: %s; want %s reconciled as applied", resumed[0], frozen)
	}
	for ref, n := range c.count() {
		if n != 1 || before[ref] != 1 {
			t.Errorf("%s posted %d times (%d before the move); want once", ref, n, before[ref])
		}
	}
}
