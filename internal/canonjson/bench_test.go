package canonjson_test

import (
	"testing"

	"github.com/retrysafe/retrysafe/internal/canonjson"
)

// BenchmarkAppendObject canonicalises a typical ~300-byte tool input into a
// reused Object, as a guarded tool does.
func BenchmarkAppendObject(b *testing.B) {
	in := []byte(`{"to":"user1@example.com","subject":"Your booking is confirmed","body":"Hello, your seat 14C on flight TP1234 from Lisbon to Porto on 12 December at 09:40 is confirmed. Please arrive at the gate 30 minutes before departure. Reply to this message if anything needs to change."}`)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	buf := make([]byte, 0, 1024)
	var obj canonjson.Object
	for b.Loop() {
		if err := obj.Append(buf[:0], in); err != nil {
			b.Fatal(err)
		}
	}
}
