// Package readme checks that README.md and the pages of docs/ stay true to
// the module. Its tests extract every ```go block of them, declare what a
// block leaves to its reader (in HTML comments just before it:
// <!-- vars: ctx context.Context; model llms.Model --> for variables of the
// block, <!-- decls: … --> for top-level declarations), and vet the package
// with the blocks added through an overlay; they check that every relative
// link and #anchor points at a file and a heading that exist; and they hold
// what the pages say of a tool's error text and of an HTTP status.
package readme
