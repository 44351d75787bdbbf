package boltstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// An import of many records in one call, in no particular order, costs
// about what the same records imported a few thousand at a time do: the
// records are written in key order, so bbolt's nodes, which a transaction
// keeps whole until it commits, grow at their ends. Written in the order
// given, 100,000 records in one call took 13.2 s (7,500 records/s),
// against 1.3 s in key order and 1.7 s in calls of 5,000.
func BenchmarkImportOfManyRecordsInOneCall(b *testing.B) {
	const n = 100_000
	t0 := time.Unix(1_780_000_000, 0)
	recs := make([]storekit.Record, n)
	for i := range recs {
		recs[i] = succeeded(fmt.Sprintf("send_email/%032x", rand.Uint64()), t0, time.Hour)
	}
	for _, batch := range []int{n, 5_000} {
		b.Run(fmt.Sprintf("records=%d/batch=%d", n, batch), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s, err := Open(filepath.Join(b.TempDir(), "keys.db"), nil)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for i := 0; i < n; i += batch {
					if err := s.Import(context.Background(), recs[i:i+batch]); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				s.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
