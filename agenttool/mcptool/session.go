package mcptool

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/envelope"
)

// link is the client session that the tools of one [Tools] call share,
// and the way to a new one once it is lost. It is safe for concurrent use.
type link struct {
	reconnect func(context.Context) (*mcp.ClientSession, error) // nil: none
	sessions  Sessions                                          // nil: the link keeps its own

	mu      sync.Mutex
	session *mcp.ClientSession
	lost    bool // session carries nothing more: it is closed, or its server forgot it
}

// open returns the session to send a call on: the current one, or, once
// it is lost and the link can reconnect, a new one. An error means that
// nothing was sent: it is transient.
func (l *link) open(ctx context.Context) (*mcp.ClientSession, error) {
	if l.sessions != nil {
		s, err := l.sessions.Session(ctx)
		if err == nil && s == nil {
			err = errors.New("ToolOptions.Sessions gave no session and no error")
		}
		if err != nil {
			return nil, envelope.MarkTransient(fmt.Errorf("mcptool: no session to the MCP server; the call was not sent: %w", err))
		}
		return s, nil
	}
	l.mu.Lock()
	if !l.lost || l.reconnect == nil {
		defer l.mu.Unlock()
		return l.session, nil
	}
	s, err := l.reconnect(ctx)
	if err == nil && s == nil {
		err = errors.New("ClientOptions.Reconnect returned no session and no error")
	}
	if err != nil {
		l.mu.Unlock()
		return nil, envelope.MarkTransient(fmt.Errorf("mcptool: the MCP session was lost and connecting again failed; the call was not sent: %w", err))
	}
	old := l.session
	l.session, l.lost = s, false
	l.mu.Unlock()
	go old.Close() // it carries nothing more; closing it frees what it holds, and may wait for the server
	return s, nil
}

// watchesWrites reports whether the link's sessions are watched by
// WatchWrites (their Sessions say so).
func (l *link) watchesWrites() bool {
	w, ok := l.sessions.(WritesWatcher)
	return ok && w.WatchesWrites()
}

// lose marks s lost, if it is still the session calls go on.
func (l *link) lose(s *mcp.ClientSession) {
	if l.sessions != nil {
		l.sessions.Lost(s)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.session == s {
		l.lost = true
	}
}
