// Package reconcile asks a destination what became of a request whose outcome
// is unknown, by its request reference, before any new write is proposed.
//
// A [Reconciler] checks one reference and answers with a [Verdict]:
//
//   - [Applied]: the destination has the effect; the answer carries the
//     destination's result, which becomes the envelope's result;
//   - [NotApplied]: the destination certainly does not have it, and will not
//     get it later: a new attempt with the same reference is safe;
//   - [Pending]: the destination is still working on it;
//   - [CantSay]: the check itself failed; the answer carries the error.
//
// Only NotApplied lets a tool run again. Answer it only when the destination
// can prove absence: a request still in flight must be Pending, and a search
// that could miss the request must be CantSay.
//
// [Poll] wraps a reconciler to check again, with backoff, while the answer is
// Pending or the check failed transiently, within a bound.
//
// # Writing a reconciler
//
// A reconciler is asked about a [Request]: the reference, the number of
// attempts, and the latest time an attempt may have been sent (kept by the
// store, so it survives a restart). [Func] adapts a function of the
// reference alone; [RequestFunc] one of the whole request, for verdicts
// such as "not found, and sent more than five minutes ago":
//
//	r := reconcile.RequestFunc(func(ctx context.Context, req reconcile.Request) reconcile.Answer {
//		found, err := outbox.Find(ctx, req.Ref)
//		switch {
//		case err != nil:
//			return reconcile.CantSayBecause(err)
//		case found != nil:
//			return reconcile.AppliedWith(found.JSON())
//		case time.Since(req.LastSent) > 5*time.Minute: // longer than the outbox takes to show a message
//			return reconcile.NotAppliedYet()
//		}
//		return reconcile.StillPending()
//	})
//
// The tool passes its request reference downstream on every attempt (see
// agenttool.RequestRef); the reconciler looks for it.
//
// An HTTP API that honours an Idempotency-Key (the IETF idempotency-key
// draft) or stores a client reference: ask for the status by that key, for
// example GET /payments?client_reference=REF. 200 with the resource ⇒
// Applied with its body; 404 for a key the server is sure it never saw ⇒
// NotApplied; 409 (the first request is still in progress) or 202 ⇒ Pending;
// a network error or a 5xx ⇒ CantSay with the error.
//
//	r := reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
//		resp, err := client.Get(ctx, "/bookings/by-key/"+url.PathEscape(ref))
//		if err != nil {
//			return reconcile.CantSayBecause(err)
//		}
//		switch resp.StatusCode {
//		case 200:
//			return reconcile.AppliedWith(resp.Body)
//		case 404:
//			return reconcile.NotAppliedYet()
//		case 409, 202:
//			return reconcile.StillPending()
//		}
//		return reconcile.CantSayBecause(fmt.Errorf("status %d", resp.StatusCode))
//	})
//
// SMTP: derive the Message-ID from the reference (for example
// "<REF@your.domain>") when sending, and search the mailbox or the
// provider's message log by Message-ID: found ⇒ Applied with the message id;
// not found ⇒ NotApplied only if the log is complete for the time the message
// could have been accepted (otherwise Pending until then); the search failed
// ⇒ CantSay.
//
// A database: write the reference into the row the effect creates (a unique
// column request_ref), in the same transaction as the effect. SELECT by it:
// a row ⇒ Applied with the row; no row ⇒ NotApplied, because the effect and
// its reference commit together or not at all.
//
// This package imports only the envelope package and the standard library.
package reconcile
