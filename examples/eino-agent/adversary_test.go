package main

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/adversary"
)

var bookingPlan = adversary.Plan{
	Tool:     "book_flight",
	Base:     `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`,
	Reworded: `{"flight":"TP 1234","date":"2026-12-12","passenger":"Ana M. Lima"}`,
}

// An adversarial model, through a real Eino react agent, gets no second
// booking past book_flight, and every envelope it reads is true.
func TestAdversarialModel(t *testing.T) {
	for _, fault := range []string{"lost-response", "slow"} {
		t.Run(fault, func(t *testing.T) {
			adversary.RunExample(t, example, bookingPlan, fault, 1)
		})
	}
}
