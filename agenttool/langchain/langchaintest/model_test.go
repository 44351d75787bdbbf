package langchaintest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/tools"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/langchain"
	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// outbox is a mail API that honours the request reference as an
// idempotency key and loses its first reply, after storing the message.
type outbox struct {
	mu      sync.Mutex
	byKey   map[string]int
	replies int
}

func (o *outbox) send(ctx context.Context, e email) (map[string]int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byKey == nil {
		o.byKey = map[string]int{}
	}
	ref := agenttool.RequestRef(ctx)
	if _, seen := o.byKey[ref]; !seen {
		o.byKey[ref] = len(o.byKey) + 1
	}
	if o.replies++; o.replies == 1 {
		return nil, errors.New("read: connection reset by peer") // stored, reply lost
	}
	return map[string]int{"message": o.byKey[ref]}, nil
}

func (o *outbox) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.byKey)
}

// guardedSend is send_email, keyed, on memstore.
func guardedSend(t *testing.T, o *outbox) *agenttool.Tool {
	t.Helper()
	send, err := agenttool.New("send_email", "Send an email.", o.send, agenttool.Options{
		Store: memstore.New(),
		Class: agenttool.Keyed,
		Retry: agenttool.RetryPolicy{InitialInterval: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	return send
}

// run runs the real langchaingo functions agent with model and send.
func run(t *testing.T, model llms.Model, send *agenttool.Tool, opts ...agents.Option) (string, error) {
	t.Helper()
	agent := agents.NewOpenAIFunctionsAgent(langchain.WithToolSchemas(model, send), []tools.Tool{send})
	ctx := agenttool.WithScope(context.Background(), "tenant-1/user-1", "conversation-1")
	return chains.Run(ctx, agents.NewExecutor(agent, opts...), "Email Ana about lunch.")
}

const (
	lunch       = `{"to":"ana@example.com","subject":"Lunch"}`
	lunchAgain  = `{"subject":"Lunch","to":"ana@example.com"}`
	answerAfter = "Ana has been emailed, once."
)

func TestScriptPlaysFully(t *testing.T) {
	box := &outbox{}
	send := guardedSend(t, box)
	model := langchaintest.New(
		langchaintest.Call("send_email", lunch),
		langchaintest.Call("send_email", lunchAgain).Checking(langchaintest.WantStatus(envelope.Success)),
		langchaintest.Final(answerAfter).Checking(func(result string) error {
			env, err := envelope.Parse([]byte(result))
			if err != nil || !env.Replayed {
				return fmt.Errorf("want the first success replayed, got %v (%v)", env, err)
			}
			return nil
		}),
	)
	answer, err := run(t, model, send)
	if err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	if answer != answerAfter {
		t.Errorf("answer %q, want %q", answer, answerAfter)
	}
	if err := model.Err(); err != nil {
		t.Errorf("Err after a full script: %v", err)
	}
	results := model.Results()
	if len(results) != 2 {
		t.Fatalf("the model read %d results, want 2: %q", len(results), results)
	}
	first, err1 := envelope.Parse([]byte(results[0]))
	second, err2 := envelope.Parse([]byte(results[1]))
	if err1 != nil || err2 != nil {
		t.Fatalf("results are not envelopes: %v, %v", err1, err2)
	}
	if first.Status != envelope.Success || first.Attempts != 2 || !second.Replayed || second.RequestRef != first.RequestRef {
		t.Errorf("envelopes %s then %s: want a success after 2 attempts, then the same replayed", first, second)
	}
	if box.count() != 1 {
		t.Errorf("the outbox holds %d messages, want 1", box.count())
	}
}

func TestScriptRunsOut(t *testing.T) {
	send := guardedSend(t, &outbox{})
	model := langchaintest.New(langchaintest.Call("send_email", lunch)) // no final answer
	_, err := run(t, model, send)
	if !errors.Is(err, langchaintest.ErrUnexpectedTurn) {
		t.Fatalf("the run returned %v, want ErrUnexpectedTurn", err)
	}
	for _, want := range []string{"asked for turn 2", "the script holds 1 turn (1 send_email)", `"status":"success"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if got := model.Err(); !errors.Is(got, langchaintest.ErrUnexpectedTurn) || got.Error() != err.Error() {
		t.Errorf("Err = %v, want the run's error", got)
	}
	if len(model.Results()) != 1 {
		t.Errorf("Results = %q, want the one envelope read at turn 2", model.Results())
	}
}

func TestCheckFails(t *testing.T) {
	send := guardedSend(t, &outbox{})
	model := langchaintest.New(
		langchaintest.Call("send_email", lunch),
		langchaintest.Final("It may have gone out.").Checking(langchaintest.WantStatus(envelope.UnknownOutcome)),
	)
	_, err := run(t, model, send)
	if !errors.Is(err, langchaintest.ErrCheckFailed) {
		t.Fatalf("the run returned %v, want ErrCheckFailed", err)
	}
	for _, want := range []string{"turn 2", "want status unknown_outcome, the model read success", `"tool":"send_email"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if !errors.Is(model.Err(), langchaintest.ErrCheckFailed) {
		t.Errorf("Err = %v, want ErrCheckFailed", model.Err())
	}
}

func TestCheckWithNothingToRead(t *testing.T) {
	box := &outbox{}
	send := guardedSend(t, box)
	model := langchaintest.New(langchaintest.Call("send_email", lunch).Checking(langchaintest.WantStatus(envelope.Success)))
	_, err := run(t, model, send)
	if !errors.Is(err, langchaintest.ErrCheckFailed) || !strings.Contains(err.Error(), "read no tool result") {
		t.Fatalf("the run returned %v, want ErrCheckFailed saying nothing was read", err)
	}
	if box.count() != 0 {
		t.Errorf("the tool ran although its turn failed")
	}
}

func TestUnofferedTool(t *testing.T) {
	box := &outbox{}
	send := guardedSend(t, box)
	model := langchaintest.New(langchaintest.Call("send_mail", lunch), langchaintest.Final("Done."))
	_, err := run(t, model, send)
	if !errors.Is(err, langchaintest.ErrUnexpectedTurn) {
		t.Fatalf("the run returned %v, want ErrUnexpectedTurn", err)
	}
	if !strings.Contains(err.Error(), `turn 1 calls "send_mail", but the agent offers send_email`) {
		t.Errorf("the error does not name the tool and the offered ones: %v", err)
	}
	if box.count() != 0 {
		t.Errorf("the outbox holds %d messages; nothing should have run", box.count())
	}
}

func TestNotPlayed(t *testing.T) {
	send := guardedSend(t, &outbox{})
	model := langchaintest.New(
		langchaintest.Call("send_email", lunch),
		langchaintest.Call("send_email", lunchAgain),
		langchaintest.Final(answerAfter),
	)
	_, err := run(t, model, send, agents.WithMaxIterations(2))
	if !errors.Is(err, agents.ErrNotFinished) {
		t.Fatalf("the run returned %v, want the executor's ErrNotFinished", err)
	}
	got := model.Err()
	if !errors.Is(got, langchaintest.ErrNotPlayed) || !strings.Contains(got.Error(), "played 2 of the script's 3 turns; turn 3") {
		t.Errorf("Err = %v, want ErrNotPlayed naming turn 3", got)
	}
}

// adaptive plays a real, imperfect model: it sends, sends again while the
// outcome is not success, and answers with what the last envelope says.
func adaptive(results []string) (langchaintest.Turn, error) {
	if len(results) == 0 {
		return langchaintest.Call("send_email", lunch), nil
	}
	last, err := envelope.Parse([]byte(results[len(results)-1]))
	switch {
	case err != nil:
		return langchaintest.Turn{}, fmt.Errorf("the tool's answer is not an envelope: %w", err)
	case len(results) == 1:
		return langchaintest.Call("send_email", lunchAgain), nil
	case last.Status == envelope.Success:
		return langchaintest.Final(fmt.Sprintf("Sent (%s, replayed %v).", last.Status, last.Replayed)), nil
	}
	return langchaintest.Turn{}, fmt.Errorf("no turn for status %s", last.Status)
}

func TestFunc(t *testing.T) {
	box := &outbox{}
	model := langchaintest.Func(adaptive)
	answer, err := run(t, model, guardedSend(t, box))
	if err != nil || answer != "Sent (success, replayed true)." {
		t.Fatalf("run = %q, %v", answer, err)
	}
	if err := model.Err(); err != nil {
		t.Errorf("Err after a final answer: %v", err)
	}
	if len(model.Results()) != 2 || box.count() != 1 {
		t.Errorf("%d results read, %d messages; want 2 and 1", len(model.Results()), box.count())
	}
}

func TestFuncError(t *testing.T) {
	oops := errors.New("no turn for this")
	model := langchaintest.Func(func(results []string) (langchaintest.Turn, error) {
		if len(results) == 0 {
			return langchaintest.Call("send_email", lunch), nil
		}
		return langchaintest.Turn{}, oops
	})
	_, err := run(t, model, guardedSend(t, &outbox{}))
	if !errors.Is(err, oops) || !errors.Is(err, langchaintest.ErrUnexpectedTurn) || !strings.Contains(err.Error(), "turn 2") {
		t.Fatalf("the run returned %v, want the script's error at turn 2", err)
	}

	unplayed := langchaintest.Func(adaptive)
	if _, err := run(t, unplayed, guardedSend(t, &outbox{}), agents.WithMaxIterations(1)); !errors.Is(err, agents.ErrNotFinished) {
		t.Fatalf("the run returned %v, want ErrNotFinished", err)
	}
	if err := unplayed.Err(); !errors.Is(err, langchaintest.ErrNotPlayed) || !strings.Contains(err.Error(), "send_email") {
		t.Errorf("Err = %v, want ErrNotPlayed naming the last call", err)
	}
	if err := langchaintest.Func(adaptive).Err(); !errors.Is(err, langchaintest.ErrNotPlayed) {
		t.Errorf("Err of a model never asked = %v, want ErrNotPlayed", err)
	}
}

// TestConcurrentRequests plays one script from many goroutines: every turn
// is played once, and Results and Err may be read meanwhile.
func TestConcurrentRequests(t *testing.T) {
	const n = 64
	turns := make([]langchaintest.Turn, n)
	for i := range turns {
		turns[i] = langchaintest.Final(fmt.Sprint(i))
	}
	model := langchaintest.New(turns...)
	var wg sync.WaitGroup
	answers := make(chan string, n)
	for range n {
		wg.Go(func() {
			text, err := model.Call(context.Background(), "hello")
			if err != nil {
				t.Error(err)
			}
			answers <- text
			model.Results()
			model.Err()
		})
	}
	wg.Wait()
	close(answers)
	seen := map[string]bool{}
	for a := range answers {
		seen[a] = true
	}
	if len(seen) != n || model.Err() != nil {
		t.Errorf("%d distinct answers of %d, Err %v", len(seen), n, model.Err())
	}
	if _, err := model.Call(context.Background(), "again"); !errors.Is(err, langchaintest.ErrUnexpectedTurn) {
		t.Errorf("a request beyond the script returned %v", err)
	}
}
