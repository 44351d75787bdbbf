package demo

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Booking is one seat booked.
type Booking struct {
	Confirmation string `json:"confirmation"`
	Flight       string `json:"flight"`
	Date         string `json:"date"`
	Passenger    string `json:"passenger"`
}

// keyEntry is what the service remembers of an Idempotency-Key.
type keyEntry struct {
	fingerprint [32]byte
	done        bool
	response    []byte
}

// fencingHeader carries the fencing token of the client's claim on the
// key (agenttool.CallInfo.Token): it grows with every claim of the key, so
// a request that carries a lower token than one the service has seen for
// the key comes from a holder whose claim was taken over since.
const fencingHeader = "Fencing-Token"

// BookingService is an HTTP booking API on loopback that honours
// Idempotency-Key as the IETF idempotency-key draft describes: the first
// request with a key is processed; a repeat with the same parameters gets
// the first response replayed; a repeat while the first is in progress gets
// 409; a repeat with other parameters gets 422. GET /bookings/by-key/KEY
// answers the status of a key.
//
// It also makes every request with a Fencing-Token header a conditional
// write: it keeps the highest token seen for each key, from writes and
// status checks alike, and refuses a request with a lower one — 412
// Precondition Failed, before anything else is looked at — so that a
// holder whose claim was taken over (a process paused past its lease) can
// no longer act once the new holder has been heard from.
type BookingService struct {
	fault      string
	slowCommit time.Duration // the "slow" fault commits this late
	log        func(format string, args ...any)

	mu       sync.Mutex
	keys     map[string]*keyEntry
	fences   map[string]uint64 // the highest fencing token seen for a key
	bookings []Booking
	posts    int
	stale    int // requests refused for a stale fencing token

	srv *http.Server
	URL string // the service's base URL
}

// StartBookingService serves the booking API on a free port of 127.0.0.1
// with the fault (lost-response, none, unavailable, slow).
func StartBookingService(fault string, slowCommit time.Duration, log func(string, ...any)) (*BookingService, error) {
	s := &BookingService{fault: fault, slowCommit: slowCommit, log: log, keys: map[string]*keyEntry{}, fences: map[string]uint64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /bookings", s.book)
	mux.HandleFunc("GET /bookings/by-key/{key...}", s.status)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.URL = "http://" + l.Addr().String()
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(l)
	return s, nil
}

// Close stops the service.
func (s *BookingService) Close() { s.srv.Close() }

// Count returns the seats booked.
func (s *BookingService) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bookings)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (s *BookingService) book(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || key == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "an Idempotency-Key header and a JSON body are required"})
		return
	}
	var b Booking
	if err := json.Unmarshal(body, &b); err != nil || b.Flight == "" || b.Passenger == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "flight and passenger are required"})
		return
	}
	fp := sha256.Sum256(body)
	token, fenced, err := fencingToken(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}

	s.mu.Lock()
	s.posts++
	post := s.posts
	if fenced && !s.fence(key, token) {
		s.mu.Unlock()
		s.log("booking service: 412, key %s is held under a newer fencing token than %d", short(key), token)
		writeJSON(w, http.StatusPreconditionFailed, map[string]string{"error": staleMessage})
		return
	}
	if s.fault == "unavailable" && post <= 2 {
		s.mu.Unlock()
		s.log("booking service: 503, try later (request %d)", post)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "overloaded"})
		return
	}
	e, seen := s.keys[key]
	switch {
	case seen && e.fingerprint != fp:
		s.mu.Unlock()
		s.log("booking service: 422, key %s came back with other parameters", short(key))
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "Idempotency-Key reused with different parameters"})
		return
	case seen && !e.done:
		s.mu.Unlock()
		s.log("booking service: 409, the first request with key %s is still in progress", short(key))
		writeJSON(w, http.StatusConflict, map[string]string{"error": "a request with this Idempotency-Key is in progress"})
		return
	case seen:
		resp := e.response
		s.mu.Unlock()
		s.log("booking service: key %s seen before, replaying its response", short(key))
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(resp)
		return
	}
	e = &keyEntry{fingerprint: fp}
	s.keys[key] = e
	s.mu.Unlock()

	if s.fault == "slow" && post == 1 {
		time.Sleep(s.slowCommit) // the client gives up before this
	}
	s.mu.Lock()
	b.Confirmation = fmt.Sprintf("BK-%d", 1000+len(s.bookings)+1)
	s.bookings = append(s.bookings, b)
	e.response, _ = json.Marshal(b)
	e.done = true
	s.mu.Unlock()
	s.log("booking service: committed %s, %s on %s for %s", b.Confirmation, b.Flight, b.Date, b.Passenger)

	if s.fault == "lost-response" && post == 1 {
		s.log("booking service: ...and the response is lost")
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(e.response)
}

func (s *BookingService) status(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	token, fenced, err := fencingToken(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.mu.Lock()
	if fenced && !s.fence(key, token) {
		s.mu.Unlock()
		writeJSON(w, http.StatusPreconditionFailed, map[string]string{"error": staleMessage})
		return
	}
	e, seen := s.keys[key]
	s.mu.Unlock()
	if fenced {
		// Every request with a lower token is refused from now on: a
		// "not found" is final.
		w.Header().Set(fencingHeader, strconv.FormatUint(token, 10))
	}
	switch {
	case !seen:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no request with this key"})
	case !e.done:
		writeJSON(w, http.StatusConflict, map[string]string{"error": "in progress"})
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Write(e.response)
	}
}

// staleMessage is the error of a request refused for its fencing token.
const staleMessage = "a newer holder of this Idempotency-Key has been heard from (a higher Fencing-Token): this request is stale and was not processed"

// fencingToken reads a request's Fencing-Token, if it has one.
func fencingToken(r *http.Request) (token uint64, ok bool, err error) {
	v := r.Header.Get(fencingHeader)
	if v == "" {
		return 0, false, nil
	}
	token, err = strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s must be a decimal number, not %q", fencingHeader, v)
	}
	return token, true, nil
}

// fence records token for key and reports whether it is at least the
// highest the service has seen for it: false means the request is stale.
// s.mu is held.
func (s *BookingService) fence(key string, token uint64) bool {
	if token < s.fences[key] {
		s.stale++
		return false
	}
	s.fences[key] = token
	return true
}

// StaleCount returns how many requests were refused for a stale fencing
// token.
func (s *BookingService) StaleCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stale
}

func short(key string) string {
	if i := strings.IndexByte(key, '/'); i >= 0 && len(key) > i+9 {
		return key[:i+9] + "…"
	}
	return key
}
