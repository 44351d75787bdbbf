// Package mcpfault holds MCP transports that fail the way servers and
// networks do, for the tests of the packages that speak MCP.
package mcpfault

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// EndsAfterClosingAnswer wraps the client's end of t: the connection ends
// (its next read is io.EOF) right after it reads an answer "server is
// closing" (JSON-RPC -32004), as a server process does that answers its
// last call so while it shuts down, and exits.
func EndsAfterClosingAnswer(t mcp.Transport) mcp.Transport { return endsAfterClosing{t} }

type endsAfterClosing struct{ mcp.Transport }

func (t endsAfterClosing) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &endingConn{Connection: c}, nil
}

type endingConn struct {
	mcp.Connection
	ended atomic.Bool
}

func (c *endingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if c.ended.Load() {
		return nil, io.EOF
	}
	msg, err := c.Connection.Read(ctx)
	var we *jsonrpc.Error
	if resp, ok := msg.(*jsonrpc.Response); ok && errors.As(resp.Error, &we) && we.Code == -32004 {
		c.ended.Store(true)
	}
	return msg, err
}
