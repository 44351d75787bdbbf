package envelope_test

import (
	"fmt"

	"github.com/retrysafe/retrysafe/envelope"
)

// A Go caller reads the envelope a wrapped tool returned to the model.
func ExampleParse() {
	out := `{"version":1,"status":"unknown_outcome","tool":"send_email","request_ref":"send_email/k3x",` +
		`"attempts":1,"error":{"code":"outcome_unknown","message":"read tcp: i/o timeout"},` +
		`"next":"do_not_retry","note":"The email may already have been sent."}`
	e, err := envelope.Parse([]byte(out))
	if err != nil {
		fmt.Println(err)
		return
	}
	switch e.Status {
	case envelope.Success:
		fmt.Println("done:", string(e.Result))
	case envelope.DefiniteFailure:
		fmt.Println("not applied:", e.Error.Code)
	case envelope.UnknownOutcome:
		fmt.Println("pending verification:", e.RequestRef, "next:", e.Next)
	}
	// Output: pending verification: send_email/k3x next: do_not_retry
}

// A tool marks what its errors mean for the effect.
func ExampleClassify() {
	rejected := envelope.MarkDefinite(fmt.Errorf("mailbox does not exist"), "invalid_recipient")
	fmt.Println(envelope.Classify(rejected), envelope.Code(rejected))
	fmt.Println(envelope.Classify(&envelope.HTTPError{StatusCode: 503}))
	fmt.Println(envelope.Classify(&envelope.HTTPError{StatusCode: 502, Method: "POST"}))
	fmt.Println(envelope.Classify(fmt.Errorf("something odd")))
	// Output:
	// definite invalid_recipient
	// transient
	// unknown
	// unknown
}
