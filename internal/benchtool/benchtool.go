// Package benchtool is the tool and the input every benchmark measures, so
// that the Go benchmarks and the benchmark program measure the same thing.
package benchtool

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
)

// Tool is a cheap langchaingo tool: it parses its input and answers, as a
// tool in front of a fast destination would. Its zero value is ready.
type Tool struct{}

type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

// Fields are the input's members, all of which identify an action.
var Fields = []string{"to", "subject", "body"}

// Name implements tools.Tool.
func (Tool) Name() string { return "send_email" }

// Description implements tools.Tool.
func (Tool) Description() string { return "Send an email." }

// Call implements tools.Tool.
func (Tool) Call(_ context.Context, in string) (string, error) {
	var e email
	if err := json.Unmarshal([]byte(in), &e); err != nil {
		return "", err
	}
	return `{"message_id":"<1@mail.example>"}`, nil
}

// Input returns a typical tool input of about 300 bytes; i makes each one a
// distinct logical action.
func Input(i int64) string {
	return `{"to":"user` + strconv.FormatInt(i, 10) + `@example.com","subject":"Your booking is confirmed",` +
		`"body":"Hello, your seat 14C on flight TP1234 from Lisbon to Porto on 12 December at 09:40 is confirmed.` +
		` Please arrive at the gate 30 minutes before departure. Reply to this message if anything needs to change."}`
}

// Steady is a guarded Tool on a memstore kept in the steady state of a store
// swept at its key lifetime: a synthetic clock (the real one plus a skew)
// advances by KeyTTL/Live per call, so that about Live records are current,
// and every 256th call sweeps the expired ones. The sweep is timed with the
// calls: a long-running store pays for it too.
type Steady struct {
	tool  *agenttool.Tool
	store *memstore.Store
	skew  atomic.Int64 // nanoseconds
	calls atomic.Int64
}

// Live is how many records a Steady store holds.
const Live = 4096

// destinationKeyTTL is the shortest time a destination may keep an
// idempotency key that the default retry window and lease allow; keyTTL,
// the shortest key lifetime a Keyed tool then takes: that, plus the
// default ClockSkew.
const (
	destinationKeyTTL = 75 * time.Second
	keyTTL            = destinationKeyTTL + time.Second
)

// NewSteady returns a Steady tool of class Keyed.
func NewSteady() *Steady {
	s := &Steady{store: memstore.New()}
	tool, err := agenttool.Wrap(Tool{}, agenttool.Options{
		Store: s.store, Class: agenttool.Keyed, KeyTTL: keyTTL, DestinationKeyTTL: destinationKeyTTL, Now: s.now,
		IdentifyingFields: Fields,
	})
	if err != nil {
		panic(err)
	}
	s.tool = tool
	return s
}

func (s *Steady) now() time.Time { return time.Now().Add(time.Duration(s.skew.Load())) }

// Invoke makes the i-th call.
func (s *Steady) Invoke(ctx context.Context, i int64) envelope.Envelope {
	s.skew.Add(int64(keyTTL / Live))
	env := s.tool.Invoke(ctx, Input(i))
	if s.calls.Add(1)%256 == 0 {
		if _, err := storekit.SweepAll(ctx, s.store, s.now(), 0, nil); err != nil {
			panic(err)
		}
	}
	return env
}
