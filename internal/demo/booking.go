package demo

import (
	"encoding/json"
	"fmt"

	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest"
	"github.com/retrysafe/retrysafe/envelope"
)

// BookFlight is the offline model of the booking examples (booking-agent,
// and mcp-agent over MCP). It plays a real, imperfect model: it books;
// after an unknown outcome it books again; and once booked, unsure, it
// books once more with its arguments in another order.
func BookFlight(string) Script {
	const first = `{"flight":"TP1234","date":"2026-12-12","passenger":"Ana Lima"}`
	const again = `{"passenger":"Ana Lima","flight":"TP1234","date":"2026-12-12"}`
	return func(results []string) langchaintest.Turn {
		call := func(args string) langchaintest.Turn {
			return langchaintest.Call("book_flight", args)
		}
		if len(results) == 0 {
			return call(first)
		}
		last, err := envelope.Parse([]byte(results[len(results)-1]))
		if err != nil {
			return langchaintest.Final("The tool's answer was unreadable.")
		}
		switch {
		case last.Status == envelope.Success && len(results) == 1:
			return call(again) // "just to be sure"
		case last.Status == envelope.Success:
			var b struct{ Flight, Date, Confirmation string }
			json.Unmarshal(last.Result, &b)
			return langchaintest.Final(fmt.Sprintf("Ana Lima is booked on %s on %s, confirmation %s.", b.Flight, b.Date, b.Confirmation))
		case last.Status == envelope.UnknownOutcome && len(results) < 4:
			return call(again)
		case last.Status == envelope.UnknownOutcome:
			return langchaintest.Final("The booking may have gone through; it is being verified (" + last.RequestRef + ").")
		}
		return langchaintest.Final("I could not book the flight: " + last.Error.Message)
	}
}
