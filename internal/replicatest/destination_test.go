package replicatest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fault is what goes wrong with the first write of an intended action.
type fault uint8

const (
	noFault fault = iota
	// killBeforeSend: the replica is SIGKILLed just before its write
	// leaves, and restarted at once: the mail service never sees the
	// write.
	killBeforeSend
	// killAfterCommit: the write is sent, then the replica is SIGKILLed
	// before the answer leaves, so it never records the outcome; it
	// restarts at once.
	killAfterCommit
	// lostReply: the write is sent, and the answer is lost (the
	// connection is cut).
	lostReply
	// slowCommit: the write lands late — after the sender gave up on it
	// and a check was answered "pending" — and its answer is lost.
	slowCommit
	// pauseBeforeWrite: the replica is stopped (SIGSTOP) after its last
	// look at its context and before its write leaves; it is resumed
	// (SIGCONT) once another replica has taken the action over and sent
	// it, and its write then arrives with the older fencing token.
	pauseBeforeWrite
	// lostAnswer: the MCP answer of the first call for the action is lost
	// on its way back to the model (the round-robin client's side).
	lostAnswer
	faultCount
)

func (f fault) String() string {
	return [...]string{"none", "kill-before-send", "kill-after-commit", "lost-reply", "slow-commit", "pause-before-write", "lost-answer"}[f]
}

// effect is one email the mail service sent.
type effect struct {
	Ref       string
	To        string
	Token     uint64
	Replica   string
	Received  time.Time
	Committed time.Time
}

// write is one write the mail service received, and what became of it.
type write struct {
	Ref, To, Replica string
	Token            uint64
	At               time.Time
	Fate             string
}

// intentState is what the mail service knows of an intended action, by its
// recipient.
type intentState struct {
	fault fault
	fired bool
	// the paused write, for pauseBeforeWrite
	pausedRef, pausedReplica string
	pausedToken              uint64
}

// mailService is the destination: an HTTP mail service on 127.0.0.1 that
// does not deduplicate (every write it accepts sends an email), counts the
// emails per intended action (the recipient), and answers status checks
// truthfully: sent; pending while a write it received has not landed yet;
// not found — and, when it checks fencing tokens, "not found, and no older
// token will be accepted from now on", which makes the answer final.
type mailService struct {
	url      string
	srv      *http.Server
	replicas *replicaSet

	mu       sync.Mutex
	fencing  bool // writes and checks carrying a token lower than one seen for the reference are refused
	effects  []effect
	writes   []write
	sentRef  map[string]int       // emails sent, by reference
	results  map[string][]byte    // the answer of a reference's first email
	maxToken map[string]uint64    // the highest token seen for a reference, in writes and checks
	inflight map[string]int       // writes received, not landed yet, by reference
	checked  map[string]chan bool // slowCommit: closed once a check of the reference was answered pending
	intents  map[string]*intentState
	changed  chan struct{} // closed and replaced at every write and check
	runEnded chan struct{} // closed when the current run's model is done
	pauses   sync.WaitGroup
}

func startMailService(replicas *replicaSet) (*mailService, error) {
	m := &mailService{replicas: replicas, sentRef: map[string]int{}, results: map[string][]byte{}, maxToken: map[string]uint64{},
		inflight: map[string]int{}, checked: map[string]chan bool{}, intents: map[string]*intentState{}, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /send", m.send)
	mux.HandleFunc("GET /status", m.status)
	mux.HandleFunc("GET /control/before-write", m.beforeWrite)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m.url = "http://" + l.Addr().String()
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go m.srv.Serve(l)
	return m, nil
}

func (m *mailService) close() { m.srv.Close() }

// recipient is an address as the mail service reads it.
func recipient(to string) string { return strings.ToLower(strings.TrimSpace(to)) }

// beginRun sets the faults of a run's intended actions, by recipient, and
// whether the service checks fencing tokens during the run.
func (m *mailService) beginRun(fencing bool, faults map[string]fault) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fencing = fencing
	m.runEnded = make(chan struct{})
	for to, f := range faults {
		m.intents[recipient(to)] = &intentState{fault: f}
	}
}

