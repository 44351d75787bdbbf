// Command booking-agent: an agent books one seat through an HTTP booking API
// on loopback that honours Idempotency-Key, with retrysafe guarding the
// booking.
//
// The book_flight tool is keyed: it sends the request reference as the
// Idempotency-Key, so a retry after a lost or late response is answered with
// the booking already made, never a second one. It also sends the claim's
// fencing token, and the service refuses a request with a lower one than
// it has seen for the key: a replica paused past its lease cannot book
// after another took the booking over. The service and the tool live in
// internal/demo, shared with the openai and Eino agents.
//
//	go run ./examples/booking-agent                      # offline, fault lost-response
//	go run ./examples/booking-agent -fault slow
//	go run ./examples/booking-agent -h                   # flags and faults
package main

import "github.com/retrysafe/retrysafe/internal/demo"

var example = demo.Example{
	Name:      "booking-agent",
	Faults:    demo.BookingFaults,
	Prompt:    "Book Ana Lima on TP1234 on 12 December.",
	Principal: "tenant-42/user-7",
	Session:   "conversation-12",
	Label:     "Sam Diaz, trip to Lisbon",
	Setup:     demo.SetupBooking, // the booking service on loopback, and book_flight over it
	Script:    demo.BookFlight,
}

func main() { demo.Main(example) }
