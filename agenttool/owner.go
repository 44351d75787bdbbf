package agenttool

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// Lease owners must differ between claims in every process sharing a store.
// A random process prefix and a counter make that so for the price of an
// atomic add, where a random UUID per call would cost a read from the
// system's random source.
var (
	ownerPrefix = func() string {
		var b [8]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:]) + "-"
	}()
	ownerSeq atomic.Uint64
)

func newOwner() string {
	var b [40]byte
	return string(appendOwner(b[:0]))
}

func appendOwner(b []byte) []byte {
	return strconv.AppendUint(append(b, ownerPrefix...), ownerSeq.Add(1), 36)
}