// endRun says that the run's model is done, and waits for a paused replica
// to be resumed.
func (m *mailService) endRun() {
	m.mu.Lock()
	close(m.runEnded)
	m.mu.Unlock()
	m.pauses.Wait()
}

// broadcast wakes whoever waits for a write or a check. m.mu is held.
func (m *mailService) broadcast() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// commit sends one email. m.mu is held.
func (m *mailService) commit(ref, to, replica string, token uint64, received time.Time) []byte {
	m.effects = append(m.effects, effect{Ref: ref, To: to, Token: token, Replica: replica, Received: received, Committed: time.Now()})
	m.sentRef[ref]++
	answer, _ := json.Marshal(sent{ID: fmt.Sprintf("msg-%d", len(m.effects)), To: to})
	if m.results[ref] == nil {
		m.results[ref] = answer
	}
	m.broadcast()
	return answer
}

func (m *mailService) send(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	ref, replica := r.Header.Get(headerRef), r.Header.Get(headerReplica)
	token, err := strconv.ParseUint(r.Header.Get(headerToken), 10, 64)
	var in email
	if err != nil || ref == "" || json.NewDecoder(r.Body).Decode(&in) != nil {
		http.Error(w, "a reference, a fencing token and an email are required", http.StatusBadRequest)
		return
	}
	to := recipient(in.To)
	m.mu.Lock()
	log := func(fate string) {
		m.writes = append(m.writes, write{Ref: ref, To: to, Replica: replica, Token: token, At: received, Fate: fate})
	}
	if token < m.maxToken[ref] && m.fencing {
		log("refused: stale fencing token")
		m.mu.Unlock()
		http.Error(w, "stale fencing token", http.StatusPreconditionFailed)
		return
	}
	m.maxToken[ref] = max(m.maxToken[ref], token)
	st := m.intents[to]
	if st == nil {
		m.mu.Unlock()
		http.Error(w, "no such recipient", http.StatusUnprocessableEntity)
		return
	}
	f := noFault
	switch st.fault {
	case killAfterCommit, lostReply, slowCommit:
		if !st.fired {
			f, st.fired = st.fault, true
		}
	}
	switch f {
	case killAfterCommit:
		log("sent, then the sender is killed")
		m.commit(ref, to, replica, token, received)
		m.mu.Unlock()
		m.replicas.killAndRestart(replica) // dead before it can read an answer
		return
	case lostReply:
		log("sent; the reply is lost")
		m.commit(ref, to, replica, token, received)
		m.mu.Unlock()
		cut(w)
		return
	case slowCommit:
		m.inflight[ref]++
		checked := make(chan bool)
		m.checked[ref] = checked
		m.broadcast()
		m.mu.Unlock()
		select {
		case <-checked:
		case <-time.After(3 * time.Second):
		}
		m.mu.Lock()
		m.inflight[ref]--
		log("landed late; the reply is lost")
		m.commit(ref, to, replica, token, received)
		m.mu.Unlock()
		cut(w)
		return
	}
	log("sent")
	answer := m.commit(ref, to, replica, token, received)
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write(answer)
}

// cut drops the connection without an answer.
func cut(w http.ResponseWriter) {
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		conn.Close()
	}
}

