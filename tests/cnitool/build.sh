#!/usr/bin/env bash
# Builds tests/cnitool/cnitool offline, in GOPATH mode, against Debian's libcni sources
# (golang-go + golang-github-appc-cni-dev). Usage: bash tests/cnitool/build.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gopath="$here/gopath"
pkg="$gopath/src/tern.local/cnitool"
mkdir -p "$pkg" "$gopath/cache"
cp "$here/main.go" "$pkg/main.go"
export GO111MODULE=off GOFLAGS= GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0
export GOPATH="$gopath:/usr/share/gocode" GOCACHE="$gopath/cache"
cd "$pkg"
go build -o "$here/cnitool" .
echo "built $here/cnitool"
