module github.com/airlock-sandbox/airlock/bench

go 1.26.0

require (
	github.com/airlock-sandbox/airlock v0.0.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/ulikunitz/xz v0.5.17 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/net v0.62.0 // indirect
)

replace github.com/airlock-sandbox/airlock => ../
