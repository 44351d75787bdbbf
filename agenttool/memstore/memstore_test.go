package memstore_test

import (
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) agenttool.Store { return memstore.New() },
		Kill: func(t *testing.T, s agenttool.Store) { s.(*memstore.Store).Close() },
	})
}
