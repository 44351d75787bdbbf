// Package readme checks that the Go in README.md compiles against the
// module's API, so that the README cannot drift from it. Its test extracts
// every ```go block, declares what a block leaves to its reader (in HTML
// comments just before it: <!-- vars: ctx context.Context; model llms.Model -->
// for variables of the block, <!-- decls: … --> for top-level
// declarations), and vets the package with the blocks added through an
// overlay.
package readme
