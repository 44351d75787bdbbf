package boltstore_test

import (
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) agenttool.Store { return boltstore.OpenTemp(t) },
		Kill: func(t *testing.T, s agenttool.Store) { s.(*boltstore.Store).Close() },
		Reopen: func(t *testing.T, s agenttool.Store) agenttool.Store {
			path := s.(*boltstore.Store).Path()
			s.(*boltstore.Store).Close()
			again, err := boltstore.Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { again.Close() })
			return again
		},
	})
}