func (m *mailService) status(w http.ResponseWriter, r *http.Request) {
	ref := r.URL.Query().Get("ref")
	var token uint64
	if v := r.Header.Get(headerToken); v != "" {
		var err error
		if token, err = strconv.ParseUint(v, 10, 64); err != nil {
			http.Error(w, "bad fencing token", http.StatusBadRequest)
			return
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.broadcast()
	if token != 0 {
		if token < m.maxToken[ref] && m.fencing {
			http.Error(w, "stale fencing token", http.StatusPreconditionFailed)
			return
		}
		m.maxToken[ref] = max(m.maxToken[ref], token)
	}
	switch {
	case m.sentRef[ref] > 0:
		w.Header().Set("Content-Type", "application/json")
		w.Write(m.results[ref])
	case m.inflight[ref] > 0:
		if c := m.checked[ref]; c != nil {
			close(c)
			delete(m.checked, ref)
		}
		http.Error(w, "a write of this reference is landing", http.StatusConflict)
	default:
		if m.fencing && token != 0 {
			w.Header().Set(headerFenced, "1")
		}
		http.Error(w, "no email with this reference", http.StatusNotFound)
	}
}

// beforeWrite answers a replica about to write, for the faults that strike
// before the write leaves. For the first write of an action whose fault is
// killBeforeSend, the replica is killed (and restarted) while it waits for
// the answer. For pauseBeforeWrite, the replica is stopped (SIGSTOP) while
// it waits, the answer "paused" is written for it to read once resumed,
// and it is resumed later (resumeLater). Otherwise the answer is "go".
func (m *mailService) beforeWrite(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	to, ref, replica := recipient(q.Get("to")), q.Get("ref"), q.Get("replica")
	token, _ := strconv.ParseUint(q.Get("token"), 10, 64)
	m.mu.Lock()
	st := m.intents[to]
	switch {
	case st == nil || st.fired:
	case st.fault == killBeforeSend:
		st.fired = true
		m.writes = append(m.writes, write{Ref: ref, To: to, Replica: replica, Token: token, At: time.Now(), Fate: "never sent: the sender is killed before it leaves"})
		m.mu.Unlock()
		m.replicas.killAndRestart(replica)
		return
	case st.fault == pauseBeforeWrite && m.replicas.hold(replica):
		st.fired, st.pausedRef, st.pausedReplica, st.pausedToken = true, ref, replica, token
		runEnded := m.runEnded
		m.mu.Unlock()
		if err := m.replicas.stop(replica); err != nil {
			m.replicas.resume(replica)
			w.Write([]byte("go"))
			return
		}
		m.mu.Lock()
		m.writes = append(m.writes, write{Ref: ref, To: to, Replica: replica, Token: token, At: time.Now(), Fate: "paused before it leaves (SIGSTOP)"})
		m.pauses.Add(1)
		go m.resumeLater(to, replica, runEnded)
		m.mu.Unlock()
		w.Write([]byte("paused"))
		return
	}
	m.mu.Unlock()
	w.Write([]byte("go"))
}

// resumeLater resumes the paused replica once another replica sent the
// action's email (a takeover happened meanwhile), or the run's model is
// done, or after a bound.
func (m *mailService) resumeLater(to, replica string, runEnded chan struct{}) {
	defer m.pauses.Done()
	bound := time.After(20 * time.Second)
	why := ""
	for why == "" {
		m.mu.Lock()
		sent, changed := m.countTo(to) > 0, m.changed
		m.mu.Unlock()
		if sent {
			why = "after another replica sent the email"
			break
		}
		select {
		case <-changed:
		case <-runEnded:
			why = "when the model was done, nothing sent meanwhile"
		case <-bound:
			why = "after 20s, nothing sent meanwhile"
		}
	}
	m.replicas.resume(replica)
	m.mu.Lock()
	m.writes = append(m.writes, write{To: to, Replica: replica, At: time.Now(), Fate: "resumed (SIGCONT) " + why})
	m.mu.Unlock()
}

// countTo counts the emails sent to a recipient. m.mu is held.
func (m *mailService) countTo(to string) int {
	n := 0
	for _, e := range m.effects {
		if e.To == to {
			n++
		}
	}
	return n
}

// snapshot returns the emails sent so far, and every write received.
func (m *mailService) snapshot() ([]effect, []write) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]effect(nil), m.effects...), append([]write(nil), m.writes...)
}

// landing reports how many writes have arrived and not landed yet.
func (m *mailService) landing() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, k := range m.inflight {
		n += k
	}
	return n
}

// pausedWrite returns the write paused for the action sent to to, if any.
func (m *mailService) pausedWrite(to string) (ref, replica string, token uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st := m.intents[recipient(to)]; st != nil {
		return st.pausedRef, st.pausedReplica, st.pausedToken
	}
	return "", "", 0
}
