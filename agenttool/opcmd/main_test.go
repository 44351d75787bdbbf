package opcmd_test

import (
	"os"
	"testing"

	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// TestMain gives the PostgreSQL tests a server (pgtest.Main).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
