// Package benchtool is the tool and the input every benchmark measures, so
// that the Go benchmarks and the benchmark program measure the same thing.
package benchtool

import (
	"context"
	"encoding/json"
	"strconv"
)

// Tool is a cheap langchaingo tool: it parses its input and answers, as a
// tool in front of a fast destination would. Its zero value is ready.
type Tool struct{}

type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

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
