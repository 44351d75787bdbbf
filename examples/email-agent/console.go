package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/console"
)

// The trusted scope and label of the example's run.
const (
	samPrincipal = "tenant-42/user-7"
	samSession   = "conversation-9"
	samLabel     = "Sam (tenant 42)"
)

// listenLoopback listens on addr, which must be a loopback address: the
// console has no authentication of its own here, so it is never served
// to the network.
func listenLoopback(addr string) (net.Listener, error) {
	refuse := fmt.Errorf("-console %q: the console is served on loopback only, as 127.0.0.1:PORT, [::1]:PORT or localhost:PORT", addr)
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", refuse, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, refuse
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tcp, ok := l.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		l.Close() // "localhost" resolved to an address of the network
		return nil, refuse
	}
	return l, nil
}

// serveConsole returns the Serve step of a run with -console: the
// console, over an operator of the example's tool, for the person at this
// machine, until the program is interrupted (or ctx ends).
func serveConsole(l net.Listener, store agenttool.Store, tool *agenttool.Tool, out io.Writer) (func(ctx context.Context) error, error) {
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		return nil, err
	}
	h, err := console.New(console.Options{
		Operator: op,
		// An application names the person its authentication signed in;
		// here, on loopback, it is whoever runs the example, and sees
		// Sam's actions.
		Who: func(*http.Request) (console.Viewer, error) {
			return console.Viewer{Name: "local-operator", Principals: []string{samPrincipal}}, nil
		},
		ShowScope: func(s agenttool.Scope) string {
			if s.Principal == samPrincipal {
				return "Sam, tenant 42"
			}
			return s.Principal
		},
	})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(l) }()
		fmt.Fprintf(out, "console: http://%s/ (settle the email there; Ctrl-C to stop)\n", l.Addr())
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
		}
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shut); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}, nil
}
