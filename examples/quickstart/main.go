// Command quickstart shows retrysafe stopping a duplicate email.
//
// A langchaingo agent, driven by an offline scripted model, sends one email
// through a guarded send_email tool. The mail service commits the message and
// then loses its reply. The guarded tool retries with the same request
// reference, so the service recognises the repeat; when the model, unsure,
// sends the email again, the stored outcome is replayed. One message arrives.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sync"

	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/tools"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest"
	"github.com/retrysafe/retrysafe/envelope"
)

type email struct {
	To      string `json:"to" desc:"recipient address"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

// mailService stands in for a mail API that honours an Idempotency-Key: a
// repeated key returns the message it already accepted.
type mailService struct {
	out      io.Writer
	mu       sync.Mutex
	byKey    map[string]string // idempotency key -> message id
	mailbox  []email
	requests int
}

func (s *mailService) send(ctx context.Context, in email) (map[string]string, error) {
	key := agenttool.RequestRef(ctx) // trusted, stable across retries
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	id, seen := s.byKey[key]
	if !seen {
		id = fmt.Sprintf("<%d.%s@mail.example>", len(s.mailbox)+1, key[len("send_email/"):][:8])
		s.byKey[key] = id
		s.mailbox = append(s.mailbox, in)
		fmt.Fprintf(s.out, "  mail service: stored message %s for %s\n", id, in.To)
	} else {
		fmt.Fprintf(s.out, "  mail service: key already used, returning %s\n", id)
	}
	if s.requests == 1 {
		fmt.Fprintln(s.out, "  mail service: ...and the reply is lost on the way back")
		return nil, errors.New("read tcp 127.0.0.1:41834->127.0.0.1:587: read: connection reset by peer")
	}
	return map[string]string{"message_id": id}, nil
}

// transcript prints each tool call the model makes and each envelope it reads.
type transcript struct {
	tools.Tool
	out io.Writer
}

func (t transcript) Call(ctx context.Context, input string) (string, error) {
	fmt.Fprintf(t.out, "model → %s %s\n", t.Name(), input)
	out, err := t.Tool.Call(ctx, input)
	fmt.Fprintf(t.out, "tool  ← %s\n", out)
	return out, err
}

// model behaves like a real, imperfect model: it sends the email, and then,
// unsure, sends it again with its arguments in another order.
func model(results []string) langchaintest.Turn {
	send := func(args string) langchaintest.Turn {
		return langchaintest.Call("send_email", args)
	}
	switch len(results) {
	case 0:
		return send(`{"to":"ana@example.com","subject":"Lunch","body":"See you at noon."}`)
	case 1:
		return send(`{"subject":"Lunch","body":"See you at noon.","to":"ana@example.com"}`)
	}
	last, err := envelope.Parse([]byte(results[len(results)-1]))
	if err != nil {
		return langchaintest.Final("I could not read the tool's answer.")
	}
	return langchaintest.Final(fmt.Sprintf("Ana has been emailed (status %s, reference %s).", last.Status, last.RequestRef))
}

func main() {
	log.SetFlags(0)
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run plays the scenario and writes the transcript to w.
func run(w io.Writer) error {
	dir, err := os.MkdirTemp("", "retrysafe-quickstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := boltstore.Open(filepath.Join(dir, "retrysafe.db"), nil)
	if err != nil {
		return err
	}
	defer store.Close()

	mail := &mailService{out: w, byKey: map[string]string{}}
	send, err := agenttool.New("send_email", "Send an email to one recipient.", mail.send, agenttool.Options{
		Store: store,
		Class: agenttool.Keyed, // the mail service honours the request reference as its Idempotency-Key
	})
	if err != nil {
		return err
	}

	agent := agents.NewOpenAIFunctionsAgent(langchaintest.Func(func(results []string) (langchaintest.Turn, error) { return model(results), nil }), []tools.Tool{transcript{Tool: send, out: w}})
	executor := agents.NewExecutor(agent, agents.WithMaxIterations(5))

	// Trusted application code, not the model, says who acts and in which conversation.
	ctx := agenttool.WithScope(context.Background(), "tenant-42/user-7", "conversation-9")
	// And whose action each record is, for the operator who reads it.
	ctx = agenttool.WithLabel(ctx, "Sam Diaz, lunch with Ana")
	answer, err := chains.Run(ctx, executor, "Email Ana that lunch is at noon.")
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "agent:", answer)
	fmt.Fprintf(w, "mailbox: %d message\n", len(mail.mailbox))
	return nil
}
