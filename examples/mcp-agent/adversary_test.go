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

// An adversarial model, through the real executor and both sides of MCP,
// gets no second booking past book_flight with any fault (and none at all
// without a token), and every envelope it reads is true.
func TestAdversarialModel(t *testing.T) {
	for fault, want := range map[string]int{"lost-response": 1, "duplicate-delivery": 1, "none": 1, "unauthenticated": 0} {
		t.Run(fault, func(t *testing.T) {
			adversary.RunExample(t, example, bookingPlan, fault, want)
		})
		t.Run(fault+"/parallel", func(t *testing.T) {
			adversary.RunParallel(t, example, bookingPlan, fault, want)
		})
	}
}
