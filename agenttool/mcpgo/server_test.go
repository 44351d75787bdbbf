package mcpgo_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcpgo"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/adaptertest"
)

// serve runs s over streamable HTTP on loopback; the scope of a call is
// the user its request's bearer token names (a stand-in for a verified
// token), put on the context by the server's HTTPContextFunc.
func serve(t *testing.T, s *server.MCPServer) string {
	t.Helper()
	h := server.NewStreamableHTTPServer(s, server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
		if user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			return agenttool.WithScope(ctx, "tenant-42/"+user, "conversation-9")
		}
		return ctx
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// connect returns an mcp-go client of the server, as user (none: "").
func connect(t *testing.T, url, user string) *client.Client {
	t.Helper()
	var opts []transport.StreamableHTTPCOption
	if user != "" {
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + user}))
	}
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	return c
}

// call sends one tools/call with raw arguments and returns the envelope
// the result carries, checking that its isError agrees.
func call(t *testing.T, c *client.Client, tool, args string) envelope.Envelope {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.RawArguments = json.RawMessage(args)
	res, err := c.CallTool(t.Context(), req)
	if err != nil {
		t.Fatalf("tools/call %s: %v", args, err)
	}
	text, _ := mcp.AsTextContent(res.Content[0])
	env, err := envelope.Parse([]byte(text.Text))
	if err != nil {
		t.Fatalf("the result is not an envelope: %v\n%s", err, text.Text)
	}
	if res.IsError != (env.Status != envelope.Success) {
		t.Errorf("isError %v for %s", res.IsError, env)
	}
	structured, _ := json.Marshal(res.StructuredContent)
	var a, b any
	json.Unmarshal(structured, &a)
	json.Unmarshal([]byte(text.Text), &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("structured content %s differs from the text %s", structured, text.Text)
	}
	return env
}

func codes(envs ...envelope.Envelope) []string { return adaptertest.Codes(envs) }

// A registered tool and a guarded handler, served the same way.
var setups = map[string]func(t *testing.T, mail *adaptertest.Mail) *server.MCPServer{
	"Register": func(t *testing.T, mail *adaptertest.Mail) *server.MCPServer {
		s := server.NewMCPServer("mail", "1.0.0")
		if err := mcpgo.Register(s, mail.Tool(t), &mcpgo.Options{Class: agenttool.Reconcilable}); err != nil {
			t.Fatal(err)
		}
		return s
	},
	"Guard": func(t *testing.T, mail *adaptertest.Mail) *server.MCPServer {
		opts := mail.Options()
		opts.IdentifyingFields = []string{"to", "subject", "body"}
		guard, err := mcpgo.NewGuard(map[string]agenttool.Options{"send_email": opts}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := server.NewMCPServer("mail", "1.0.0", server.WithToolHandlerMiddleware(guard.Middleware()))
		s.AddTool(mcp.NewTool("send_email", mcp.WithDescription("Send one email."+agenttool.EnvelopeHint),
			mcp.WithString("to", mcp.Required()), mcp.WithString("subject", mcp.Required()), mcp.WithString("body", mcp.Required())),
			func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				var in adaptertest.Email
				if err := req.BindArguments(&in); err != nil {
					return mcp.NewToolResultError(err.Error()), nil
				}
				sent, err := mail.Send(ctx, in)
				if err != nil {
					return nil, err
				}
				return mcp.NewToolResultStructuredOnly(sent), nil
			})
		return s
	},
}

func each(t *testing.T, loseReplies int, silent bool, run func(t *testing.T, mail *adaptertest.Mail, c *client.Client)) {
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			mail := adaptertest.NewMail(loseReplies, silent)
			run(t, mail, connect(t, serve(t, setup(t, mail)), "user-7"))
		})
	}
}

// A write whose reply is lost is checked with the destination, not run
// again; the client's identical resend is replayed. One email.
func TestLostReplyIsOneEffect(t *testing.T) {
	each(t, 1, false, func(t *testing.T, mail *adaptertest.Mail, c *client.Client) {
		got := codes(call(t, c, "send_email", adaptertest.Base), call(t, c, "send_email", adaptertest.Again))
		if want := []string{"success+reconciled", "success+replayed+reconciled"}; !slices.Equal(got, want) {
			t.Errorf("the client read %v, want %v", got, want)
		}
		mail.Check(t, 1)
	})
}

// After an unknown outcome a reworded copy is held by the unknown fence
// and the resend meets the unknown action. One email.
func TestRewordedCopyAfterUnknownIsHeld(t *testing.T) {
	each(t, 1, true, func(t *testing.T, mail *adaptertest.Mail, c *client.Client) {
		got := codes(call(t, c, "send_email", adaptertest.Base), call(t, c, "send_email", adaptertest.Reworded), call(t, c, "send_email", adaptertest.Again))
		if want := []string{"unknown_outcome/outcome_unknown", "unknown_outcome/earlier_action_unknown", "unknown_outcome/outcome_unknown"}; !slices.Equal(got, want) {
			t.Errorf("the client read %v, want %v", got, want)
		}
		mail.Check(t, 1)
	})
}

// Copies of one call sent at once, as a client's parallel tool calls or
// resends, write once.
func TestParallelCopiesAreOneEffect(t *testing.T) {
	each(t, 1, false, func(t *testing.T, mail *adaptertest.Mail, c *client.Client) {
		args := []string{adaptertest.Base, adaptertest.Again, adaptertest.Base, adaptertest.Again}
		envs := make([]envelope.Envelope, len(args))
		var wg sync.WaitGroup
		for i, a := range args {
			wg.Go(func() { envs[i] = call(t, c, "send_email", a) })
		}
		wg.Wait()
		adaptertest.CheckOneFresh(t, envs)
		mail.Check(t, 1)
	})
}

