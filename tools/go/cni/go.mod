// Pins upstream cnitool (CNI 1.1.0: STATUS, GC) for the cnitool tier (scripts/build-go).
module tern.test/cni

go 1.24.0

tool github.com/containernetworking/cni/cnitool

require github.com/containernetworking/cni v1.3.0 // indirect
