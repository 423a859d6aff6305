// Pins SIG Network's policy API (sigs.k8s.io/network-policy-api v0.3.0): the ClusterNetworkPolicy
// CRDs the chart ships (deploy/helm/tern/files/, compared with the module's config/crd/ by
// cargo xtask render-deploy --check) and its conformance suite (conformance/, built with `go test -c`
// as conformance.test; scripts/conformance cnp runs it). See build.env.
module tern.test/netpol-api

go 1.26.6

require sigs.k8s.io/network-policy-api v0.3.0 // indirect

tool sigs.k8s.io/network-policy-api/conformance
