package adversary

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
)

// The starter's two actions, as the adversarial model asks for them.
var (
	invoicePlan = Plan{
		Tool:     "create_invoice",
		Base:     `{"customer":"ACME Corp","description":"Consulting, 3 hours at 120.00 EUR","amount_cents":36000,"currency":"EUR"}`,
		Reworded: `{"customer":"ACME Corp","description":"Consulting services: 3 h at EUR 120","amount_cents":36000,"currency":"EUR"}`,
	}
	messagePlan = Plan{
		Tool:     "post_message",
		Base:     `{"channel":"billing","text":"Invoice INV-1001 sent to ACME Corp: 360.00 EUR."}`,
		Reworded: `{"channel":"billing","text":"ACME Corp has been invoiced (INV-1001, 360 EUR)."}`,
	}
)

// An adversarial model over the OpenAI wire format, asking the starter for
// an invoice and a message in #billing — both tools in one message,
// parallel and repeated calls, restated and reworded copies, numbers as
// strings, malformed arguments, pasted references, tools that do not
// exist — gets one invoice and one message under each fault, and every
// envelope it reads is true.
//
// The starter imports nothing of this module's internal packages, its
// tests included (a user copies it), so this test builds the program and
// runs it against the model, and counts the effects after each call from
// its transcript, where the APIs log each invoice and message they make.
func TestAnAdversarialModelOverTheWireGetsOneInvoiceAndOneMessageFromTheStarter(t *testing.T) {
	bin := buildStarter(t)
	for i, fault := range []string{"lost-responses", "none"} {
		t.Run(fault, func(t *testing.T) {
			runStarter(t, bin, fault, uint64(70+i))
		})
	}
}

func buildStarter(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "starter")
	args := []string{"build", "-o", bin}
	if raceDetector {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, "github.com/retrysafe/retrysafe/examples/starter")...).CombinedOutput(); err != nil {
		t.Fatalf("building the starter: %v\n%s", err, out)
	}
	return bin
}

func runStarter(t *testing.T, bin, fault string, seed uint64) {
	// The starter's executor allows 8 turns: the model sends its whole
	// repertoire of both actions in 7 messages.
	m := NewModel(ModelOptions{Seed: seed, PerTurn: 36, MaxTurns: 7}, invoicePlan, messagePlan)
	getenv := m.Start(t)
	db := filepath.Join(t.TempDir(), "retrysafe.db")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-llm", "openai", "-fault", fault, "-db", db)
	cmd.Env = []string{"OPENAI_API_KEY=" + getenv("OPENAI_API_KEY"), "OPENAI_BASE_URL=" + getenv("OPENAI_BASE_URL"),
		"OPENAI_MODEL=" + getenv("OPENAI_MODEL"), "TMPDIR=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the starter: %v\n%s", err, out)
	}
	ledgers := map[string]*Ledger{invoicePlan.Tool: NewLedger(invoicePlan.Tool), messagePlan.Tool: NewLedger(messagePlan.Tool)}
	envs := map[string][]envelope.Envelope{}
	effects := map[string]int{}
	var bad []string
	lines := bufio.NewScanner(strings.NewReader(string(out)))
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		line := lines.Text()
		switch {
		case strings.HasPrefix(line, "  invoice api: created "):
			effects[invoicePlan.Tool]++
		case strings.HasPrefix(line, "  chat api: posted "):
			effects[messagePlan.Tool]++
		case strings.HasPrefix(line, "tool  ← "):
			e, err := envelope.Parse([]byte(strings.TrimPrefix(line, "tool  ← ")))
			if err != nil {
				bad = append(bad, fmt.Sprintf("a tool answered other than an envelope: %v: %s", err, line))
				continue
			}
			l := ledgers[e.Tool]
			if l == nil {
				bad = append(bad, "an envelope of a tool the starter does not have: "+line)
				continue
			}
			l.Read(e)
			l.EndGroup(effects[e.Tool])
			envs[e.Tool] = append(envs[e.Tool], e)
		}
	}
	for _, f := range m.Faults() {
		bad = append(bad, "the loop: "+f)
	}
	final := fmt.Sprintf("invoices: %d, messages: %d\n", effects[invoicePlan.Tool], effects[messagePlan.Tool])
	if !strings.HasSuffix(string(out), final) || final != "invoices: 1, messages: 1\n" {
		bad = append(bad, fmt.Sprintf("the APIs logged %q; want one invoice and one message, and the transcript to end so", final))
	}
	for tool, l := range ledgers {
		bad = append(bad, l.Problems()...)
		bad = append(bad, awaitingReconciliation(db, tool, envs[tool], l)...)
	}
	if len(bad) > 0 {
		t.Errorf("seed %d, fault %s: %s\n\n%s\ntranscript:\n%s", seed, fault, strings.Join(bad, "\n"), Describe(m.Log()), out)
	} else {
		t.Logf("seed %d, fault %s: %s", seed, fault, Describe(m.Log()))
	}
}
