package storekit

import "context"

// Codec transforms outcomes on their way into and out of a store: to
// redact personal data or to encrypt. Decode must invert Encode for
// outcomes to be replayed. key is the request reference, usable as
// associated data. A Codec must be safe for concurrent use.
type Codec interface {
	Encode(key string, outcome []byte) ([]byte, error)
	Decode(key string, stored []byte) ([]byte, error)
}

// Holder is what a store learns about a key's holder from the context of a
// guarded tool's attempt, or of a check or compensation that holds the key:
// a store that keeps data for the call (boltstore.Store.Effect) checks the
// token in the same transaction, and encodes what it keeps with the codec.
type Holder struct {
	Key   string // the request reference
	Token uint64 // the fencing token of the claim that holds the key
	Codec Codec  // the tool's codec; nil keeps data as it is
}

// HolderKey is the context key of a [Holder]: agenttool's contexts answer
// it with the holder of their call.
type HolderKey struct{}

// WithHolder returns ctx carrying h.
func WithHolder(ctx context.Context, h Holder) context.Context {
	return context.WithValue(ctx, HolderKey{}, h)
}

// HolderFrom returns the holder on ctx, if any.
func HolderFrom(ctx context.Context) (Holder, bool) {
	h, ok := ctx.Value(HolderKey{}).(Holder)
	return h, ok
}
