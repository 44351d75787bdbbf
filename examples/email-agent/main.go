// Command email-agent: an agent sends one email through a real SMTP server
// on loopback, with retrysafe guarding the send.
//
// The send_email tool derives the Message-ID from the request reference and
// is reconcilable: when the server's reply is lost, a reconciler searches the
// mailbox by Message-ID before anything is sent again.
//
//	go run ./examples/email-agent                 # offline, fault lost-ack
//	go run ./examples/email-agent -fault none
//	go run ./examples/email-agent -fault index-down -console 127.0.0.1:8080
//	go run ./examples/email-agent -h              # flags and faults
//
// With -console, the program serves the approvals console
// (agenttool/console) on a loopback address after the run, until it is
// interrupted: a person sees the email whose outcome is unknown and
// settles it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/smtp"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
	"github.com/retrysafe/retrysafe/reconcile"
)

var example = demo.Example{
	Name: "email-agent",
	Faults: []demo.Fault{
		{Name: "lost-ack", Help: "the server stores the message, then drops the connection before its final reply"},
		{Name: "none", Help: "everything works"},
		{Name: "bad-recipient", Help: "the server refuses the recipient (550): a definite failure"},
		{Name: "reword", Help: "as lost-ack, and the model rewords the email and sends it again (the unknown fence)"},
		{Name: "index-down", Help: "as lost-ack, and the mailbox search is down: the email stays unknown until a person settles it (see -console)"},
	},
	Prompt:    "Email Ana to ask whether lunch at noon on Friday works.",
	Principal: samPrincipal,
	Session:   samSession,
	Context:   func(ctx context.Context) context.Context { return agenttool.WithLabel(ctx, samLabel) },
	Flags: func(fs *flag.FlagSet) {
		fs.String("console", "", "after the run, serve the approvals console at this loopback address (127.0.0.1:8080) until interrupted")
	},
	Setup:  setup,
	Script: script,
}

func main() { demo.Main(example) }

