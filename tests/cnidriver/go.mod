// cnidriver (main.go): the VM tests' CNI runtime over libcni, built by build.sh.
module roce-ipvlan.test/cnidriver

go 1.26.0

require github.com/containernetworking/cni v1.3.1

require (
	go.opentelemetry.io/otel v1.29.0 // indirect
	go.opentelemetry.io/otel/trace v1.29.0 // indirect
)
