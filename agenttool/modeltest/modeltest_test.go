package modeltest_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool/modeltest"
)

// The scripted model answers in the real wire format with the calls of
// its script — several calls in one reply are one message of parallel
// calls, each with its own id — reads back the tool results it is sent,
// and refuses a request without its key.
func TestTheScriptedModelSpeaksChatCompletions(t *testing.T) {
	s := modeltest.ChatCompletions(modeltest.Scripted(t,
		modeltest.Calls(modeltest.Call{Name: "a", Arguments: `{"x":1}`}, modeltest.Call{Name: "b", Arguments: `{}`}),
		modeltest.Final("done")))
	url := modeltest.Serve(t, s)
	post := func(key string, body any) (int, map[string]any) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, _ := post("wrong", map[string]any{"messages": []any{}}); code != http.StatusNotFound {
		t.Errorf("a request without the key: %d", code)
	}
	_, first := post(modeltest.Key, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "go"}}})
	msg := first["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	calls := msg["tool_calls"].([]any)
	if len(calls) != 2 || calls[0].(map[string]any)["id"] == calls[1].(map[string]any)["id"] {
		t.Fatalf("parallel calls: %v", calls)
	}
	_, second := post(modeltest.Key, map[string]any{"messages": []any{
		map[string]any{"role": "user", "content": "go"},
		msg,
		map[string]any{"role": "tool", "tool_call_id": "1", "content": `{"status":"success"}`},
		map[string]any{"role": "tool", "tool_call_id": "2", "content": `{"status":"unknown_outcome"}`},
	}})
	if got := s.Results(); len(got) != 2 || got[1] != `{"status":"unknown_outcome"}` {
		t.Errorf("results read: %q", got)
	}
	if text := second["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"]; text != "done" {
		t.Errorf("final: %v", text)
	}
	if n := len(s.Requests()); n != 2 {
		t.Errorf("%d requests kept, want 2 (the refused one is not)", n)
	}
}