type email struct {
	To      string `json:"to" desc:"recipient address"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

// messageID derives the Message-ID from the request reference: the same on
// every attempt of one logical action, and searchable afterwards.
func messageID(ref string) string {
	return "<" + strings.ReplaceAll(ref, "/", ".") + "@agent.example>"
}

func setup(ctx context.Context, env *demo.Env) (*demo.Scenario, error) {
	var listener net.Listener
	if addr := env.Flag("console"); addr != "" {
		// Refuse an address of the network before anything runs.
		var err error
		if listener, err = listenLoopback(addr); err != nil {
			return nil, err
		}
	}
	closeListener := func() {
		if listener != nil {
			listener.Close()
		}
	}
	box := &mailbox{delivered: func(m message) {
		fmt.Fprintf(env.Out, "  mail server: stored %s for %s\n", m.ID, m.To)
	}}
	srv, err := startMailServer(box, env.Fault)
	if err != nil {
		closeListener()
		return nil, err
	}
	store, err := boltstore.Open(env.DB, nil)
	if err != nil {
		closeListener()
		srv.close()
		return nil, err
	}
	send := func(ctx context.Context, e email) (map[string]string, error) {
		id := messageID(agenttool.RequestRef(ctx))
		if err := sendSMTP(ctx, srv.addr, e, id); err != nil {
			fmt.Fprintf(env.Out, "  smtp client: %v\n", err)
			return nil, err
		}
		return map[string]string{"message_id": id}, nil
	}
	search := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
		if env.Fault == "index-down" {
			fmt.Fprintln(env.Out, "  reconciler: the mailbox search is down: can't say")
			return reconcile.CantSayBecause(errors.New("the mailbox search is down"))
		}
		found, complete := box.search(messageID(ref))
		switch {
		case found != nil:
			fmt.Fprintf(env.Out, "  reconciler: %s is in the mailbox\n", found.ID)
			return reconcile.AppliedWith([]byte(`{"message_id":` + strconv.Quote(found.ID) + `}`))
		case !complete:
			fmt.Fprintln(env.Out, "  reconciler: not found, but the mailbox index is still catching up: pending")
			return reconcile.StillPending()
		}
		fmt.Fprintln(env.Out, "  reconciler: not in the mailbox, and the index is complete: not applied")
		return reconcile.NotAppliedYet()
	})
	tool, err := agenttool.New("send_email", "Send one email. Input: a JSON object with to, subject and body.", send, agenttool.Options{
		Store:          store,
		Class:          agenttool.Reconcilable,
		Reconciler:     search,
		AttemptTimeout: 5 * time.Second,
	})
	if err != nil {
		closeListener()
		store.Close()
		srv.close()
		return nil, err
	}
	sc := &demo.Scenario{
		Tools:   []*agenttool.Tool{tool},
		Effects: box.count,
		Final: func(w io.Writer) {
			n := box.count()
			fmt.Fprintf(w, "mailbox: %d message%s\n", n, map[bool]string{true: "", false: "s"}[n == 1])
		},
		Close: func() { closeListener(); store.Close(); srv.close() },
	}
	if listener != nil {
		if sc.Serve, err = serveConsole(listener, store, tool, env.Out); err != nil {
			sc.Close()
			return nil, err
		}
	}
	return sc, nil
}

// sendSMTP sends one message. What an error means for the effect follows
// SMTP: nothing is accepted before the server answers the final ".", so an
// error up to then is not applied (5xx definite, anything else transient);
// an error while waiting for that answer leaves the outcome unknown.
func sendSMTP(ctx context.Context, addr string, e email, id string) error {
	c, err := smtp.Dial(addr)
	if err != nil {
		return err // a dial error: transient, by envelope.Classify
	}
	defer c.Close()
	notSent := func(err error) error {
		var tp *textproto.Error
		if errors.As(err, &tp) && tp.Code >= 500 {
			return envelope.MarkDefinite(err, fmt.Sprintf("smtp_%d", tp.Code))
		}
		return envelope.MarkTransient(err)
	}
	if err := c.Hello("agent.example"); err != nil {
		return notSent(err)
	}
	if err := c.Mail("sam@agent.example"); err != nil {
		return notSent(err)
	}
	if err := c.Rcpt(e.To); err != nil {
		return notSent(err)
	}
	w, err := c.Data()
	if err != nil {
		return notSent(err)
	}
	fmt.Fprintf(w, "Message-ID: %s\r\nFrom: sam@agent.example\r\nTo: %s\r\nSubject: %s\r\n\r\n%s\r\n", id, e.To, e.Subject, e.Body)
	if err := w.Close(); err != nil {
		// The message went out; the server's answer did not come back.
		return envelope.MarkUnknown(err)
	}
	return c.Quit()
}

// script plays a real, imperfect model. It sends the email; after an unknown
// outcome it sends it again, the first time with its arguments rewritten and
// an idempotency key of its own; after being told to drop the key, it sends
// once more. Under the reword fault it rewords the email instead, which
// makes a new key: the unknown fence holds it back until the first is
// settled.
func script(fault string) demo.Script {
	if fault == "reword" {
		return rewordScript()
	}
	const first = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const withKey = `{"body":"Hi Ana, does lunch at noon on Friday work for you? Sam","idempotency_key":"ana-lunch-friday-1","subject":"Lunch on Friday?","to":"ana@example.com"}`
	const rewritten = `{"subject":"Lunch on Friday?", "to":"ana@example.com", "body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	return func(results []string) langchaintest.Turn {
		call := func(args string) langchaintest.Turn {
			return langchaintest.Call("send_email", args)
		}
		if len(results) == 0 {
			return call(first)
		}
		last, err := envelope.Parse([]byte(results[len(results)-1]))
		if err != nil {
			return langchaintest.Final("The tool's answer was unreadable.")
		}
		switch {
		case last.Status == envelope.Success:
			return langchaintest.Final(fmt.Sprintf("I emailed Ana (message %s).", messageOf(last)))
		case last.Error != nil && last.Error.Code == envelope.CodeModelSuppliedKey:
			return call(rewritten)
		case last.Status == envelope.UnknownOutcome && len(results) == 1:
			return call(withKey)
		case last.Status == envelope.UnknownOutcome && len(results) < 4:
			return call(rewritten)
		case last.Status == envelope.UnknownOutcome:
			return langchaintest.Final("The email may already have gone out; it is being verified (" + last.RequestRef + ").")
		}
		return langchaintest.Final("I could not email Ana: " + last.Error.Message)
	}
}

// rewordScript sends the email, and after an unknown outcome "improves" it
// and sends it again; it tells the user what the last envelope says.
func rewordScript() demo.Script {
	const first = `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`
	const reworded = `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you? Best, Sam"}`
	return func(results []string) langchaintest.Turn {
		call := func(args string) langchaintest.Turn {
			return langchaintest.Call("send_email", args)
		}
		if len(results) == 0 {
			return call(first)
		}
		last, err := envelope.Parse([]byte(results[len(results)-1]))
		switch {
		case err != nil:
			return langchaintest.Final("The tool's answer was unreadable.")
		case last.Status == envelope.UnknownOutcome && len(results) == 1:
			return call(reworded)
		case last.Earlier != nil && last.Earlier.State == envelope.ActionSucceeded:
			return langchaintest.Final(fmt.Sprintf("My first email to Ana did go out (%s), so I did not send the reworded one. Do you want a second email sent anyway?", last.Earlier.RequestRef))
		case last.Status == envelope.Success:
			return langchaintest.Final(fmt.Sprintf("I emailed Ana (message %s).", messageOf(last)))
		}
		return langchaintest.Final("The email may already have gone out; it is being verified.")
	}
}

func messageOf(e envelope.Envelope) string {
	var r map[string]string
	json.Unmarshal(e.Result, &r)
	return r["message_id"]
}
