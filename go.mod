module github.com/retrysafe/retrysafe

go 1.26.8
