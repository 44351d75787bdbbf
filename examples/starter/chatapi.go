package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
)

// This file is the world outside your program: a chat API. In your project
// it is Slack, Teams or Matrix.

// message is one message in a channel.
type message struct {
	ID          string `json:"id"`
	Channel     string `json:"channel"`
	Text        string `json:"text"`
	ClientMsgID string `json:"client_msg_id"`
}

// chatAPI is an HTTP chat API on loopback. POST /messages posts a message
// with the client's own client_msg_id; it does not deduplicate — a second
// POST is a second message. GET /messages/search?client_msg_id=ID searches
// for one, through a search index that lags behind new messages: a search
// that did not see every message says so ("complete": false). With
// loseFirst, it loses its first response after posting the message.
type chatAPI struct {
	srv       *httptest.Server
	log       func(format string, args ...any)
	loseFirst bool

	mu       sync.Mutex
	messages []message
	indexed  int // messages[:indexed] are searchable
	posts    int
}

func startChatAPI(loseFirst bool, log func(string, ...any)) *chatAPI {
	api := &chatAPI{log: log, loseFirst: loseFirst}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /messages", api.post)
	mux.HandleFunc("GET /messages/search", api.search)
	api.srv = httptest.NewServer(mux) // 127.0.0.1, a free port
	return api
}

func (api *chatAPI) url() string { return api.srv.URL }
func (api *chatAPI) close()      { api.srv.Close() }

// count returns how many messages were posted.
func (api *chatAPI) count() int {
	api.mu.Lock()
	defer api.mu.Unlock()
	return len(api.messages)
}

// catchUp lets the search index catch up, as it does a little later in a
// real chat service.
func (api *chatAPI) catchUp() {
	api.mu.Lock()
	defer api.mu.Unlock()
	if n := len(api.messages) - api.indexed; n > 0 {
		api.log("chat api: (later) the search index catches up: %d message%s indexed", n, plural(n))
	}
	api.indexed = len(api.messages)
}

func (api *chatAPI) post(w http.ResponseWriter, r *http.Request) {
	var m message
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || json.Unmarshal(body, &m) != nil || m.Channel == "" || m.Text == "" {
		http.Error(w, `{"error":"a JSON message with channel and text is required"}`, http.StatusBadRequest)
		return
	}
	api.mu.Lock()
	api.posts++
	lose := api.loseFirst && api.posts == 1
	m.ID = fmt.Sprintf("M-%d", len(api.messages)+1)
	api.messages = append(api.messages, m)
	api.mu.Unlock()
	api.log("chat api: posted %s in #%s (client_msg_id %s)", m.ID, m.Channel, short(m.ClientMsgID))

	if lose {
		api.log("chat api: ...and the response is lost")
		dropConnection(w)
		return
	}
	response, _ := json.Marshal(m)
	writeJSON(w, http.StatusCreated, response)
}

// searchResult is the answer of GET /messages/search.
type searchResult struct {
	Messages []message `json:"messages"`
	Complete bool      `json:"complete"` // the index covered every message
}

func (api *chatAPI) search(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("client_msg_id")
	api.mu.Lock()
	res := searchResult{Messages: []message{}, Complete: api.indexed == len(api.messages)}
	for _, m := range api.messages[:api.indexed] {
		if id != "" && m.ClientMsgID == id {
			res.Messages = append(res.Messages, m)
		}
	}
	api.mu.Unlock()
	body, _ := json.Marshal(res)
	writeJSON(w, http.StatusOK, body)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
