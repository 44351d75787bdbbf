package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/mail"
	"strings"
	"sync"

	"github.com/emersion/go-smtp"
)

// message is one accepted email.
type message struct {
	ID, From, To, Subject, Body string
}

// mailbox is the mail server's store. Its search index catches up with
// accepted messages one search late, as real mailbox search does: a message
// just accepted may not be found yet, so "not found" proves nothing while the
// index lags.
type mailbox struct {
	mu        sync.Mutex
	messages  []message
	indexed   int // messages[:indexed] are searchable
	delivered func(m message)
}

func (b *mailbox) accept(m message) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.messages = append(b.messages, m)
	if b.delivered != nil {
		b.delivered(m)
	}
}

// search finds a message by Message-ID. complete reports whether the index
// covered every accepted message when it looked.
func (b *mailbox) search(id string) (found *message, complete bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() { b.indexed = len(b.messages) }() // the index catches up after each search
	for i := range b.messages[:b.indexed] {
		if b.messages[i].ID == id {
			return &b.messages[i], true
		}
	}
	return nil, b.indexed == len(b.messages)
}

func (b *mailbox) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.messages)
}

// mailServer is a real SMTP server on loopback (github.com/emersion/go-smtp)
// in front of the mailbox, with faults.
type mailServer struct {
	box     *mailbox
	fault   string
	srv     *smtp.Server
	addr    string
	mu      sync.Mutex
	dropped bool
}

func startMailServer(box *mailbox, fault string) (*mailServer, error) {
	s := &mailServer{box: box, fault: fault}
	s.srv = smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &session{s: s, conn: c}, nil
	}))
	s.srv.Domain = "mail.example"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.addr = l.Addr().String()
	go s.srv.Serve(l)
	return s, nil
}

func (s *mailServer) close() { s.srv.Close() }

// dropOnce reports whether this delivery's acknowledgement is to be lost.
func (s *mailServer) dropOnce() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if (s.fault != "lost-ack" && s.fault != "reword" && s.fault != "index-down") || s.dropped {
		return false
	}
	s.dropped = true
	return true
}

type session struct {
	s        *mailServer
	conn     *smtp.Conn
	from, to string
}

func (x *session) Mail(from string, _ *smtp.MailOptions) error { x.from = from; return nil }

func (x *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if x.s.fault == "bad-recipient" {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: fmt.Sprintf("<%s>: no such mailbox", to)}
	}
	x.to = to
	return nil
}

func (x *session) Data(r io.Reader) error {
	msg, err := mail.ReadMessage(r)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(msg.Body)
	m := message{ID: msg.Header.Get("Message-Id"), From: x.from, To: x.to, Subject: msg.Header.Get("Subject"), Body: strings.TrimSpace(string(body))}
	if m.ID == "" {
		return &smtp.SMTPError{Code: 554, Message: "a Message-ID is required"}
	}
	x.s.box.accept(m)
	if x.s.dropOnce() {
		// Stored; the final "250 OK" never reaches the client.
		x.conn.Conn().Close()
		return errors.New("connection dropped after storing the message")
	}
	return nil
}

func (x *session) Reset()        {}
func (x *session) Logout() error { return nil }
