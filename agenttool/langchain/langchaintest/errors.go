package langchaintest

import "errors"

// ErrUnexpectedTurn is wrapped by the error a [Model] answers when the
// agent asks for a turn the script did not foresee: one beyond the script's
// end, a scripted call of a tool the agent did not offer, or a turn for
// which a [Func] script returned an error.
var ErrUnexpectedTurn = errors.New("unexpected turn")

// ErrCheckFailed is wrapped by the error a [Model] answers when a turn's
// Check refuses the tool result the model read at that turn. The Check's
// own error is wrapped too.
var ErrCheckFailed = errors.New("check failed")

// ErrNotPlayed is wrapped by [Model.Err] when the agent stopped asking
// before the script's end: turns were left, or a [Func] script's last turn
// was a tool call whose result the model never read.
var ErrNotPlayed = errors.New("script not played to its end")
