module github.com/retrysafe/retrysafe

go 1.26.8

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/google/uuid v1.6.0
	github.com/tmc/langchaingo v0.1.14
	go.etcd.io/bbolt v1.5.0
)

require (
	github.com/dlclark/regexp2 v1.10.0 // indirect
	github.com/pkoukk/tiktoken-go v0.1.6 // indirect
	go.starlark.net v0.0.0-20230302034142-4b1e35fe2254 // indirect
	golang.org/x/sys v0.45.0 // indirect
)