// A model's own key, input that is not an object and a caller without a
// principal are refused with an envelope; nothing runs.
func TestRefusalsAreEnvelopes(t *testing.T) {
	each(t, 0, false, func(t *testing.T, mail *adaptertest.Mail, c *client.Client) {
		got := codes(
			call(t, c, "send_email", `{"to":"ana@example.com","subject":"Invoice 42","body":"Hi","Idempotency-Key":"k-1"}`),
			call(t, c, "send_email", `["ana@example.com"]`),
			call(t, c, "send_email", `{"to":"ana@example.com"}`),
		)
		if want := []string{"definite_failure/model_supplied_key", "definite_failure/invalid_input", "definite_failure/invalid_input"}; !slices.Equal(got, want) {
			t.Errorf("the client read %v, want %v", got, want)
		}
		url := serve(t, setups[t.Name()[strings.LastIndex(t.Name(), "/")+1:]](t, mail))
		if env := call(t, connect(t, url, ""), "send_email", adaptertest.Base); env.Error == nil || env.Error.Code != envelope.CodeMissingScope {
			t.Errorf("a call without a principal read %s", env)
		}
		mail.Check(t, 0)
	})
}

// A registered tool is listed with its real input schema, the envelope's
// output schema and idempotentHint.
func TestRegisterListsTheRealSchema(t *testing.T) {
	mail := adaptertest.NewMail(0, false)
	c := connect(t, serve(t, setups["Register"](t, mail)), "user-7")
	list, err := c.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(list.Tools)
	for _, want := range []string{`"required":["to","subject","body"]`, `"outputSchema"`, `"idempotentHint":true`, `"readOnlyHint":false`, `never add an idempotency key`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("tools/list lacks %s: %s", want, b)
		}
	}
}

// A guarded handler's isError may come after it acted: unknown by default,
// definite when the options say so; other tools pass through untouched.
func TestGuardReadsIsError(t *testing.T) {
	for _, tc := range []struct {
		opts *mcpgo.Options
		want string
	}{
		{nil, "unknown_outcome/outcome_unknown"}, // at most once, no approver: it stays unknown
		{&mcpgo.Options{ToolErrors: mcpgo.DefiniteToolErrors}, "definite_failure/rejected"},
	} {
		opts := agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce, TextInput: true}
		guard, err := mcpgo.NewGuard(map[string]agenttool.Options{"flaky": opts}, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		s := server.NewMCPServer("mail", "1.0.0", server.WithToolHandlerMiddleware(guard.Middleware()))
		s.AddTool(mcp.NewTool("flaky"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultError("the mail server timed out"), nil
		})
		s.AddTool(mcp.NewTool("plain"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("untouched"), nil
		})
		c := connect(t, serve(t, s), "user-7")
		env := call(t, c, "flaky", `{"x":"1"}`)
		if got := codes(env)[0]; got != tc.want || !strings.Contains(env.Error.Message, "timed out") {
			t.Errorf("isError read as %s, want %s", env, tc.want)
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = "plain"
		res, err := c.CallTool(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if text, _ := mcp.AsTextContent(res.Content[0]); text.Text != "untouched" {
			t.Errorf("an unguarded tool answered %q", text.Text)
		}
	}
}

func TestOptionsRefuseWhatCannotWork(t *testing.T) {
	mail := adaptertest.NewMail(0, false)
	s := server.NewMCPServer("mail", "1.0.0")
	if err := mcpgo.Register(s, mail.Tool(t), &mcpgo.Options{Class: 9}); err == nil {
		t.Error("Register took an unknown class")
	}
	if _, err := mcpgo.NewGuard(nil, nil); err == nil {
		t.Error("NewGuard took no tools")
	}
	if _, err := mcpgo.NewGuard(map[string]agenttool.Options{"send_email": mail.Options()}, nil); err == nil {
		t.Error("NewGuard took a tool without identifying fields")
	}
}

// An adversarial client — every restatement of the action sent at once,
// then a reworded copy and a resend after the unknown outcome — gets one
// email out of send_email, registered or guarded; every answer is true.
func TestAdversarialClient(t *testing.T) {
	each(t, 1, true, func(t *testing.T, mail *adaptertest.Mail, c *client.Client) {
		turns := adaptertest.AdversaryTurns()
		var wg sync.WaitGroup
		for _, call := range turns[0].Calls {
			if call.Name != "send_email" || !json.Valid([]byte(call.Arguments)) {
				continue // not a tools/call a client can send: unknown names and non-JSON are refused by mcp-go
			}
			wg.Go(func() {
				req := mcp.CallToolRequest{}
				req.Params.Name = call.Name
				req.Params.RawArguments = json.RawMessage(call.Arguments)
				res, err := c.CallTool(t.Context(), req)
				if err != nil {
					return // refused by mcp-go (a null or non-object "arguments")
				}
				text, _ := mcp.AsTextContent(res.Content[0])
				if _, err := envelope.Parse([]byte(text.Text)); err != nil {
					t.Errorf("%s: the result is not an envelope: %v", call.Arguments, err)
				}
			})
		}
		wg.Wait()
		for _, next := range turns[1].Calls {
			if env := call(t, c, next.Name, next.Arguments); env.Status == envelope.Success {
				t.Errorf("after an unknown outcome, %s read %s", next.Arguments, env)
			}
		}
		mail.Check(t, 1)
	})
}
