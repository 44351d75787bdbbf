// Package interop runs `retrysafe guard` against software this project
// did not write: the official MCP TypeScript SDK and the MCP Inspector's
// CLI as clients, the reference servers server-memory and
// server-filesystem as upstreams, at the versions package-lock.json pins.
// Its tests count what reaches each server through a wrapper around the
// server's stdio, inject a lost reply, and check every envelope against
// the deliveries counted. They need Node.js and `npm ci --prefix
// internal/interop`; without them they skip. See docs/guard.md, "Interop".
package interop
