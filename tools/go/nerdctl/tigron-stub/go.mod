// Stand-in for nerdctl's test-harness module github.com/containerd/nerdctl/mod/tigron: nerdctl's
// go.mod replaces it with ./mod/tigron, a directory of its repository that the module proxy does not
// serve (no version of it is published), so a module that depends on nerdctl must supply it. Of its
// packages only `tig` (one interface, copied unchanged from nerdctl v2.2.0, Apache-2.0) is in
// cmd/nerdctl's import graph (via cmd/nerdctl/helpers -> pkg/testutil); the rest are test-only.
module github.com/containerd/nerdctl/mod/tigron

go 1.23.0
