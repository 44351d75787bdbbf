package httpsend_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// h2Server speaks just enough HTTP/2 without TLS (prior knowledge) to
// answer each request as a test says: it reads frames, and when a stream's
// request is complete it calls answer with the request's number (from 1),
// which acts or not and writes the stream's answer. It decodes no headers.
type h2Server struct {
	answer func(n int, s *h2Stream)

	mu       sync.Mutex
	requests int
	effects  int
	ln       net.Listener
}

// h2Stream is one request's stream, to answer.
type h2Stream struct {
	w      *h2Writer
	id     uint32
	server *h2Server
}

// HTTP/2 frame types, flags and error codes (RFC 9113).
const (
	frameData     = 0x0
	frameHeaders  = 0x1
	frameRST      = 0x3
	frameSettings = 0x4
	framePing     = 0x6
	frameGoAway   = 0x7

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4

	codeProtocolError = 0x1
	codeRefusedStream = 0x7
)

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// startH2 serves s on loopback and returns its http:// URL.
func startH2(t *testing.T, s *h2Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return "http://" + ln.Addr().String()
}

// h2Client returns a transport that speaks HTTP/2 without TLS, as the
// server does.
func h2Client() *http.Transport {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: p}
}

func (s *h2Server) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	preface := make([]byte, len(clientPreface))
	if _, err := io.ReadFull(r, preface); err != nil || string(preface) != clientPreface {
		return
	}
	w := &h2Writer{c: c}
	w.frame(frameSettings, 0, 0, nil)
	for {
		var h [9]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return
		}
		payload := make([]byte, int(h[0])<<16|int(h[1])<<8|int(h[2]))
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		typ, flags, id := h[3], h[4], binary.BigEndian.Uint32(h[5:])&0x7fffffff
		switch {
		case typ == frameSettings && flags&flagAck == 0:
			w.frame(frameSettings, flagAck, 0, nil)
		case typ == framePing && flags&flagAck == 0:
			w.frame(framePing, flagAck, 0, payload)
		case typ == frameGoAway:
			return
		case (typ == frameHeaders || typ == frameData) && flags&flagEndStream != 0:
			s.mu.Lock()
			s.requests++
			n := s.requests
			s.mu.Unlock()
			s.answer(n, &h2Stream{w: w, id: id, server: s})
		}
	}
}

// act counts an effect of the request.
func (st *h2Stream) act() {
	st.server.mu.Lock()
	st.server.effects++
	st.server.mu.Unlock()
}

// reset ends the stream with RST_STREAM and code.
func (st *h2Stream) reset(code uint32) {
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], code)
	st.w.frame(frameRST, 0, st.id, p[:])
}

// goAway sends GOAWAY with no error and a last stream ID below this
// stream's: the server will not process it.
func (st *h2Stream) goAway() {
	var p [8]byte
	binary.BigEndian.PutUint32(p[:4], st.id-1)
	st.w.frame(frameGoAway, 0, 0, p[:])
}

// ok answers 200 with no body: a HEADERS frame holding ":status: 200"
// (index 8 of HPACK's static table).
func (st *h2Stream) ok() {
	st.w.frame(frameHeaders, flagEndHeaders|flagEndStream, st.id, []byte{0x88})
}

func (s *h2Server) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects
}

// h2Writer writes frames to a connection.
type h2Writer struct {
	mu sync.Mutex
	c  net.Conn
}

func (w *h2Writer) frame(typ, flags byte, id uint32, payload []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var h [9]byte
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	binary.BigEndian.PutUint32(h[5:], id)
	w.c.Write(append(h[:], payload...))
}
