package mcptool_test

import (
	"context"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/envelope"
)

// BREAK (b): ServerOptions.Session's default, OneSession, "can turn two
// identical actions of one principal into one, which the second call is
// told (it is replayed)". Over the guarded MCP client, the second call is
// not told: the server answers success, replayed, "Already done by an
// earlier call … Nothing was repeated", and the client's envelope says
// success, replayed false, attempts 1, no note — i.e. that this call did
// it. In conversation-2 the model tells the user "booked" (a new booking)
// although nothing was booked for this request.
func TestReview7_ServerReplayIsToldAsAFreshSuccess(t *testing.T) {
	s := newServed(t, &desk{}, agenttool.Options{}, &mcptool.ServerOptions{Principal: connectionUser})
	book := clientTool(t, connectInMemory(t, s.server, "ana", nil), nil, agenttool.Options{})

	conv1 := agenttool.WithScope(context.Background(), "tenant-1/ana", "conversation-1")
	conv2 := agenttool.WithScope(context.Background(), "tenant-1/ana", "conversation-2")
	first := book.Invoke(conv1, anaSeat)
	second := book.Invoke(conv2, anaSeat)
	if first.Status != envelope.Success || first.Replayed {
		t.Fatalf("first: %s", first)
	}
	server := s.envelopes()
	if len(server) != 2 || !server[1].Replayed {
		t.Fatalf("server envelopes %v; want the second replayed", server)
	}
	if n := s.desk.count(); n != 1 {
		t.Fatalf("%d bookings, want 1 (the server replayed)", n)
	}
	t.Logf("server said: %s", server[1])
	t.Logf("client said: %s", second)
	if second.Status == envelope.Success && !second.Replayed {
		t.Errorf("the server replayed an earlier booking (nothing was done for this call), but the client's envelope says a fresh success: replayed=%v attempts=%d note=%q",
			second.Replayed, second.Attempts, second.Note)
	}
}
