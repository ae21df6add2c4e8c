module github.com/pileup/pileup/deploy/grafana/gen

go 1.24

require github.com/grafana/grafana-foundation-sdk/go v0.0.22
