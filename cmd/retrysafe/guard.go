package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
)

func guardSummary() string {
	return "Stand in front of MCP servers and guard their tools' calls, as -config says: over stdio (a desktop client launches it in place of the server) or streamable HTTP (-listen)."
}

// defineGuard is the guard command: an mcpguard.Guard, its front on
// stdio, or on streamable HTTP behind bearer tokens with -listen.
func defineGuard(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer, asJSON bool) error {
	config := fs.String("config", "", "the guard's configuration `FILE` (JSON: a desktop client's mcpServers block, with tools maps)")
	listen := fs.String("listen", "", "serve streamable HTTP on `ADDR` (127.0.0.1:PORT) instead of stdio; callers need a bearer token of the configuration's tokens, or one its oauth authorization server issued")
	return func(ctx context.Context, args []string, stdout io.Writer, _ bool) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q: guard takes -config FILE (and -listen ADDR)", opcmd.ErrUsage, args[0])
		}
		if *config == "" {
			return fmt.Errorf("%w: name the configuration: -config guard.json", opcmd.ErrUsage)
		}
		cfg, err := mcpguard.LoadConfig(*config)
		if err != nil {
			return err
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		if *listen != "" {
			// Checked before anything starts: a guard that would accept
			// anyone never runs.
			if _, err := cfg.Verifier(); err != nil {
				return err
			}
		} else if cfg.Principal == "" {
			return fmt.Errorf("%s: principal: over stdio no token says who acts: name the guard's user (\"principal\": \"ana@example.com\")", *config)
		}
		mcpguard.TuneRuntime()
		hooks, stop, err := guardTelemetry(ctx)
		if err != nil {
			return fmt.Errorf("OpenTelemetry export (OTEL_EXPORTER_OTLP_*): %w", err)
		}
		defer stop()
		g, err := mcpguard.New(ctx, cfg, &mcpguard.Options{Logger: log, Hooks: hooks})
		if err != nil {
			return err
		}
		defer g.Close()
		if *listen == "" {
			log.Info("retrysafe guard: serving over stdio")
			err := g.Server().Run(ctx, &mcp.StdioTransport{})
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		return serveHTTP(ctx, g, *listen, log)
	}
}

// serveHTTP serves the guard's front as streamable HTTP on addr, behind
// the configuration's bearer tokens and OAuth, until ctx ends.
func serveHTTP(ctx context.Context, g *mcpguard.Guard, addr string, log *slog.Logger) error {
	front, err := g.HTTPHandler()
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: front, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		log.Warn("retrysafe guard: listening beyond loopback; put TLS in front of it", "addr", ln.Addr().String())
	}
	log.Info("retrysafe guard: serving streamable HTTP", "addr", ln.Addr().String())
	fmt.Fprintf(os.Stderr, "listening on http://%s\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		srv.Shutdown(shut)
		return nil
	case err := <-done:
		return err
	}
}
