module airlock.invalid/idnagen

go 1.26.8

require (
	github.com/airlock-sandbox/airlock v0.0.0
	golang.org/x/net v0.62.0
	golang.org/x/text v0.43.0
)

replace github.com/airlock-sandbox/airlock => ../../../..
