package mcpguard_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/envelope"
)

// I2 and the conversation's scope through a retrysafe upstream
// (key_argument "_meta"): with conversation set, two conversations of one
// user are two scopes, and the same message asked in each is two actions
// to the guard (two references, two fences). But the guard sends the
// upstream nothing of the conversation the upstream keys by, and the
// upstream keys by its own caller — the guard — so the second
// conversation's message meets the first's action there and is replayed:
// the second conversation is answered success, and its message was never
// sent. Each conversation's action must be sent once, or the second must
// not be told success.
func TestGuard_ARetrysafeUpstreamKeepsConversationsApart(t *testing.T) {
	c := &counter{}
	up := retrysafeSender(t, c)
	cfg, err := mcpguard.ParseConfig([]byte(`{
	  "principal": "ana@example.com",
	  "conversation": {"meta": "conversation_id"},
	  "mcpServers": {"sender": {"command": "sender-mcp",
	    "tools": {"send_message": {"class": "keyed", "key_argument": "_meta"}}}}}`))
	if err == nil {
		cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
		var g *mcpguard.Guard
		g, err = mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: serving(up), Logger: discard()})
		if err == nil {
			t.Cleanup(func() { g.Close() })
			cs := connect(t, g)
			msg := map[string]any{"to": "#team", "text": "Lunch at one?"}
			_, first := call(t, cs, "send_message", msg, mcp.Meta{"conversation_id": "chat-1"})
			_, second := call(t, cs, "send_message", msg, mcp.Meta{"conversation_id": "chat-2"})
			t.Logf("chat-1: %s\nchat-2: %s", first, second)
			if first.Status != envelope.Success {
				t.Fatalf("chat-1: %s", first)
			}
			if first.RequestRef == second.RequestRef {
				t.Fatalf("one reference for two conversations: %s", first.RequestRef)
			}
			if second.Status == envelope.Success && c.count() != 2 {
				t.Errorf("chat-2 was told success, but only %d message was sent (%q): its action was answered with chat-1's", c.count(), c.sent)
			}
			return
		}
	}
	// Refused at start: the upstream would key both conversations' calls alike.
	if !strings.Contains(err.Error(), "key_argument") || !strings.Contains(err.Error(), "conversation") {
		t.Errorf("refused without naming the field and the conversation: %v", err)
	}
	t.Logf("refused: %v", err)
}
